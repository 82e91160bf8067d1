"""Slots, their token budgets and what each does on overflow.

Slots are assembled in this order — stable first, volatile last — so that a
provider's prefix cache hits on everything that did not change:

    system → tools → reference → state → retrieved → results → tail → updates

The last, ``updates``, is the small volatile block of what changed in the
working state since its snapshot: it sits after everything cached, so a
change shows in the very next call without re-rendering the prefix.

Defaults are per role and configurable. The slots' budgets add up to at most
the high-water target (33k tokens by default), checked when the budgets are
made, so every call fits it. Tool results may also take what the other slots
leave unused of the target (``ContextBudgets.results_room``), never more; a
context is never sent above the hard ceiling (the kill switch).
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
    UPDATES = "updates"


class Overflow(StrEnum):
    FAIL = "fail"  # the prompt must be refactored
    PRUNE_TOOLS = "prune_tools"  # keep the current phase's tools
    COMPACT_STATE = "compact_state"  # archive the oldest fields
    TRUNCATE_TO_ARTIFACT = "truncate_to_artifact"  # keep a head and the full text's handle
    DROP_LOWEST = "drop_lowest"  # drop the lowest-scored items
    ROLL_INTO_STATE = "roll_into_state"  # archive the oldest turns, keep their identifiers
    RESNAPSHOT = "resnapshot"  # re-render the state snapshot (a cache bust from the state on)


# What each slot does on overflow besides failing (any slot may be set to FAIL).
NATIVE_OVERFLOW = {
    Slot.SYSTEM: Overflow.FAIL,
    Slot.TOOLS: Overflow.PRUNE_TOOLS,
    Slot.REFERENCE: Overflow.TRUNCATE_TO_ARTIFACT,
    Slot.STATE: Overflow.COMPACT_STATE,
    Slot.RETRIEVED: Overflow.DROP_LOWEST,
    Slot.RESULTS: Overflow.TRUNCATE_TO_ARTIFACT,
    Slot.TAIL: Overflow.ROLL_INTO_STATE,
    Slot.UPDATES: Overflow.RESNAPSHOT,
}


class SlotBudget(BaseModel):
    model_config = ConfigDict(frozen=True)

    tokens: int = Field(gt=0)
    overflow: Overflow


class StateBudget(BaseModel):
    """Tokens for each part of the working state; each compacts on its own.

    ``said`` holds the user's turns verbatim; ``notes`` the model's decisions,
    facts, open questions and next action; ``pins`` the verbatim spans;
    ``salient`` the identifiers kept for what they are (named by the user, or
    again by the model); ``identifiers``, ``artifacts`` and ``dropped`` the
    code-owned indexes. A part over its budget, when the state is re-rendered,
    archives its oldest entries into the state's index artifact until it is at
    half its budget (names of one shape collapse first, see
    ``compaction``); a user turn or a pin archived is listed in ``dropped``,
    never lost silently. The goal, phase, counters and named refs are small
    and always shown.
    """

    model_config = ConfigDict(frozen=True)

    said: int = Field(default=400, gt=0)
    notes: int = Field(default=400, gt=0)
    pins: int = Field(default=400, gt=0)
    salient: int = Field(default=250, gt=0)
    identifiers: int = Field(default=450, gt=0)
    artifacts: int = Field(default=200, gt=0)
    dropped: int = Field(default=150, gt=0)

    def total(self) -> int:
        parts = (self.said, self.notes, self.pins, self.salient, self.identifiers)
        return sum(parts) + self.artifacts + self.dropped


class ClearingPolicy(BaseModel):
    """When tool results the model has seen are replaced by a stub with their handle.

    A result the model has not yet answered is never cleared. Clearing
    starts once tool results in the context pass ``trigger`` tokens — by
    default the room the rest of the call leaves of the high-water target
    (``ContextBudgets.results_room``) — clears every seen result but the
    ``keep`` most recent, and clears at least ``clear_at_least`` tokens or
    nothing. Each clearing invalidates the cached prefix from the first
    cleared result on — everything after it is re-sent uncached anyway — so a
    clearing is rare and takes all it may: one bust, then a long run of calls
    on a stable prefix. Results of ``exclude_tools`` are never cleared, nor
    is a result no longer than a stub (``engine.KEPT_WHOLE_TOKENS``), which
    is not counted among the ``keep`` either.
    """

    model_config = ConfigDict(frozen=True)

    # Measured (benchmarks/token_economy.py): seen results kept until the call is near the
    # target, then cleared together, keep the cacheable share of input at 0.75 or more.
    trigger: int | None = Field(default=None, gt=0)
    keep: int = Field(default=0, ge=0)
    clear_at_least: int = Field(default=8_000, ge=0)
    exclude_tools: frozenset[str] = frozenset()


class ContextBudgets(BaseModel):
    model_config = ConfigDict(frozen=True)

    slots: dict[Slot, SlotBudget]
    target_total: int = 33_000
    ceiling: int = 60_000
    clearing: ClearingPolicy = ClearingPolicy()
    state: StateBudget = StateBudget()
    stub_identifiers: int = Field(
        default=120,
        gt=0,
        description="tokens of identifiers a reduced result's stub carries from its full text",
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
        if self.state.total() > self.tokens(Slot.STATE):
            raise ValueError("the state's parts must fit in the state slot's budget")
        total = sum(b.tokens for b in self.slots.values())
        if total > self.target_total:
            largest = sorted(self.slots.items(), key=lambda kv: -kv[1].tokens)
            named = ", ".join(f"{slot.value} {b.tokens:,}" for slot, b in largest)
            raise ValueError(
                f"the slots' budgets add up to {total:,} tokens, over the target of "
                f"{self.target_total:,}: lower some of them ({named})"
            )
        if self.ceiling < self.target_total:
            raise ValueError("ceiling must be at least target_total")
        return self

    def tokens(self, slot: Slot) -> int:
        return self.slots[slot].tokens

    def results_room(self, used: int, tail: int) -> int:
        """What tool results may take in a call whose stable slots use ``used`` tokens and
        whose conversation tail holds ``tail``: their own budget at least, and what the
        others leave unused of the target (the state and its changes counted at their
        budgets, as they may grow by then) — never more, so a call stays within the target.
        """
        reserved = used + tail + self.tokens(Slot.STATE) + self.tokens(Slot.UPDATES)
        return max(self.tokens(Slot.RESULTS), self.target_total - reserved)


# They add up to the 33k target. Results take what the rest leave, and at run time also what
# the others leave unused (``results_room``): the seen results kept until a clearing, or a
# parallel batch of two ~500-line files, whole, while the model reads them.
_DEFAULT_TOKENS = {
    Slot.SYSTEM: 3_000,
    Slot.TOOLS: 4_000,
    Slot.REFERENCE: 3_000,
    Slot.STATE: 2_250,
    Slot.RETRIEVED: 600,
    Slot.RESULTS: 17_350,
    Slot.TAIL: 2_400,
    Slot.UPDATES: 400,
}
DEFAULT_BUDGETS = ContextBudgets(
    slots={
        slot: SlotBudget(tokens=tokens, overflow=NATIVE_OVERFLOW[slot])
        for slot, tokens in _DEFAULT_TOKENS.items()
    }
)


def _with(budgets: ContextBudgets, **tokens: int) -> ContextBudgets:
    """``budgets`` with some slots' tokens changed (checked again: they must still add up)."""
    slots = {
        slot: b.model_copy(update={"tokens": tokens.get(slot.value, b.tokens)})
        for slot, b in budgets.slots.items()
    }
    return ContextBudgets.model_validate({**budgets.model_dump(), "slots": slots})


# Per role; every role starts from the defaults and may override any slot. A coder writes
# whole files as tool arguments, which stay in the tail: more tail, fewer results.
ROLE_BUDGETS: dict[str, ContextBudgets] = {
    "planner": DEFAULT_BUDGETS,
    "coder": _with(DEFAULT_BUDGETS, tail=4_000, results=15_750),
    "reviewer": DEFAULT_BUDGETS,
    "subagent": DEFAULT_BUDGETS,
}
