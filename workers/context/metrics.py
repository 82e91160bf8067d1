"""Per-call metrics, cache busts and cost.

Every call records its step, input tokens, the tokens of the byte-identical
prefix it shares with the previous call (what a provider's prefix cache can
serve), the cached tokens the provider reported, output tokens, the tool
called, tool-result and state sizes, latency and the prefix hash. A call
that changed something the previous call had sent — not merely appended —
is a cache bust, recorded with its cause: the slot of the first difference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from .budgets import Slot
from .engine import Block, Prompt


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True)

    input: float
    cached_input: float
    output: float

    def cost(self, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        """USD for a call's tokens (``input_tokens`` includes the cached ones)."""
        fresh = input_tokens - cached_tokens
        return (
            fresh * self.input + cached_tokens * self.cached_input + output_tokens * self.output
        ) / 1e6


# Reference prices (USD per 1M tokens); a model not listed uses "default".
PRICES: dict[str, Price] = {
    "default": Price(input=3.00, cached_input=0.30, output=15.00),
    "claude-sonnet-4": Price(input=3.00, cached_input=0.30, output=15.00),
    "claude-haiku-4": Price(input=0.80, cached_input=0.08, output=4.00),
    "gpt-4.1": Price(input=2.00, cached_input=0.50, output=8.00),
    "gpt-4.1-mini": Price(input=0.40, cached_input=0.10, output=1.60),
}


def price_of(model: str) -> Price:
    return PRICES.get(model, PRICES["default"])


@dataclass(frozen=True)
class CallRecord:
    step: int
    input_tokens: int
    prefix_tokens: int  # shared, byte for byte, with the previous call
    cached_tokens: int  # as the provider reported (0 when it does not say)
    output_tokens: int
    tool: str
    tool_result_bytes: int
    state_bytes: int
    latency_ms: float
    prefix_hash: str
    bust: str = ""  # cause of a cache bust, "" if none
    kind: str = "step"  # "step" or "compaction" (a summarizing call)
    model: str = ""  # the model that served the call, when not the ledger's (a summary model)
    route: str = ""  # the route it took (``admission.route_id``), when it went over one

    def cost_usd(self, price: Price) -> float:
        return price.cost(self.input_tokens, self.cached_tokens, self.output_tokens)


def shared_prefix(previous: list[Block], current: list[Block]) -> tuple[int, str]:
    """Tokens of the leading blocks both calls share, and the bust cause if any.

    A bust is a change to something the previous call sent; growing at the
    end (appending) is not one. The ``updates`` block is volatile by design
    and always last, so its change is not a bust (it costs only itself).
    """
    previous = [b for b in previous if b.slot is not Slot.UPDATES]
    tokens = 0
    for before, now in zip(previous, current, strict=False):
        if before.text != now.text:
            return tokens, f"{now.slot.value} changed"
        tokens += now.tokens
    if len(current) < len(previous):
        return tokens, "history shortened"
    return tokens, ""


class UsageSink(Protocol):
    """Where a job's totals are kept (``shared_state.JobUsage`` in Redis).

    ``event`` carries the call's step metrics into its ``model.called`` event;
    ``settles`` names the call's reservation in the job's budget, settled in the
    same write ("": none).
    """

    def record(
        self,
        *,
        input_tokens: int,
        cached_tokens: int,
        output_tokens: int,
        cost_usd: float,
        compaction: bool = False,
        event: dict[str, str | int] | None = None,
        settles: str = "",
    ) -> object: ...


@dataclass
class CallLedger:
    """The calls of one task (or one benchmark strategy), with totals.

    With a ``job`` sink, every call is also added to the job's totals in Redis,
    its step metrics (tool, tool-result and state bytes, latency) in its event.
    A call to another model than the ledger's (a summary model) is priced at
    that model's prices and names it in its event.
    ``tool_result_bytes`` is what the call delivered: the bytes of the tool
    results the model reads in it (those of the previous step's calls).
    """

    model: str = "default"
    job: UsageSink | None = None
    calls: list[CallRecord] = field(default_factory=list)
    _last_blocks: list[Block] = field(default_factory=list)

    def _price(self, record: CallRecord) -> Price:
        return price_of(record.model or self.model)

    def _add(self, record: CallRecord, settles: str = "") -> CallRecord:
        self.calls.append(record)
        if self.job is not None:
            event: dict[str, str | int] = {
                "tool": record.tool,
                "tool_result_bytes": record.tool_result_bytes,
                "state_bytes": record.state_bytes,
                "latency_ms": round(record.latency_ms),
                "prefix_tokens": record.prefix_tokens,
            }
            if record.model:
                event["model"] = record.model
            if record.route:
                event["route"] = record.route
            self.job.record(
                input_tokens=record.input_tokens,
                cached_tokens=record.cached_tokens,
                output_tokens=record.output_tokens,
                cost_usd=record.cost_usd(self._price(record)),
                compaction=record.kind == "compaction",
                event=event,
                settles=settles,
            )
        return record

    def record_prompt(
        self,
        prompt: Prompt,
        *,
        step: int,
        output_tokens: int,
        input_tokens: int | None = None,
        tool: str = "",
        tool_result_bytes: int = 0,
        cached_tokens: int | None = None,
        latency_ms: float = 0.0,
        model: str = "",
        route: str = "",
        settles: str = "",
    ) -> CallRecord:
        """``model``: the model that answered, when not the ledger's (a fallback: priced as
        it); ``route``: where the call went; ``settles``: the call's reservation in the
        job's budget, settled by the job's record of it (with a ``job`` sink)."""
        prefix, bust = shared_prefix(self._last_blocks, prompt.blocks)
        if not self._last_blocks:
            bust = ""
        self._last_blocks = prompt.blocks
        record = CallRecord(
            step=step,
            # The provider's count when it gave one (it bills by it), else ours.
            input_tokens=prompt.total_tokens if input_tokens is None else input_tokens,
            prefix_tokens=prefix,
            cached_tokens=prefix if cached_tokens is None else cached_tokens,
            output_tokens=output_tokens,
            tool=tool,
            tool_result_bytes=tool_result_bytes,
            state_bytes=len(prompt.state.render().encode()),
            latency_ms=latency_ms,
            prefix_hash=prompt.prefix_hash(),
            bust=bust,
            model="" if model == self.model else model,
            route=route,
        )
        return self._add(record, settles)

    def record_compaction(
        self, *, step: int, input_tokens: int, output_tokens: int, model: str = ""
    ) -> None:
        """A summarizing call made to compact a context (its cost counts too).

        ``model``: the model that made it, when not the ledger's (a summary model).
        """
        self._add(
            CallRecord(
                step=step,
                input_tokens=input_tokens,
                prefix_tokens=0,
                cached_tokens=0,
                output_tokens=output_tokens,
                tool="",
                tool_result_bytes=0,
                state_bytes=0,
                latency_ms=0.0,
                prefix_hash="",
                kind="compaction",
                model=model,
            )
        )

    def totals(self) -> dict[str, float]:
        steps = [c for c in self.calls if c.kind == "step"]
        input_tokens = sum(c.input_tokens for c in self.calls)
        cached = sum(c.cached_tokens for c in self.calls)
        output = sum(c.output_tokens for c in self.calls)
        cost = sum(c.cost_usd(self._price(c)) for c in self.calls)
        return {
            "calls": len(self.calls),
            "total_input_tokens": input_tokens,
            "last_call_tokens": steps[-1].input_tokens if steps else 0,
            "high_water": max((c.input_tokens for c in steps), default=0),
            "cacheable_share": round(cached / input_tokens, 4) if input_tokens else 0.0,
            "cache_busts": sum(1 for c in steps if c.bust),
            "output_tokens": output,
            "cost_usd": round(cost, 4),
        }

    def as_dicts(self) -> list[dict[str, object]]:
        return [asdict(c) for c in self.calls]
