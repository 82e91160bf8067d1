"""Slots, their token budgets and what each does on overflow.

Slots are assembled in this order — stable first, volatile last — so that a
provider's prefix cache hits on everything that did not change:

    system → tools → reference → state → retrieved → results → tail

Defaults are per role and configurable; a call's context aims at about 33k
tokens and is never sent above the hard ceiling (the kill switch).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Slot(StrEnum):
    SYSTEM = "system"
    TOOLS = "tools"
    REFERENCE = "reference"
    STATE = "state"
    RETRIEVED = "retrieved"
    RESULTS = "results"
    TAIL = "tail"


class Overflow(StrEnum):
    FAIL = "fail"  # the prompt must be refactored
    PRUNE_TOOLS = "prune_tools"  # keep the current phase's tools
    COMPACT_STATE = "compact_state"  # archive the oldest fields
    TRUNCATE_TO_ARTIFACT = "truncate_to_artifact"  # keep a head and the full text's handle
    DROP_LOWEST = "drop_lowest"  # drop the lowest-scored items
    ROLL_INTO_STATE = "roll_into_state"  # archive the oldest turns, keep their identifiers


# What each slot does on overflow besides failing (any slot may be set to FAIL).
NATIVE_OVERFLOW = {
    Slot.SYSTEM: Overflow.FAIL,
    Slot.TOOLS: Overflow.PRUNE_TOOLS,
    Slot.REFERENCE: Overflow.TRUNCATE_TO_ARTIFACT,
    Slot.STATE: Overflow.COMPACT_STATE,
    Slot.RETRIEVED: Overflow.DROP_LOWEST,
    Slot.RESULTS: Overflow.TRUNCATE_TO_ARTIFACT,
    Slot.TAIL: Overflow.ROLL_INTO_STATE,
}


class SlotBudget(BaseModel):
    model_config = ConfigDict(frozen=True)

    tokens: int = Field(gt=0)
    overflow: Overflow


class ClearingPolicy(BaseModel):
    """When old tool results are replaced by a one-line stub with their handle.

    Clearing starts once tool results in the context pass ``trigger`` tokens,
    keeps the ``keep`` most recent results, and clears at least
    ``clear_at_least`` tokens or nothing (each clearing invalidates the cached
    prefix from the first cleared result on, so it must be worth it). Results
    of ``exclude_tools`` are never cleared.
    """

    model_config = ConfigDict(frozen=True)

    trigger: int = Field(default=3_000, gt=0)
    keep: int = Field(default=1, ge=0)
    clear_at_least: int = Field(default=1_500, ge=0)
    exclude_tools: frozenset[str] = frozenset()


class ContextBudgets(BaseModel):
    model_config = ConfigDict(frozen=True)

    slots: dict[Slot, SlotBudget]
    target_total: int = 33_000
    ceiling: int = 60_000
    clearing: ClearingPolicy = ClearingPolicy()
    max_result_tokens: int = Field(
        default=1_000,
        gt=0,
        description="a larger tool result keeps a head and its artifact handle in the context",
    )
    state_refresh_steps: int = Field(
        default=12, ge=1, description="re-render the state at least this often (a cache bust)"
    )

    @model_validator(mode="after")
    def _complete(self) -> ContextBudgets:
        missing = set(Slot) - set(self.slots)
        if missing:
            raise ValueError(f"no budget for slot(s): {', '.join(sorted(missing))}")
        for slot, budget in self.slots.items():
            if budget.overflow not in (Overflow.FAIL, NATIVE_OVERFLOW[slot]):
                raise ValueError(
                    f"slot {slot.value}: overflow must be fail or {NATIVE_OVERFLOW[slot].value}"
                )
        if self.ceiling < self.target_total:
            raise ValueError("ceiling must be at least target_total")
        return self

    def tokens(self, slot: Slot) -> int:
        return self.slots[slot].tokens


_DEFAULT_TOKENS = {
    Slot.SYSTEM: 3_000,
    Slot.TOOLS: 4_000,
    Slot.REFERENCE: 4_000,
    Slot.STATE: 2_000,
    Slot.RETRIEVED: 10_000,
    Slot.RESULTS: 8_000,
    Slot.TAIL: 6_000,
}
DEFAULT_BUDGETS = ContextBudgets(
    slots={
        slot: SlotBudget(tokens=tokens, overflow=NATIVE_OVERFLOW[slot])
        for slot, tokens in _DEFAULT_TOKENS.items()
    }
)

# Per role; every role starts from the defaults and may override any slot.
ROLE_BUDGETS: dict[str, ContextBudgets] = {
    "planner": DEFAULT_BUDGETS,
    "coder": DEFAULT_BUDGETS,
    "reviewer": DEFAULT_BUDGETS,
    "subagent": DEFAULT_BUDGETS,
}
