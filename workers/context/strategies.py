"""Context strategies behind one interface: redfleet's engine and the usual baselines.

    naive            append everything
    sliding_window   the system prompt, the tools and the last N turns
    rolling_summary  past a threshold, older turns become a summary; recent kept
    hybrid           window + summary + the model's key notes
    redfleet         the context engine (slots, clearing, working state)

The summaries of the baselines are made by a ``Summarizer``: by default
``ExtractiveSummarizer``, a deterministic stand-in for a summarizing model
call (labelled as such), or a real call to a cheaper model
(``workers.llm.ModelSummarizer``). Each summary is listed in ``compactions``
with its input and output tokens (and its model), for the caller to record as
a compaction call, so its cost counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shared_state import ArtifactSink

from .budgets import DEFAULT_BUDGETS, ContextBudgets, Slot
from .engine import Block, ContextEngine, ContextRequest, Prompt, ToolSpec
from .messages import Message, turns
from .summarizers import ExtractiveSummarizer, Summarized, Summarizer
from .tokens import Tokenizer, tokenizer_for


class ContextStrategy(Protocol):
    name: str
    compactions: list[Summarized]  # the summarizing calls made since the caller last looked

    def build(self, request: ContextRequest) -> Prompt: ...


def _blocks(
    tok: Tokenizer, system: str, tools: Sequence[ToolSpec], context: Sequence[str], history
) -> list[Block]:
    blocks = [Block(Slot.SYSTEM, system, tok.count(system))]
    blocks += [Block(Slot.TOOLS, t.schema_text, tok.count(t.schema_text)) for t in tools]
    blocks += [Block(Slot.STATE, c, tok.count(c)) for c in context if c]
    blocks += [
        Block(Slot.RESULTS if m.is_tool_result else Slot.TAIL, m.text(), tok.count_message(m))
        for m in history
    ]
    return blocks


def _prompt(tok: Tokenizer, request: ContextRequest, context: Sequence[str], history) -> Prompt:
    history = list(history)
    messages = [Message(role="system", content=request.system)]
    if any(context):
        messages.append(Message(role="user", content="\n\n".join(c for c in context if c)))
    return Prompt(
        messages=[*messages, *history],
        tools=list(request.tools),
        blocks=_blocks(tok, request.system, request.tools, context, history),
        history=list(request.history),
        state=request.state,
    )


@dataclass
class Naive:
    name: str = "naive"
    compactions: list[Summarized] = field(default_factory=list)
    tok: Tokenizer = field(default_factory=tokenizer_for)

    def build(self, request: ContextRequest) -> Prompt:
        return _prompt(self.tok, request, [], request.history)


@dataclass
class SlidingWindow:
    """The last ``turns`` turns (whole turns: a call never loses its result)."""

    window: int = 4
    name: str = "sliding_window"
    compactions: list[Summarized] = field(default_factory=list)
    tok: Tokenizer = field(default_factory=tokenizer_for)

    def build(self, request: ContextRequest) -> Prompt:
        recent = turns(list(request.history))[-self.window :]
        return _prompt(self.tok, request, [], [m for t in recent for m in t])


@dataclass
class RollingSummary:
    """Past ``threshold`` tokens of history, all but the last ``keep`` turns are summarized.

    By ``summarizer`` when one is given (a cheaper model), else extractively.
    """

    threshold: int = 20_000
    keep: int = 3
    summary_tokens: int = 1_500
    name: str = "rolling_summary"
    compactions: list[Summarized] = field(default_factory=list)
    tok: Tokenizer = field(default_factory=tokenizer_for)
    summarizer: Summarizer | None = None
    _summary: str = ""
    _summarized: int = 0  # how many leading turns the summary covers

    def _summarizer(self) -> Summarizer:
        return self.summarizer or ExtractiveSummarizer(self.tok)

    def _recent(self, request: ContextRequest) -> list[Message]:
        grouped = turns(list(request.history))
        live = grouped[self._summarized :]
        if self.tok.count_messages([m for t in live for m in t]) > self.threshold:
            evicted = live[: -self.keep]
            flat = [m for t in evicted for m in t]
            summarized = self._summarizer().summarize(self._summary, flat, self.summary_tokens)
            self._summary = summarized.text
            self.compactions.append(summarized)
            self._summarized += len(evicted)
            live = live[len(evicted) :]
        return [m for t in live for m in t]

    def build(self, request: ContextRequest) -> Prompt:
        recent = self._recent(request)
        summary = f"SUMMARY OF EARLIER STEPS\n{self._summary}" if self._summary else ""
        return _prompt(self.tok, request, [summary], recent)


@dataclass
class Hybrid(RollingSummary):
    """A window, a summary of what fell out of it, and the model's newest key notes."""

    key_facts: int = 5
    name: str = "hybrid"

    def build(self, request: ContextRequest) -> Prompt:
        recent = self._recent(request)
        notes = [
            line
            for m in request.history
            if m.role == "assistant"
            for line in m.content.splitlines()
            if line.startswith(("Noted:", "Decided:"))
        ][-self.key_facts :]
        summary = f"SUMMARY OF EARLIER STEPS\n{self._summary}" if self._summary else ""
        facts = "KEY FACTS\n" + "\n".join(notes) if notes else ""
        return _prompt(self.tok, request, [summary, facts], recent)


class Redfleet:
    """The context engine as a strategy: the task keeps the history it returns."""

    name = "redfleet"

    def __init__(self, sink: ArtifactSink, budgets: ContextBudgets = DEFAULT_BUDGETS) -> None:
        self.engine = ContextEngine(sink, budgets=budgets)
        self.compactions: list[Summarized] = []

    def build(self, request: ContextRequest) -> Prompt:
        return self.engine.build(request)
