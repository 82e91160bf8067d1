"""Admission to model providers, fleet-wide: each route's shared limits and cool-downs.

A route is one provider's model at one endpoint (``route_id``: the API key
is never part of it, nor stored). Its limits — requests and tokens per
minute, calls at once — are set for the whole fleet (``Routes.set_limits``,
``redfleet limits set``) and may change while it runs. Every call of every
worker process asks its route before it is sent (``admitCall``, one script
on Redis time): it goes, or it is told how long to wait, and waits first
come, first served without holding anything it cannot give back. After the
call, ``settleCall`` charges what it really used and passes on what the
provider said: a 429 or an overload cools the route for every process at
once, so the fleet learns a limit once, not once per slot; a provider that
does not answer cools it for a backoff that grows with each failure in a
row. Nothing here costs a task an attempt: a call waits out a cool-down and
is sent again (``workers.llm.base.HttpJson``), up to ``MAX_WAIT_S``.

A route with no limits set makes no round trip per call: its state (a
cool-down) is read at most once a second, and a failure still cools it for
the fleet.

Which provider answer is which outcome is ``outcome_of``; how long each
cools the route is ``backoff.COOLING``, with the fleet's other backoffs.
"""

from __future__ import annotations

import functools
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

import redis
from pydantic import BaseModel, ConfigDict, Field

from . import keys
from .backoff import COOLING
from .errors import AdmissionTimedOut
from .redact import redact
from .scripts import run_plain

LEASE_MS = 10 * 60 * 1000  # an admitted call holds its slot at most this long (a dead caller's)
MAX_WAIT_S = 15 * 60  # the longest a call waits for admission, outages included
FRESH_S = 1.0  # how stale an unlimited route's state may be in a process


class Outcome(StrEnum):
    OK = "ok"
    LIMITED = "limited"  # the provider asked to slow down: 429, 529 (overloaded)
    FAILED = "failed"  # no answer: a connection error, a 5xx


def outcome_of(status: int | None) -> Outcome:
    """The outcome of an HTTP status (None: no answer at all)."""
    if status is None:
        return Outcome.FAILED
    if status in (429, 529):
        return Outcome.LIMITED
    return Outcome.FAILED if status >= 500 else Outcome.OK


class RouteLimits(BaseModel):
    """A route's shared limits; 0: none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rpm: int = Field(default=0, ge=0, description="requests per minute")
    tpm: int = Field(default=0, ge=0, description="tokens per minute, input and output")
    concurrency: int = Field(default=0, ge=0, description="calls at once")

    @property
    def limited(self) -> bool:
        return bool(self.rpm or self.tpm or self.concurrency)


class TenantShare(BaseModel):
    """A tenant's share of every route: its weight against the others' while calls wait,
    and its cap of calls at once on a route (0: none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weight: int = Field(default=1, ge=1, le=1000)
    concurrency: int = Field(default=0, ge=0)


_UNSAFE = re.compile(r"[^\w.:/@+-]")


@functools.lru_cache(maxsize=64)
def route_id(provider: str, model: str, base_url: str) -> str:
    """``openai:gpt-4.1-mini@api.openai.com/v1``: the provider, the model, where it is.

    Kept for the few routes a process has: every task's provider asks it as it opens
    (the URL parsed, the credentials masked: a regex pass over it)."""
    parts = urlsplit(base_url)
    # The host and port, never credentials a URL may carry (user:password@host).
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    where = redact((host + parts.path).rstrip("/") if host else base_url)
    return _UNSAFE.sub("_", f"{provider}:{model}@{where}")


@dataclass(frozen=True)
class Grant:
    """An admitted call (``call_id`` "": on a route without limits, nothing to give back)."""

    route: str
    call_id: str
    tokens: int
    waited_ms: int


@dataclass(frozen=True)
class RouteState:
    """What ``limits show`` prints of a route."""

    route: str
    limits: RouteLimits
    in_flight: int
    waiting: int
    cooling_ms: int  # how long it still cools (0: not)
    cool_why: str
    admitted: int
    ok: int
    limited: int
    failed: int
    waits: int
    waited_ms: int
    learned_requests: str  # what the provider last said is left ("": never said)
    learned_tokens: str
    by_tenant: dict[str, int]  # calls admitted, by tenant


class Route:
    """One route's admission, for one process: its task slots share it."""

    def __init__(
        self,
        client: redis.Redis,
        route: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.id = route
        self.sleep = sleep
        self.clock = clock
        self._lock = threading.Lock()
        self._read_at = -FRESH_S  # when the unlimited route's state was last read (clock)
        self._limited = True
        self._cool_until = 0.0  # clock time its cool-down ends, as last read
        self._recovering = False  # a failure was the last outcome this process saw
        self._tenants: dict[str, tuple[float, int, int]] = {}  # read at, weight, cap

    def acquire(
        self,
        tokens: int,
        *,
        tenant: str = "default",
        priority: int = 0,
        max_wait_s: float = MAX_WAIT_S,
    ) -> Grant:
        """Wait until the route admits a call of ``tokens`` for ``tenant``'s job of
        ``priority`` (0-9, higher first); AdmissionTimedOut after ``max_wait_s``."""
        started = self.clock()
        call_id, why = f"{tenant}|{secrets.token_hex(8)}", ""
        asked = False
        try:
            while True:
                weight, cap = self._tenant(tenant)
                if not cap and not self._limits_apply():
                    wait = due = self._cool_until - self.clock()
                    if wait <= 0:
                        return Grant(self.id, "", tokens, int((self.clock() - started) * 1000))
                    why = "cooling"
                else:
                    asked = True
                    res = run_plain(
                        self.client,
                        "admitCall",
                        keys.script_keys("admitCall", route_id=self.id),
                        [call_id, tokens, LEASE_MS, weight, priority, cap],
                    )
                    if res.code == 1:
                        asked = False  # admitted: its ticket is gone with it
                        return Grant(self.id, call_id, tokens, int(res.data["waited_ms"]))
                    wait, why = int(res.data["wait_ms"]) / 1000, str(res.data["why"])
                    due = int(res.data["due_ms"]) / 1000  # a cool-down's whole length
                # A wait past the bound is given up at once, not slept through.
                if self.clock() + max(wait, due) - started > max_wait_s:
                    raise AdmissionTimedOut(self.id, self.clock() - started, why)
                self.sleep(wait)
        finally:
            if asked:  # gave up (a bound, an error): its ticket must not block the queue
                self._withdraw(call_id)

    def _withdraw(self, call_id: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(keys.route_waiting(self.id), call_id)
        pipe.zrem(keys.route_asked(self.id), call_id)
        pipe.hdel(keys.route_vclock(self.id), f"since:{call_id}")
        pipe.execute()

    def settle(
        self,
        grant: Grant,
        *,
        used: int,
        outcome: Outcome = Outcome.OK,
        retry_after_ms: int = 0,
        remaining_requests: str = "",
        remaining_tokens: str = "",
    ) -> None:
        """End ``grant``'s call: its slot back, ``used`` tokens charged, and the provider's
        word passed on to the fleet (a cool-down on LIMITED or FAILED)."""
        if not grant.call_id and outcome is Outcome.OK and not self._recovering:
            return  # an unlimited route: nothing was held, nothing to say
        backoff = COOLING.get(outcome.value, COOLING[Outcome.FAILED.value])
        # A call never admitted (no limits) is settled under an id of its own, so that a
        # settle re-sent after a lost reply is counted once.
        settle_id = grant.call_id or f"-|{secrets.token_hex(8)}"
        run_plain(
            self.client,
            "settleCall",
            keys.script_keys("settleCall", route_id=self.id),
            [
                settle_id,
                grant.tokens,
                used,
                outcome.value,
                retry_after_ms if outcome is Outcome.LIMITED else 0,
                backoff.base_ms,
                backoff.cap_ms,
                remaining_requests,
                remaining_tokens,
                "1" if grant.call_id else "",
            ],
        )
        # After a failure, the next success ends the run of failures (the backoff's count);
        # and the cool-down this one set is read before the next call.
        with self._lock:
            self._recovering = outcome is not Outcome.OK
            if self._recovering:
                self._read_at = -FRESH_S

    def _tenant(self, tenant: str) -> tuple[int, int]:
        """The tenant's weight and cap of calls at once, read at most once every
        ``FRESH_S``."""
        with self._lock:
            known = self._tenants.get(tenant)
            if known is not None and self.clock() - known[0] < FRESH_S:
                return known[1], known[2]
            weight, cap = self.client.hmget(
                keys.ADMISSION_TENANTS, f"weight:{tenant}", f"cap:{tenant}"
            )
            self._tenants[tenant] = (self.clock(), int(weight or 1), int(cap or 0))
            return int(weight or 1), int(cap or 0)

    def _limits_apply(self) -> bool:
        """Whether calls must ask the script (limits are set); else the route's cool-down,
        read at most once every ``FRESH_S``."""
        with self._lock:
            if self.clock() - self._read_at < FRESH_S:
                return self._limited
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            pipe.hmget(keys.route(self.id), "rpm", "tpm", "concurrency", "cool_until")
            asked_at = self.clock()
            (seconds, micros), (rpm, tpm, slots, cool_until) = pipe.execute()
            now_ms = seconds * 1000 + micros // 1000
            self._read_at = asked_at
            self._limited = any(int(v or 0) for v in (rpm, tpm, slots))
            cooling = max(0, int(cool_until or 0) - now_ms) / 1000
            self._cool_until = self._read_at + cooling
            self._recovering = self._recovering or cooling > 0
            return self._limited


class Routes:
    """The fleet's routes: one ``Route`` per route in a process, and their limits."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()

    def route(self, route: str) -> Route:
        with self._lock:
            if route not in self._routes:
                self.client.sadd(keys.ROUTES, route)
                self._routes[route] = Route(self.client, route)
            return self._routes[route]

    def set_limits(self, route: str, limits: RouteLimits) -> None:
        """Set ``route``'s limits for the whole fleet, now (0: none)."""
        self.client.sadd(keys.ROUTES, route)
        self.client.hset(keys.route(route), mapping=limits.model_dump())

    def set_tenant(self, tenant: str, share: TenantShare) -> None:
        """Set ``tenant``'s weight and cap on every route, for the whole fleet."""
        self.client.hset(
            keys.ADMISSION_TENANTS,
            mapping={f"weight:{tenant}": share.weight, f"cap:{tenant}": share.concurrency},
        )

    def tenants(self) -> dict[str, TenantShare]:
        """The tenants whose weight or cap was set."""
        raw = {k.decode(): int(v) for k, v in self.client.hgetall(keys.ADMISSION_TENANTS).items()}
        names = sorted({k.partition(":")[2] for k in raw})
        return {
            t: TenantShare(weight=raw.get(f"weight:{t}", 1), concurrency=raw.get(f"cap:{t}", 0))
            for t in names
        }

    def show(self) -> list[RouteState]:
        """Every route seen, with its limits, use, waits and cool-down."""
        names = sorted(r.decode() for r in self.client.smembers(keys.ROUTES))
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for name in names:
            pipe.hgetall(keys.route(name))
            pipe.zcard(keys.route_inflight(name))
            pipe.zcard(keys.route_waiting(name))
        (seconds, micros), *rows = pipe.execute()
        now_ms = seconds * 1000 + micros // 1000
        out = []
        for n, name in enumerate(names):
            raw = {k.decode(): v.decode() for k, v in rows[3 * n].items()}

            def num(field: str, raw: dict[str, str] = raw) -> int:
                return int(float(raw.get(field) or 0))

            out.append(
                RouteState(
                    route=name,
                    limits=RouteLimits(
                        rpm=num("rpm"), tpm=num("tpm"), concurrency=num("concurrency")
                    ),
                    in_flight=rows[3 * n + 1],
                    waiting=rows[3 * n + 2],
                    cooling_ms=max(0, num("cool_until") - now_ms),
                    cool_why=raw.get("cool_why", ""),
                    admitted=num("admitted"),
                    ok=num("ok"),
                    limited=num("limited"),
                    failed=num("failed"),
                    waits=num("waits"),
                    waited_ms=num("waited_ms"),
                    learned_requests=raw.get("learned_requests", ""),
                    learned_tokens=raw.get("learned_tokens", ""),
                    by_tenant={
                        k.removeprefix("admitted:"): int(v)
                        for k, v in raw.items()
                        if k.startswith("admitted:")
                    },
                )
            )
        return out
