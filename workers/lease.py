"""``Lease``: one task slot's hold on a claim, as its worker process sees it.

A worker process runs up to ``--concurrency`` tasks at once, one per slot;
each slot holds at most one claim at a time through its own ``Lease``. The
process's heartbeat thread renews every lease held (``renewing``, then
``renewed``: all slots' in one round trip); the slot's task loop asks
``check`` before each write and makes its last write through ``settle``.
Slots share nothing else of their leases: one lost, stuck or crashed slot
leaves the others' claims as they were.

The lease ends ``lease_ms`` after the last successful renewal (or the
claim) was *sent*, on the monotonic clock: never after the deadline Redis
keeps. It is lost when a renewal is refused (stale token, finished job) or
when that local deadline passes without one — which ``check`` notices
itself, so it holds while the heartbeat thread is blocked in a call. From
then on ``lease.lost`` has been logged (once), nothing is renewed and no
owner's write is started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from shared_state import Claim, Fenced, JobFinished, NotFound

from .errors import LeaseLost

T = TypeVar("T")

# What a renewal can be refused with: the lease is someone else's now, or nobody's.
REFUSALS = (Fenced, JobFinished, NotFound)

# A slot's lease is given up when its task reached no lease check for this long:
# longer than any call a task makes without one, a provider call with all its
# retries (4 attempts of at most 60 s, and the pauses between).
DEFAULT_STUCK_AFTER_S = 300.0


class Lease:
    def __init__(self, worker_id: str, lease_ms: int) -> None:
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.lease_s = lease_ms / 1000
        # Held by a renewal and by the owner's last write, never both: a renewal landing
        # between that write and ``release`` would be refused as stale (a spurious fence).
        self._write_lock = threading.Lock()
        self._lease_lock = threading.Lock()  # claim, deadline and lost change together
        self.claim: Claim | None = None
        self.lost = threading.Event()
        self.lost_reason = ""
        self._deadline = 0.0  # monotonic: when our lease surely runs out
        self._progress_at = 0.0  # monotonic: the task loop's last check

    # -- called by the slot's task loop ----------------------------------------------------

    def hold(self, claim: Claim, sent_at: float | None = None) -> None:
        """Start renewing ``claim``, whose claim call was sent at monotonic ``sent_at``."""
        with self._write_lock, self._lease_lock:
            # Progress first: the stuck check reads the claim, then this, without the lock.
            self._progress_at = time.monotonic()
            self._deadline = (time.monotonic() if sent_at is None else sent_at) + self.lease_s
            self.lost.clear()
            self.lost_reason = ""
            self.claim = claim

    def expired(self) -> bool:
        """True once the lease held is lost: refused, or past its local deadline."""
        with self._lease_lock:
            claim = self.claim
            overdue = (
                claim is not None and not self.lost.is_set() and time.monotonic() > self._deadline
            )
        if overdue:
            self.lose(claim, "the lease ran out before it could be renewed")
        return self.lost.is_set()

    def check(self) -> None:
        """Raise LeaseLost once the lease is lost; otherwise the task is making progress."""
        self._progress_at = time.monotonic()
        if self.expired():
            raise LeaseLost(self.lost_reason)

    def settle(self, write: Callable[[], T]) -> T:
        """Run the owner's last write with renewals held off, then stop renewing.

        Refused with LeaseLost, unsent, once the lease is lost.
        """
        with self._write_lock:
            try:
                self.check()
                return write()
            finally:
                with self._lease_lock:
                    self.claim = None

    def release(self) -> None:
        """The slot is free: no claim, and no loss left over from the task it ran."""
        with self._write_lock, self._lease_lock:
            self.claim = None
            self.lost.clear()
            self.lost_reason = ""

    # -- called by the heartbeat thread ----------------------------------------------------

    def renewing(self) -> Claim | None:
        """The claim to renew, its owner's last write held off until ``renewed``; None if none.

        None too while the owner is making that write: the claim ends with it.
        """
        if not self._write_lock.acquire(blocking=False):
            return None
        try:
            claim = self.claim
            if claim is not None and not self.expired():
                return claim
        except BaseException:
            self._write_lock.release()
            raise
        self._write_lock.release()
        return None

    def renewed(self, claim: Claim, sent_at: float, outcome: int | Exception | None) -> None:
        """The renewal of ``claim`` sent at monotonic ``sent_at`` is over; let the owner write.

        ``outcome``: the new deadline (Redis time) if it was granted, the
        refusal or error reply if not, None if no reply came. A refusal loses
        the lease; a grant moves the local deadline on.
        """
        try:
            if isinstance(outcome, REFUSALS):
                self.lose(claim, str(outcome))
            elif isinstance(outcome, int):
                with self._lease_lock:
                    if self.claim is claim and not self.lost.is_set():
                        self._deadline = sent_at + self.lease_s
        finally:
            self._write_lock.release()

    def give_up_if_stuck(self, stuck_after_s: float) -> None:
        """Lose the lease of a task that reached no ``check`` for ``stuck_after_s``."""
        claim = self.claim
        silent_s = time.monotonic() - self._progress_at
        if claim is not None and silent_s > stuck_after_s:
            self.lose(claim, f"the slot made no progress for {silent_s:.0f} s")

    def lose(self, claim: Claim | None, reason: str) -> None:
        """Mark ``claim`` lost (if it is still the one held): no renewal, no owner's write."""
        with self._lease_lock:
            if claim is None or self.claim is not claim or self.lost.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
            self.claim = None
        # Imported here: the CLI's settings read this module's default, and a command that
        # only reads Redis should not load the logger (about 65 ms of CPU).
        import structlog

        structlog.get_logger("redfleet.heartbeat").warning(
            "lease.lost", worker=self.worker_id, task_id=claim.task_id, reason=reason
        )
