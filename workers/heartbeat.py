"""The heartbeat thread of a worker process: lease renewal and liveness.

One thread per worker process. Every ``interval`` it renews the lease of the
task the worker holds (if any), records the worker's heartbeat and flushes
the queued global-stream mirror entries. A renewal refused because
the token is stale or the job finished — or impossible because Redis stayed
unreachable until the lease ran out — marks the lease lost; the task loop
checks that between steps and stops without writing anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from shared_state import Claim, ConnectionFailed, Fenced, JobFinished, NotFound, State
from shared_state.models import Role

log = structlog.get_logger("redfleet.heartbeat")

T = TypeVar("T")


class Heartbeat(threading.Thread):
    def __init__(
        self, state: State, *, worker_id: str, role: Role, lease_ms: int, info: dict[str, Any]
    ) -> None:
        super().__init__(name="redfleet-heartbeat", daemon=True)
        self.state = state
        self.worker_id = worker_id
        self.role = role
        self.lease_ms = lease_ms
        # A third of the lease: two renewals may fail before the lease runs out,
        # and a long task adds one task.renewed event per interval, not per second.
        self.interval_s = lease_ms / 3 / 1000
        self.ttl_ms = max(int(self.interval_s * 3000), 3000)
        self.info = info
        self._lock = threading.Lock()  # a renew never interleaves with the owner's last write
        self.claim: Claim | None = None
        self.lost = threading.Event()
        self.lost_reason = ""
        self.worker_state = "idle"
        self._stopping = threading.Event()
        self._deadline = 0.0  # monotonic: when our lease surely ran out

    # -- called by the task loop ------------------------------------------------

    def hold(self, claim: Claim) -> None:
        with self._lock:
            self.claim = claim
            self.lost.clear()
            self.lost_reason = ""
            self._deadline = time.monotonic() + self.lease_ms / 1000
            self.worker_state = "busy"

    def settle(self, write: Callable[[], T]) -> T:
        """Run the owner's last write with renewals held off, then stop renewing.

        Without this a renewal could land between the write and ``release`` and
        be refused as stale — a spurious ``task.fenced``.
        """
        with self._lock:
            try:
                return write()
            finally:
                self.claim = None

    def release(self) -> None:
        with self._lock:
            self.claim = None
            self.worker_state = "idle"

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout=5)

    # -- the thread ------------------------------------------------------------

    def run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                self.renew()
                self.beat()
                self.state.events.flush()
            except Exception as exc:
                # A tick may fail (Redis OOM, READONLY during a failover); the
                # thread must not: the next tick renews, or the lease runs out.
                log.warning("heartbeat.tick_failed", worker=self.worker_id, error=repr(exc))
            if time.monotonic() > self._deadline and self.claim is not None:
                with self._lock:
                    self._lose("the lease ran out before it could be renewed")

    def renew(self) -> None:
        with self._lock:
            claim = self.claim
            if claim is None:
                return
            started = time.monotonic()
            try:
                self.state.tasks.renew(claim, self.lease_ms)
                self._deadline = started + self.lease_ms / 1000
            except (Fenced, JobFinished, NotFound) as exc:
                self._lose(str(exc))

    def _lose(self, reason: str) -> None:
        self.lost_reason = reason
        self.lost.set()
        self.claim = None
        log.warning("lease.lost", worker=self.worker_id, reason=reason)

    def beat(self) -> None:
        claim = self.claim
        fields = {
            **self.info,
            "role": self.role.value,
            "state": self.worker_state,
            "task_id": claim.task_id if claim else "",
            "job_id": claim.job_id if claim else "",
        }
        try:
            self.state.workers.beat(self.worker_id, self.ttl_ms, fields)
        except ConnectionFailed as exc:
            log.warning("heartbeat.failed", worker=self.worker_id, error=str(exc))
