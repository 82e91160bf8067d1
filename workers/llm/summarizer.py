"""``ModelSummarizer``: summaries written by a model of their own (``--summary-model``).

The summarizing call a rolling summary or a Summary over its cap needs, made
to a separate, usually cheaper model: the text and how far to condense it
in, the condensed text and the call's usage out (``Summarized``), for the
caller to record as a compaction call. Its tokens are reserved from the
job's budget before it is sent, like every call (``BudgetExceeded``: not
sent); a provider error passes through for the caller to fall back.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared_state import TokenBudget

from ..context.messages import Message
from ..context.metrics import price_of
from ..context.summarizers import Summarized
from ..context.tokens import tokenizer_for
from .base import Provider

INSTRUCTION = (
    "Condense the text to at most {tokens} tokens. Keep every identifier, number, "
    "file name and artifact id, and every decision; drop the rest."
)


class ModelSummarizer:
    def __init__(self, provider: Provider, *, budget: TokenBudget | None = None) -> None:
        self.provider = provider
        self.budget = budget
        self.tok = tokenizer_for(provider.model)

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> Summarized:
        """The summary so far and ``messages`` (as a transcript), condensed into one summary."""
        transcript = "\n".join(f"{m.role}: {m.text()}" for m in messages)
        return self.condense(f"{previous}\n{transcript}".strip(), max_tokens)

    def condense(self, text: str, max_tokens: int) -> Summarized:
        messages = [
            Message(role="system", content=INSTRUCTION.format(tokens=max_tokens)),
            Message(role="user", content=text),
        ]
        held = None
        price = price_of(self.provider.model)
        if self.budget is not None:
            sent = self.tok.count_messages(messages)
            held = self.budget.reserve(sent + max_tokens, price.cost(sent, 0, max_tokens))
        used, cost = 0, 0.0
        try:
            reply = self.provider.complete(messages, [], max_tokens=max_tokens)
            u = reply.usage
            used = u.input_tokens + u.output_tokens
            cost = price.cost(u.input_tokens, u.cached_tokens, u.output_tokens)
        finally:
            if self.budget is not None and held is not None:
                self.budget.settle(held, used, cost)
        return Summarized(
            reply.text, reply.usage.input_tokens, reply.usage.output_tokens, self.provider.model
        )
