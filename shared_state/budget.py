"""The job-wide token and money budgets, shared by every worker and subagent of a job.

Each model call reserves its estimated tokens, and its cost at its route's
prices (``reserveTokens``, atomic), before it is sent and settles with the
real usage afterwards; a call that would overrun either budget raises
``BudgetExceeded`` and is never sent. ``raise_to`` lifts the budgets of a job
stopped by one (``redfleet retry --token-budget/--budget-usd``). A
reservation has an id, so a retried reserve or settle (a reply lost on the
wire) counts once, and one never settled (its worker died mid-call) is
dropped after ``RESERVATION_TTL_MS``.

A tenant may have a daily money budget too (``DailySpend``, `redfleet limits
tenant T --daily-usd X`): the call's cost is reserved from it by the same
script, in the same round trip as the job's, and a call that would overrun
either is not sent.

A job submitted without a budget (the default) has nothing to refuse a call
for: its agents' calls reserve nothing (no round trip) unless its tenant has
a daily budget, and each call's use is counted in the budget hash by its
usage record (``recordUsage``). A job's budgets are set at submit and at a
retry (of a finished job, whose runs its end ended first: ``JobStore.retry``),
never while it runs; the claim that opens a run says whether the job has one
(``Opened.budgeted``).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis

from . import keys
from .errors import StateError, TenantBudgetExceeded
from .replies import Asked, check
from .scripts import Runner, ScriptResult

# Longer than any model call can take: its wait for admission (``admission.MAX_WAIT_S``,
# 15 minutes, for each route of a fallback chain) and its answer; a call settled later
# than this is not charged (its reservation was already given back).
RESERVATION_TTL_MS = 60 * 60 * 1000


MICRO = 1_000_000  # the budget hash keeps money in micro-dollars
FRESH_S = 1.0  # how stale a process's knowledge of which tenants have a daily budget may be


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
    tenant_key: str = ""  # the tenant's daily budget it also holds money in ("": none)


class DailySpend:
    """Tenants' daily money budgets (``rf:spend:{tenant}``), one per process.

    Which tenants have one is read at most once every ``FRESH_S`` per tenant,
    so a tenant without one costs its calls nothing.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._limited: dict[str, tuple[float, bool]] = {}  # tenant -> (read at, has one)

    def limited(self, tenant: str) -> bool:
        with self._lock:
            known = self._limited.get(tenant)
            if known is not None and time.monotonic() - known[0] < FRESH_S:
                return known[1]
        has = int(self.client.hget(keys.tenant_spend(tenant), "limit_usd") or 0) > 0
        with self._lock:
            self._limited[tenant] = (time.monotonic(), has)
        return has

    def set_limit(self, tenant: str, usd: float) -> None:
        """Set ``tenant``'s daily money budget for the whole fleet, now (0: none)."""
        self.client.hset(keys.tenant_spend(tenant), "limit_usd", round(usd * MICRO))

    def today(self, tenants: list[str]) -> dict[str, tuple[float, float]]:
        """Each tenant's (spent today, daily budget) in USD; (0, 0) for none."""
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for tenant in tenants:
            pipe.hmget(keys.tenant_spend(tenant), "limit_usd", "used_usd", "day")
        (seconds, _), *rows = pipe.execute()
        day = str(seconds // 86_400)
        return {
            t: (
                (int(used or 0) if (d or b"").decode() == day else 0) / MICRO,
                int(lim or 0) / MICRO,
            )
            for t, (lim, used, d) in zip(tenants, rows, strict=True)
        }


class TokenBudget:
    def __init__(
        self,
        runner: Runner,
        job_id: str,
        *,
        tenant: str = "",
        spend: DailySpend | None = None,
        budgeted: bool = True,
    ) -> None:
        """``tenant`` and ``spend``: the job's tenant, whose daily budget (if it has one)
        each call reserves from as well. ``budgeted`` False: the job has no budget of its
        own (``Opened.budgeted``)."""
        self.runner = runner
        self.job_id = job_id
        self.key = keys.budget(job_id)
        self.tenant = tenant
        self.spend = spend
        self.budgeted = budgeted

    def reserve(self, tokens: int, cost_usd: float = 0.0) -> Reservation | None:
        """Reserve ``tokens`` (costing up to ``cost_usd``) for one call; BudgetExceeded if
        it would overrun the job's token or money budget, or its tenant's for the day.
        None: nothing to reserve from (no budget, the job's nor its tenant's), nothing
        sent; the call's usage record counts what it used (``recordUsage``'s ``*``)."""
        daily = bool(self.tenant and self.spend and self.spend.limited(self.tenant))
        if not (self.budgeted or daily):
            return None
        rid, micro = secrets.token_hex(8), round(cost_usd * MICRO)
        calls = [(self.job_id, [self.key], [rid, tokens, RESERVATION_TTL_MS, micro])]
        tenant_key = keys.tenant_spend(self.tenant) if daily else ""
        if daily:  # the same script on the tenant's hash, in the same round trip
            calls.append((self.job_id, [tenant_key], [rid, 0, RESERVATION_TTL_MS, micro, "day"]))
        replies = self.runner.run_many("reserveTokens", calls)
        job = replies[0]
        if all(isinstance(r, ScriptResult) and r.ok for r in replies):
            assert isinstance(job, ScriptResult)
            return Reservation(rid, tokens, _state(job.data), tenant_key)
        # One refused (or failed): what the other holds goes back before it is said (if
        # that fails too, the reservation lapses after RESERVATION_TTL_MS; the first
        # error is the one to tell).
        for (_, where, _), r in zip(calls, replies, strict=True):
            if isinstance(r, ScriptResult) and r.ok:
                with contextlib.suppress(StateError, redis.RedisError):
                    self.runner.run("settleTokens", self.job_id, where, [rid, 0, 0])
        for r in replies:
            if isinstance(r, Exception):
                raise r
        day = replies[-1]
        assert isinstance(job, ScriptResult) and isinstance(day, ScriptResult)
        check("reserveTokens", job, Asked(job_id=self.job_id, tokens=tokens))  # the job's
        raise TenantBudgetExceeded(self.tenant, int(day.data["remaining"]), self.job_id)

    def settle(self, reservation: Reservation, used: int, cost_usd: float = 0.0) -> BudgetState:
        """Give back ``reservation``, charging the ``used`` tokens and ``cost_usd`` (once,
        however often called), to the job and to its tenant's day."""
        job, *tenant = self.runner.run_many(
            "settleTokens", self._settles(reservation, used, cost_usd)
        )
        for r in (job, *tenant):
            if isinstance(r, Exception):
                raise r
        assert isinstance(job, ScriptResult)
        return _state(job.data)

    def settle_with_next_write(
        self, reservation: Reservation, used: int, cost_usd: float = 0.0
    ) -> None:
        """``settle``, sent with this thread's next write (the call's usage record, which
        follows it at once): no round trip of its own."""
        calls = [("settleTokens", *c) for c in self._settles(reservation, used, cost_usd)]
        self.runner.ride(calls, _raise_error)

    def settle_tenant_with_next_write(
        self, reservation: Reservation, used: int, cost_usd: float = 0.0
    ) -> None:
        """The tenant's part of ``settle`` alone (if the reservation holds a tenant's day),
        sent with this thread's next write: the call's usage record, which settles the
        job's part in the same script (``JobUsage.record``'s ``settles``)."""
        tenant = self._settles(reservation, used, cost_usd)[1:]
        if tenant:
            self.runner.ride([("settleTokens", *c) for c in tenant], _raise_error)

    def _settles(
        self, reservation: Reservation, used: int, cost_usd: float
    ) -> list[tuple[str, list[str], list[Any]]]:
        args = [reservation.id, used, round(cost_usd * MICRO)]
        calls: list[tuple[str, list[str], list[Any]]] = [(self.job_id, [self.key], args)]
        if reservation.tenant_key:
            calls.append((self.job_id, [reservation.tenant_key], args))
        return calls

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


def _raise_error(res: ScriptResult | redis.ResponseError) -> None:
    if isinstance(res, redis.ResponseError):
        raise res
