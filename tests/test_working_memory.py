"""Working memory over long runs: what the state keeps is chosen by what it is, kept verbatim.

Each test runs the context engine for hundreds of steps the way a task does
(the history and state each build returns are the next build's input) and
asserts on the text of the call that needs an item: verbatim presence, not
reachability through an artifact.
"""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from shared_state import MemoryArtifacts
from workers.context import (
    DEFAULT_BUDGETS,
    CallLedger,
    ContextBudgets,
    ContextEngine,
    ContextRequest,
    Message,
    Prompt,
    Slot,
    SlotBudget,
    ToolCall,
    ToolSpec,
    WorkingState,
    tokenizer_for,
)
from workers.context.budgets import NATIVE_OVERFLOW
from workers.errors import ToolRefused
from workers.tools import Note, verbatim_in, write_note

SYSTEM = "You triage incidents. " * 40
TOOLS = [
    ToolSpec("read_log", "Read log lines.", {"type": "object"}, keeps_arguments=False),
    ToolSpec("create_branch", "Create a branch.", {"type": "object"}),
    ToolSpec("note", "Write your working state.", {"type": "object"}, keeps_arguments=False),
]
TOK = tokenizer_for()


def flood(step: int, ids: int = 4) -> str:
    """A log page naming ``ids`` new request UUIDs (none seen before) and ~1k tokens more."""
    rng = random.Random(step)
    lines = []
    for n in range(60):
        uuid = "-".join("".join(rng.choice("0123456789abcdef") for _ in range(k))
                        for k in (8, 4, 4, 4, 12))  # fmt: skip
        lines.append(f"line {n}: " + (f"req={uuid} " if n < ids else "") + "status ok " * 6)
    return "\n".join(lines)


class Run:
    """A task's loop around the engine: history and state carried from build to build."""

    def __init__(self) -> None:
        self.sink = MemoryArtifacts()
        self.engine = ContextEngine(self.sink)
        self.state = WorkingState(goal="Keep the billing service up.")
        self.history: list[Message] = []
        self.step = 0

    def turn(self, *results: str, say: str = "", call: ToolCall | None = None) -> Prompt:
        """One model turn: its calls (``read_log`` per result, or ``call``), their results,
        and what the user says after them, then the build of the next call."""
        self.step += 1
        calls = [call] if call else [
            ToolCall(id=f"c{self.step}_{n}", name="read_log", arguments={"service": "ledger"})
            for n in range(len(results))
        ]  # fmt: skip
        texts = ["ok"] if call else list(results)
        self.history += [
            Message(role="assistant", content=f"Step {self.step}.", tool_calls=tuple(calls)),
            *(
                Message(role="tool", content=t, tool_call_id=c.id, name=c.name)
                for c, t in zip(calls, texts, strict=True)
            ),
        ]
        if say:
            self.history.append(Message(role="user", content=say))
        prompt = self.engine.build(
            ContextRequest(system=SYSTEM, tools=TOOLS, state=self.state, history=self.history)
        )
        self.history, self.state = prompt.history, prompt.state
        return prompt

    def quote(self, span: str, source: str) -> None:
        """What the ``note`` tool writes for a quote the model took from ``source``."""
        note = Note(kind="quote", text=span, source=source)
        self.state = write_note(self.state, note, step=self.step, tok=TOK, room=200)


def test_a_flood_of_new_identifiers_does_not_evict_what_the_user_or_the_model_named() -> None:
    run = Run()
    run.turn(
        flood(1), say="For the record, and keep it for the whole run: bisect from 7f3e2a91c4d8."
    )
    run.turn(flood(2) + "\nbaseline run: run-4f2a9e17 (green)")
    # The model names the run a tool revealed: named again, it is salient.
    run.history.append(Message(role="assistant", content="Using run-4f2a9e17 as the baseline."))
    chatter = "Status? Any news on the ledger? " * 12  # user turns that fill what they said
    seen = set()
    for step in range(3, 250):
        page = flood(step)
        seen.update(w for w in page.split() if w.startswith("req="))
        prompt = run.turn(page, say=f"{chatter}({step})" if step % 25 == 0 else "")
    assert len(seen) >= 500  # the flood: new identifiers, none named twice
    assert run.state.archived.get("said") and run.state.archived.get("identifiers")
    text = prompt.text()
    assert "7f3e2a91c4d8" in text and "run-4f2a9e17" in text
    assert {"7f3e2a91c4d8", "run-4f2a9e17"} <= set(run.state.salient)


def test_spans_of_every_shape_quoted_at_step_3_are_verbatim_in_the_call_at_step_250() -> None:
    block = (
        "def settle(batch):\n    assert batch.currency == 'EUR'\n    return round(batch.total, 2)"
    )
    spans = [
        block,
        "escalate as team-ops#4417",
        "*/15 3-5 * * 1-5 /usr/local/bin/rotate-keys --region eu-west-1 --dry-run=false",
        "東京リージョンの請求データは毎晩再計算される",
        'owner: "Zoë Ångström-Núñez"',
    ]
    run = Run()
    run.turn(flood(1))
    run.turn(flood(2))
    found = flood(3) + "\n" + "\n".join(spans) + "\n" + flood(33)  # mid-result
    run.turn(found)
    source = run.history[-1]
    for span in spans:  # the model, reading the result it was sent, quotes each
        verbatim_in(Note(kind="quote", text=span, source="a-0"), source.content)
        run.quote(span, source=f"result of {source.tool_call_id}")
    for step in range(4, 251):
        prompt = run.turn(flood(step))
    text = prompt.text()
    assert [span for span in spans if span not in text] == []  # as written: no escapes
    assert "\\u" not in text and "Zo\\u00eb" not in text


def test_a_quote_not_in_its_source_word_for_word_is_refused_naming_the_line() -> None:
    source = "retry:\n  max_attempts: 5\n  backoff: 2s"
    verbatim_in(Note(kind="quote", text="  max_attempts: 5\n  backoff: 2s\n", source="f"), source)
    with pytest.raises(ToolRefused, match="'  backoff: 3s'"):
        verbatim_in(Note(kind="quote", text="max_attempts: 5\n  backoff: 3s", source="f"), source)


def test_a_corrected_value_replaces_the_old_pin_and_says_it_was_superseded() -> None:
    state = WorkingState(goal="g")
    state = write_note(
        state, Note(kind="quote", text="max_retries = 7", source="a-1"), step=3, tok=TOK, room=99
    )
    fixed = Note(kind="quote", text="max_retries = 4", source="a-2", replaces="max_retries = 7")
    state = write_note(state, fixed, step=9, tok=TOK, room=99)
    assert [p.text for p in state.pins] == ["max_retries = 4"]
    (line,) = [d for d in state.dropped if "max_retries = 7" in d]
    assert "superseded" in line and "max_retries = 4" in line


def test_the_models_own_argument_is_pinned_whole_and_a_readers_is_not() -> None:
    branch = "hotfix/billing-rounding-zoë-2026-12"
    run = Run()
    run.turn(flood(1))
    run.turn(call=ToolCall(id="b1", name="create_branch", arguments={"name": branch}))
    step = 3
    while any(c.id == "b1" for m in run.history for c in m.tool_calls):  # until it rolls away
        prompt = run.turn(flood(step), flood(step + 1000))
        step += 1
        assert step < 1_000, "the turn never rolled out of the tail"
    for later in range(step, step + 50):
        prompt = run.turn(flood(later))
    assert any(p.text == branch and "create_branch" in p.source for p in run.state.pins)
    assert branch in prompt.text()
    assert not any(p.text == "ledger" for p in run.state.pins)  # read_log's argument


def test_pinned_spans_over_their_budget_are_listed_as_dropped_never_lost_silently() -> None:
    run = Run()
    spans = [f"keep line {n}: " + "runbook step " * 12 + "end" for n in range(40)]
    for span in spans:
        run.quote(span, source="user")
    for step in range(1, 80):
        run.turn(flood(step))
    kept = [p.text for p in run.state.pins]
    assert 0 < len(kept) < len(spans)
    archived = [s for s in spans if s not in kept]
    chain, at = "", run.state.index
    while at:  # every index names the one before it
        part = run.sink.text(at)
        chain += part
        at = part.split('"previous": "', 1)[1].split('"', 1)[0]
    told = "\n".join(run.state.dropped) + chain  # what was dropped: in view or archived too
    for span in archived:
        assert span in chain  # archived whole
        assert f"kept span {span[:60]!r}" in told  # and said so


def test_a_part_over_its_budget_does_not_re_render_the_state_until_its_changes_outgrow_their_block(
) -> None:  # fmt: skip
    run = Run()
    first = run.turn(flood(1))
    ledger = CallLedger()
    ledger.record_prompt(first, step=1, output_tokens=1)
    # Identifiers past their part's budget (as a roll would bring), in one small change.
    names = [f"ACCT-{n}Q{n}X" for n in range(60)]
    assert TOK.count(", ".join(names)) > DEFAULT_BUDGETS.state.identifiers // 2
    run.state = run.state.keep_identifiers(names[:40])
    second = run.turn(flood(2))
    record = ledger.record_prompt(second, step=2, output_tokens=1)
    assert record.bust == ""  # the cached prefix holds: system, tools, the state's snapshot
    before = [b.text for b in first.blocks if b.slot is not Slot.UPDATES]
    assert [b.text for b in second.blocks][: len(before)] == before
    assert "+ identifiers: ACCT-0Q0X" in second.messages[-1].content  # shown as a change
    assert not any("compacted" in a for a in second.actions)


def test_budgets_over_the_high_water_target_are_refused_naming_the_slots() -> None:
    slots = {s: SlotBudget(tokens=5_000, overflow=NATIVE_OVERFLOW[s]) for s in Slot}
    with pytest.raises(ValidationError) as err:
        ContextBudgets(slots=slots)
    message = str(err.value)
    assert "add up to 40,000 tokens, over the target of 33,000" in message
    assert "results 5,000" in message and "updates 5,000" in message
    assert sum(b.tokens for b in DEFAULT_BUDGETS.slots.values()) <= DEFAULT_BUDGETS.target_total


def test_a_call_stays_within_the_target_while_results_use_the_room_others_leave() -> None:
    run = Run()
    highest = 0
    for step in range(1, 60):
        prompt = run.turn(flood(step), flood(step + 1000))
        highest = max(highest, prompt.total_tokens)
    assert DEFAULT_BUDGETS.tokens(Slot.RESULTS) < highest <= DEFAULT_BUDGETS.target_total


def test_notes_merge_what_they_repeat_and_archived_ones_are_said_dropped() -> None:
    state = WorkingState(goal="g")
    for step, text in enumerate(["ledger lags", "ledger lags", "ledger lags by 40 s on fx"], 1):
        state = write_note(
            state, Note(kind="fact", text=text, source="user"), step=step, tok=TOK, room=99
        )
    assert [f.text for f in state.facts] == ["ledger lags by 40 s on fx"]  # merged, not three
    run = Run()
    for step in range(1, 60):
        run.state = write_note(
            run.state,
            Note(kind="fact", text=f"order {7_740_000 + step} ships from W{step}", source="user"),
            step=step,
            tok=TOK,
            room=99,
        )
        run.turn(flood(step))
    assert run.state.archived["facts"] > 0
    told = "\n".join(run.state.dropped) + run.sink.text(run.state.index)
    assert "earlier notes of steps 1-" in told  # archived, and said so
