"""The job-wide token budget, shared by every worker and subagent of a job.

Each model call reserves its estimated tokens (``reserveTokens``, atomic)
before it is sent and settles with the real usage afterwards; a call that
would overrun the budget raises ``BudgetExceeded`` and is never sent. A
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

# Longer than any model call can take with its retries; a call settled later
# than this is not charged (its reservation was already given back).
RESERVATION_TTL_MS = 15 * 60 * 1000


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

    def reserve(self, tokens: int) -> Reservation:
        """Reserve ``tokens`` for one call; BudgetExceeded if it would overrun."""
        rid = secrets.token_hex(8)
        where = keys.script_keys("reserveTokens", self.job_id)
        res = self.runner.run(
            "reserveTokens", self.job_id, where, [rid, tokens, RESERVATION_TTL_MS]
        )
        check("reserveTokens", res, Asked(job_id=self.job_id, tokens=tokens))
        return Reservation(rid, tokens, _state(res.data))

    def settle(self, reservation: Reservation, used: int) -> BudgetState:
        """Give back ``reservation``, charging the ``used`` tokens (once, however often called)."""
        where = keys.script_keys("settleTokens", self.job_id)
        res = self.runner.run("settleTokens", self.job_id, where, [reservation.id, used])
        return _state(res.data)

    def state(self) -> BudgetState:
        limit, used, reserved = self.runner.client.hmget(self.key, "limit", "used", "reserved")
        return BudgetState(int(limit or 0), int(used or 0), int(reserved or 0))


def _state(data: dict[str, int]) -> BudgetState:
    return BudgetState(int(data["limit"]), int(data["used"]), int(data["reserved"]))
