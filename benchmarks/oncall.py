"""The ``oncall`` workload: an on-call agent's 1,000-step shift, shaped unlike the other two.

Results are of every size — short JSON, log pages of 40 to 80 lines, long
dumps of ~8k tokens — and every log line names a fresh request UUID and
trace hash, so new identifiers arrive by the thousand (a flood no recency
rule survives). Every fifth step reads two logs in one turn (parallel
calls). Items of every shape are revealed once, early, and needed late:

- in user turns: a run id, a name with diacritics, and a standing
  instruction given mid-run (step 120) that every later call must carry;
- in the middle of long results: a three-line code block, a cron line, a
  CJK sentence, a version range, a Cyrillic sentence;
- in the second of a pair of parallel results: a command line with flags, a
  three-line config stanza;
- nested deep in a JSON result (the model is told which path matters);
- in the model's own tool arguments: a branch name it chose, PR flags;
- a value corrected later (``max_retries``): the latest must be in the call
  and the old one gone or marked superseded;
- an identifier revealed by a tool and named again by the model.

The model is a stand-in and HONEST (see ``OncallModel``): it acts only on
the context it was sent. A result marks what matters the way a log or a
runbook does (``# keep:`` lines, ``--- keep ---`` blocks, a JSON path to
watch), and the model quotes it — through the ``note`` tool, ``kind=quote``,
checked verbatim against the result it cites — the step after it sees it. If
the engine cut the marked span before the model saw it, the model cannot
quote it, and the item shows as a miss. The engine never looks for these
marks: what it keeps, it keeps by its own rules.

Recall is an item's verbatim presence in the call that needs it (never its
reachability through an artifact), reported item by item with its shape.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

from workers.context import Message, Prompt, ToolCall, ToolSpec, WorkingState, tokenizer_for
from workers.tools import Note, write_note

ONCALL_STEPS = 1_000
_HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Item:
    """One planted item: what it is, where it is revealed, when it is needed."""

    text: str
    shape: str
    where: str
    revealed: int
    needed: tuple[int, ...]
    absent: str = ""  # a value this one corrected: not in the call, or only marked superseded


CODE = "def settle(batch):\n    assert batch.currency == 'EUR'\n    return round(batch.total, 2)"
STANZA = "retry:\n  max_attempts: 5\n  backoff: exponential(base=2s, cap=90s)"
BRANCH = "hotfix/billing-rounding-zoë-2026-12"
PR_FLAGS = "--label=needs-review --reviewer=@team-ops --draft"
NESTED = '"failover_target": "eu-cent-2b/pool-7"'
ITEMS = (
    Item("run-8f3a9c2e71d4", "an id the user gave", "user turn", 2, (300, 999)),
    Item(CODE, "three-line code block", "middle of a long result", 3, (250,)),
    Item(
        "*/15 3-5 * * 1-5 /usr/local/bin/rotate-keys --region eu-west-1 --dry-run=false",
        "cron line",
        "middle of a long result",
        3,
        (250,),
    ),
    Item(
        "東京リージョンの請求データは毎晩再計算される",
        "CJK text",
        "middle of a long result",
        3,
        (250, 700),
    ),
    Item("Zoë Ångström-Núñez", "name with diacritics", "user turn", 5, (295, 900)),
    Item(
        "pg_dump --format=custom --no-owner -t 'billing.*' -f /backups/billing-2026-12.dump",
        "command line with flags",
        "second of a parallel pair",
        10,
        (260,),
    ),
    Item("requests>=2.31.0,<2.33", "version range", "middle of a long result", 14, (280,)),
    Item(NESTED, "value nested deep in JSON", "JSON result", 20, (290,)),
    Item(BRANCH, "name the model chose", "model's tool argument", 30, (310, 800)),
    Item(PR_FLAGS, "flags the model wrote", "model's tool argument", 60, (320,)),
    Item(STANZA, "three-line config stanza", "second of a parallel pair", 45, (340,)),
    Item(
        "Служба биллинга: резервная копия в 03:00 по Москве",
        "Cyrillic text",
        "middle of a long result",
        70,
        (350,),
    ),
    Item(
        "chg-2f81e0c9", "id named again by the model", "tool result, then the model", 80, (400, 990)
    ),
    Item(
        "team-ops#4417",
        "#-ticket in a standing instruction",
        "user turn mid-run",
        120,
        (121, 250, 500, 999),
    ),
    Item(
        "max_retries = 4",
        "corrected value",
        "correction in a later result",
        150,
        (280, 600),
        absent="max_retries = 7",
    ),
)
USER_TURNS = {
    2: "The baseline to compare against is run-8f3a9c2e71d4; keep it handy.",
    5: "Escalations go to Zoë Ångström-Núñez, not to the billing channel.",
    120: "From now on, every status line must cite team-ops#4417.",
    400: "Status check: how far along are you?",
    700: "Keep going; nothing changed on our side.",
}
SERVICES = ["ledger", "invoices", "payouts", "refunds", "fx", "settlement", "dunning", "tax"]


def _uuid(rng: random.Random) -> str:
    h = "".join(rng.choice(_HEX) for _ in range(32))
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _log_lines(rng: random.Random, n: int, service: str) -> list[str]:
    """Log lines, each naming a new request UUID and trace hash (the flood)."""
    lines = []
    for _ in range(n):
        day, hour, minute = rng.randint(1, 30), rng.randint(0, 23), rng.randint(0, 59)
        trace = "".join(rng.choice(_HEX) for _ in range(16))
        status = rng.choice([200, 200, 200, 201, 409, 429, 500, 503])
        lines.append(
            f"2026-11-{day:02d}T{hour:02d}:{minute:02d}Z {service} req={_uuid(rng)} "
            f"trace={trace} status={status} latency_ms={rng.randint(3, 2_400)}"
        )
    return lines


def _marked(item: str, corrects: str = "") -> str:
    """How a result marks what matters: a ``# keep:`` line, or a block for several lines."""
    if "\n" in item or corrects:
        head = f"--- keep (corrects: {corrects}) ---" if corrects else "--- keep ---"
        return f"{head}\n{item}\n--- end ---"
    return f"# keep: {item}"


def _json_result(rng: random.Random) -> str:
    """A nested JSON document; the value to watch is named by its path after it."""
    regions = [
        {
            "name": f"region-{r}",
            "pools": [
                {"id": f"pool-{p}", "weight": rng.randint(1, 9), "failover_target": f"r{r}/p{p}"}
                for p in range(3)
            ],
        }
        for r in range(4)
    ]
    regions[2]["pools"][1]["failover_target"] = "eu-cent-2b/pool-7"
    doc = {"cluster": "billing-prod", "regions": regions, "updated": "2026-11-28T09:12Z"}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n# keep: .regions[2].pools[1]"


class OncallWorkload:
    """The shift's messages step by step, what each step needs, and the model behind them."""

    name = "oncall"
    goal = "Keep the billing platform healthy through the shift; fix what breaks."

    def __init__(self, steps: int = ONCALL_STEPS) -> None:
        self.steps = steps
        self.model = OncallModel()

    def system(self) -> str:
        rng = random.Random(21)
        rules = [
            f"Runbook {i}: "
            + " ".join(rng.choice([*SERVICES, "alert", "page", "ack"]) for _ in range(35))
            + "."
            for i in range(45)
        ]
        return "You are the on-call agent for the billing platform.\n" + "\n".join(rules)

    def tools(self) -> list[ToolSpec]:
        def spec(name: str, description: str, keeps: bool) -> ToolSpec:
            params = {"type": "object", "properties": {"arg": {"type": "string"}}}
            return ToolSpec(name, description, params, keeps_arguments=keeps)

        return [
            spec("read_log", "Read a service's recent log lines.", False),
            spec("read_config", "Read a service's configuration.", False),
            spec("read_lines", "Read lines of an artifact.", False),
            spec("create_branch", "Create a git branch.", True),
            spec("open_pr", "Open a pull request with flags.", True),
            spec("note", "Write into your working state (kind=quote keeps a span).", False),
        ]

    def _result(self, step: int, pair: int, call: ToolCall) -> str:
        """The text of one result: its size and what it hides depend on the step."""
        rng = random.Random(step * 10 + pair)
        service = SERVICES[(step + pair) % len(SERVICES)]
        if call.name in ("create_branch", "open_pr"):
            return f"ok: {call.name} done"
        if step == 20:
            return _json_result(rng)
        if step == 40 and pair == 0:
            return "[payouts]\nworkers = 6\n" + _marked("max_retries = 7") + "\ntimeout_s = 30"
        if step == 150 and pair == 0:
            return "[payouts]\nworkers = 6\n" + _marked("max_retries = 4", "max_retries = 7")
        planted = [i.text for i in ITEMS if i.revealed == step and i.where.startswith("middle")]
        planted += [
            i.text
            for i in ITEMS
            if i.revealed == step and i.where.startswith("second") and pair == 1
        ]
        if step == 80:
            planted_line = "# opened change chg-2f81e0c9 for the payouts retry storm"
            lines = _log_lines(rng, 50, service)
            return "\n".join([*lines[:25], planted_line, *lines[25:]])
        long = step in (3, 14, 70) or (step % 97 == 0)
        lines = _log_lines(rng, 200 if long else rng.randint(40, 80), service)
        middle = len(lines) // 2
        return "\n".join([*lines[:middle], *(_marked(p) for p in planted), *lines[middle:]])

    def messages(self, step: int) -> list[Message]:
        calls = self.model.calls(step)
        results = [
            Message(role="tool", content=self._result(step, n, c), tool_call_id=c.id, name=c.name)
            for n, c in enumerate(c for c in calls if c.name != "note")
        ]
        notes = [
            Message(role="tool", content=self.model.answer(c), tool_call_id=c.id, name="note")
            for c in calls
            if c.name == "note"
        ]
        thought = self.model.thought(step)
        out = [Message(role="assistant", content=thought, tool_calls=tuple(calls)), *notes]
        out += results
        for m in results:
            self.model.delivered[m.tool_call_id or ""] = m.content
        if step in USER_TURNS:
            out.append(Message(role="user", content=USER_TURNS[step]))
        return out

    def observe(self, prompt: Prompt) -> None:
        self.model.read(prompt)

    def write_notes(self, state: WorkingState, step: int) -> WorkingState:
        return self.model.write_notes(state, step)

    def needs(self, step: int) -> list[Item]:
        return [i for i in ITEMS if step in i.needed and step <= self.steps]


_KEEP_LINE = re.compile(r"^# keep: (.+)$", re.M)
_KEEP_BLOCK = re.compile(
    r"^--- keep(?: \(corrects: (.+?)\))? ---\n(.*?)\n--- end ---$", re.M | re.S
)
_JSON_PATH = re.compile(r"^\.regions\[(\d+)\]\.pools\[(\d+)\]$")
_CHANGE = re.compile(r"opened change (chg-[0-9a-f]{8})")


class OncallModel:
    """The stand-in model: its tool calls are scripted, its notes come from what it READ.

    ``read`` sees the prompt of a call, and only its fresh tool results (those
    after its last message): the marked spans it finds there become quote
    notes in its next turn, and a change id it finds is named in its next
    message. What the engine did not show it, it cannot quote.
    """

    def __init__(self) -> None:
        self.pending: list[tuple[str, str, str]] = []  # (span, cited call id, value it corrects)
        self.mention = ""
        self.delivered: dict[str, str] = {}  # call id -> the full text the tool returned
        self.notes: list[tuple[str, str, str]] = []  # made in the current turn, to write
        self.tok = tokenizer_for()

    def calls(self, step: int) -> list[ToolCall]:
        made = []
        for n, (span, cited, corrects) in enumerate(self.pending):
            args = {"kind": "quote", "text": span, "source": f"result of {cited}"}
            if corrects:
                args["replaces"] = corrects
            made.append(ToolCall(id=f"note_{step}_{n}", name="note", arguments=args))
        self.notes, self.pending = list(self.pending), []
        if step == 30:
            made.append(ToolCall(id=f"call_{step}_0", name="create_branch",
                                 arguments={"name": BRANCH}))  # fmt: skip
        elif step == 60:
            args = {"title": "Fix rounding in settlement", "flags": PR_FLAGS}
            made.append(ToolCall(id=f"call_{step}_0", name="open_pr", arguments=args))
        else:
            reads = 2 if step % 5 == 0 else 1
            name = "read_config" if step in (40, 150) else "read_log"
            made += [
                ToolCall(id=f"call_{step}_{r}", name=name, arguments={"service": SERVICES[r]})
                for r in range(reads)
            ]
        return made

    def thought(self, step: int) -> str:
        said = f"Tracking {self.mention}. " if self.mention else ""
        self.mention = ""
        return f"{said}Step {step}: checking the next service."

    def answer(self, call: ToolCall) -> str:
        return f"noted {call.arguments.get('kind', '')}"

    def read(self, prompt: Prompt) -> None:
        messages = prompt.messages
        last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
        for m in messages[last + 1 :]:
            if not m.is_tool_result or m.name == "note":
                continue
            for span in _KEEP_LINE.findall(m.content):
                self.pending.append((self._resolve(span, m.content), m.tool_call_id or "", ""))
            for corrects, span in _KEEP_BLOCK.findall(m.content):
                self.pending.append((span, m.tool_call_id or "", corrects))
            self.mention = " ".join(_CHANGE.findall(m.content)) or self.mention

    @staticmethod
    def _resolve(span: str, text: str) -> str:
        """A ``# keep:`` naming a JSON path means the value there: the line that holds it."""
        path = _JSON_PATH.match(span)
        if not path:
            return span
        doc: Any = json.loads(text[: text.rindex("\n# keep:")])
        pool = doc["regions"][int(path[1])]["pools"][int(path[2])]
        return f'"failover_target": {json.dumps(pool["failover_target"], ensure_ascii=False)}'

    def write_notes(self, state: WorkingState, step: int) -> WorkingState:
        """What the ``note`` tool does with this turn's quotes: each checked verbatim in the
        full text of the result it cites, then written into the state."""
        for span, cited, corrects in self.notes:
            if span not in self.delivered.get(cited, ""):
                continue  # not verbatim in its source: the note tool refuses it
            note = Note(kind="quote", text=span, source=f"result of {cited}", replaces=corrects)
            state = write_note(state, note, step=step, tok=self.tok, room=200)
        self.notes = []
        return state
