"""Summarizers: what turns older turns (or a long answer) into a shorter text.

One seam, two kinds. ``ExtractiveSummarizer``, the default, calls no model:
it keeps the first sentence of each message up to a token cap, a
deterministic stand-in whose input and output tokens are still counted, so
its would-be cost shows. ``workers.llm.ModelSummarizer`` makes the summarizing
call to a model of its own (a cheaper one: ``--summary-model``). Either way
the caller records each ``Summarized`` as a compaction call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .messages import Message
from .tokens import Tokenizer


@dataclass(frozen=True)
class Summarized:
    """A summary and what making it took (a compaction call's usage)."""

    text: str
    input_tokens: int
    output_tokens: int
    model: str = ""  # the model that wrote it; "" when none did


class Summarizer(Protocol):
    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> Summarized:
        """``previous`` (the summary so far) and ``messages`` in at most ``max_tokens`` tokens."""
        ...


class ExtractiveSummarizer:
    """Deterministic stand-in for a summarizing model call: first sentences, capped."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tok = tokenizer

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> Summarized:
        firsts = [re.split(r"(?<=[.!?])\s", m.text(), maxsplit=1)[0][:300] for m in messages]
        text = (previous + "\n" + "\n".join(f for f in firsts if f)).strip()
        summary = self.tok.truncate(text, max_tokens)
        read = self.tok.count(previous) + self.tok.count_messages(list(messages))
        return Summarized(summary, read, self.tok.count(summary))
