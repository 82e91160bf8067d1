"""The job-wide token and money budgets, shared by every worker and subagent of a job.

Each model call reserves its estimated tokens, and its cost at its route's
prices (``reserveTokens``, atomic), before it is sent and settles with the
real usage afterwards; a call that would overrun either budget raises
``BudgetExceeded`` and is never sent. ``raise_to`` lifts the budgets of a job
stopped by one (``redfleet retry --token-budget/--budget-usd``). A
reservation has an id, so a retried reserve or settle (a reply lost on the
wire) counts once, and one never settled (its worker died mid-call) is
dropped after ``RESERVATION_TTL_MS``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from . import keys
from .replies import Asked, check
from .scripts import Runner

# Longer than any model call can take: its wait for admission (``admission.MAX_WAIT_S``,
# 15 minutes, for each route of a fallback chain) and its answer; a call settled later
# than this is not charged (its reservation was already given back).
RESERVATION_TTL_MS = 60 * 60 * 1000


MICRO = 1_000_000  # the budget hash keeps money in micro-dollars


@dataclass(frozen=True)
class BudgetState:
    limit: int  # 0: no limit
    used: int
    reserved: int

    @property
    def remaining(self) -> int | None:
        return None if not self.limit else self.limit - self.used - self.reserved


@dataclass(frozen=True)
class Reservation:
    """Tokens held for one model call until it is settled."""

    id: str
    tokens: int
    state: BudgetState


class TokenBudget:
    def __init__(self, runner: Runner, job_id: str) -> None:
        self.runner = runner
        self.job_id = job_id
        self.key = keys.budget(job_id)

    def reserve(self, tokens: int, cost_usd: float = 0.0) -> Reservation:
        """Reserve ``tokens`` (costing up to ``cost_usd``) for one call; BudgetExceeded if
        it would overrun the job's token or money budget."""
        rid = secrets.token_hex(8)
        where = keys.script_keys("reserveTokens", self.job_id)
        res = self.runner.run(
            "reserveTokens",
            self.job_id,
            where,
            [rid, tokens, RESERVATION_TTL_MS, round(cost_usd * MICRO)],
        )
        check("reserveTokens", res, Asked(job_id=self.job_id, tokens=tokens))
        return Reservation(rid, tokens, _state(res.data))

    def settle(self, reservation: Reservation, used: int, cost_usd: float = 0.0) -> BudgetState:
        """Give back ``reservation``, charging the ``used`` tokens and ``cost_usd`` (once,
        however often called)."""
        where = keys.script_keys("settleTokens", self.job_id)
        res = self.runner.run(
            "settleTokens", self.job_id, where, [reservation.id, used, round(cost_usd * MICRO)]
        )
        return _state(res.data)

    def raise_to(self, *, tokens: int | None = None, usd: float | None = None) -> None:
        """Set the job's token and (or) money budget (0: none), for a job to go on; the
        job's record shows the money budget as it now is."""
        fields: dict[str, int] = {}
        if tokens is not None:
            fields["limit"] = tokens
        if usd is not None:
            fields["limit_usd"] = round(usd * MICRO)
        if not fields:
            return
        with self.runner.client.pipeline(transaction=True) as pipe:
            pipe.hset(self.key, mapping=fields)
            if usd is not None:
                pipe.hset(keys.job(self.job_id), "budget_usd", usd)
            pipe.execute()

    def spent_usd(self) -> tuple[float, float]:
        """The money used so far and the money budget (0.0: none), in USD."""
        used, limit = self.runner.client.hmget(self.key, "used_usd", "limit_usd")
        return int(used or 0) / MICRO, int(limit or 0) / MICRO

    def state(self) -> BudgetState:
        limit, used, reserved = self.runner.client.hmget(self.key, "limit", "used", "reserved")
        return BudgetState(int(limit or 0), int(used or 0), int(reserved or 0))


def _state(data: dict[str, int]) -> BudgetState:
    return BudgetState(int(data["limit"]), int(data["used"]), int(data["reserved"]))
