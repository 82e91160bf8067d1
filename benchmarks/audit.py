"""The ``audit`` workload: a long code audit over ~500-line files, with parallel reads.

Every step the scripted model reads one file; every third step it reads two
in one turn (parallel tool calls). Each file is ~500 lines of generated code
with a few identifiers of its own (its path, a version pin, a docs URL, a
ticket id) that churn through the working state. Items are planted where an
engine that keeps heads, or one id pattern, loses them:

- in the middle of early files (line ~250), in shapes no extractor here was
  written around: an account id with letters after its dash, a whole UUID,
  an invoice handle, a pre-release version, a European amount, a timestamp;
- in user turns: a number and a decision, stated once, early.

Each item is needed at a later step (``needs``): a file item 40 steps after
it was read, the user's number and decision at the last step. The model
mentions none of them and writes no notes: only the engine keeps them.
"""

from __future__ import annotations

import random

from workers.context import Message, ToolCall, ToolSpec

AUDIT_STEPS = (300, 1_000)
FILE_LINES = 500
NEED_AFTER = 40  # steps between reading a planted item and needing it

# step -> the item planted in the middle of the (first) file read at that step
FILE_ITEMS = {
    3: "ACCT-7Q2X9",
    5: "3f2b8c1e-9a4d-4e7b-b1c2-5d6e7f8a9b0c",
    7: "inv_2f9c1e",
    9: "v2.14.0-rc.3",
    12: "€1.234,56",
    14: "2026-03-07T14:05Z",
    16: "ops-billing@acme-payments.io",
    18: "4e1f0c29d3",
}
# step -> (what the user says after that step's results, the item in it)
USER_ITEMS = {
    2: ("Keep the retry ceiling at 4,750 requests per minute while you audit.", "4,750"),
    6: ("Decision: use the staging bucket, not prod.", "use the staging bucket, not prod"),
}

_VOCAB = [
    "ledger",
    "invoice",
    "account",
    "balance",
    "amount",
    "retry",
    "client",
    "session",
    "cache",
    "token",
    "request",
    "response",
    "payload",
    "record",
    "batch",
    "cursor",
    "offset",
    "window",
    "queue",
    "worker",
    "handler",
    "config",
    "schema",
    "field",
    "value",
    "total",
    "count",
    "limit",
    "index",
]


def _line(rng: random.Random, n: int) -> str:
    a, b, c = rng.choice(_VOCAB), rng.choice(_VOCAB), rng.choice(_VOCAB)
    shape = n % 9
    if shape == 0:
        return ""
    if shape == 1:
        return f"def {a}_{b}({c}, {b}=None):"
    if shape == 2:
        return f"    {a} = {b}.get({c!r}, {rng.randint(0, 99)})"
    if shape == 3:
        return f"    if {a} > {b}_{c}:"
    if shape == 4:
        return f"        return {a}({b}, {c})"
    if shape == 5:
        return f"    # {a} {b} {c}: keep {b} in step with the {c}"
    if shape == 6:
        return f"    for {a} in {b}s:"
    if shape == 7:
        return f"        {a}.append({b}[{c}])"
    return f"    log.debug('{a} %s', {b})"


def path(k: int) -> str:
    return f"services/{_VOCAB[k % len(_VOCAB)]}/{_VOCAB[k * 7 % len(_VOCAB)]}_{k}.py"


def source(k: int, planted: str = "") -> str:
    """The k-th file: ~500 lines, its own identifiers up top, ``planted`` in the middle."""
    rng = random.Random(k)
    lines = [_line(rng, n) for n in range(FILE_LINES)]
    lines[0] = f'"""{path(k)}: part of the billing service."""'
    lines[1] = f'__version__ = "1.{k % 40}.{k % 7}"  # see https://docs.acme.dev/billing/{k}'
    lines[2] = f"TICKET = 'BILL-{4000 + k}'"
    if planted:
        lines[FILE_LINES // 2] = f"    # reconciled against {planted} (do not change)"
    return "\n".join(lines)


def system_prompt() -> str:
    rng = random.Random(11)
    rules = [
        f"Rule {i}: " + " ".join(rng.choice(_VOCAB) for _ in range(40)) + "." for i in range(50)
    ]
    return "You audit a billing service's code for risky changes.\n" + "\n".join(rules)


def tools() -> list[ToolSpec]:
    rng = random.Random(12)
    names = ["read_file", "read_lines", "grep_artifact", "list_dir", "run_tests", "open_issue"]
    reads = {"read_file", "read_lines", "grep_artifact", "list_dir"}
    return [
        ToolSpec(
            name=name,
            description=f"{name.replace('_', ' ')}: "
            + " ".join(rng.choice(_VOCAB) for _ in range(150)),
            parameters={
                "type": "object",
                "properties": {
                    f"arg{i}": {"type": "string", "description": " ".join(rng.sample(_VOCAB, 12))}
                    for i in range(4)
                },
            },
            keeps_arguments=name not in reads,
        )
        for name in names
    ]


class AuditWorkload:
    """The audit's messages, step by step, and what each step needs."""

    name = "audit"
    goal = "Audit the billing service for changes that could double-charge a customer."

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.next_file = 0

    def system(self) -> str:
        return system_prompt()

    def tools(self) -> list[ToolSpec]:
        return tools()

    def messages(self, step: int) -> list[Message]:
        reads = 2 if step % 3 == 0 else 1
        calls, results = [], []
        for r in range(reads):
            k = self.next_file
            self.next_file += 1
            call = ToolCall(id=f"call_{step}_{r}", name="read_file", arguments={"path": path(k)})
            planted = FILE_ITEMS.get(step, "") if r == 0 else ""
            calls.append(call)
            results.append(
                Message(
                    role="tool", content=source(k, planted), tool_call_id=call.id, name="read_file"
                )
            )
        thought = f"Reading {', '.join(c.arguments['path'] for c in calls)}."
        out = [Message(role="assistant", content=thought, tool_calls=tuple(calls)), *results]
        if step in USER_ITEMS:
            out.append(Message(role="user", content=USER_ITEMS[step][0]))
        return out

    def needs(self, step: int) -> list[str]:
        """The items the call of this step needs in front of the model."""
        found = [item for planted, item in FILE_ITEMS.items() if planted + NEED_AFTER == step]
        if step == self.steps:
            found += [item for _, item in USER_ITEMS.values()]
        return found
