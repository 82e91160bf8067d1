"""A fair share of a worker process's slots between jobs.

The role queue is first in, first out: a job that fans out to a hundred
coders would hold every slot of every process until its last coder started,
while the next job's tasks wait behind it. Here no job holds more than half
of a process's slots (its *share*, at least one) while another job's task
that is under its own share waits in the same queue: a slot that takes an
envelope of a job already at its share takes one of those instead, swapped
on the queue (``Delivery.swap``: the first goes back to the head of the
queue, nothing is sent again, the queue keeps its order). It is
work-conserving: with nobody else waiting, or everybody waiting already at
their share, the task runs, so no slot idles for fairness' sake. Every
process applies it to its own slots, so across the fleet one job gets at
most half of each process's slots while others wait.

Only the first ``PEEK`` envelopes of the queue are looked at (one LRANGE,
done only when the job is at its share). A look that lets the task run serves
the process's slots for ``PEEK_FRESH_S`` (a job whose envelope arrived since
waits that much longer for its turn); a task yields only on a fresh look, so
no slot swaps envelopes round on a stale one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from shared_state import Delivery, Role
from shared_state.delivery import job_of

PEEK = 1000
PEEK_FRESH_S = 1.0


class FairShare:
    def __init__(self, delivery: Delivery, role: Role, slots: int) -> None:
        self.delivery = delivery
        self.role = role
        self.share = max(1, slots // 2)
        self._running: Counter[str] = Counter()  # job id -> slots of this process running it
        self._lock = threading.Lock()
        self._peeked: list[str] | None = None  # the last look at the queue, and when
        self._peeked_at = 0.0

    def take(self, job_id: str) -> list[str]:
        """Count a slot as running ``job_id`` (and return nothing), or return the envelopes
        it should yield to: those of other jobs under their share, waiting in the queue,
        in its order, from a fresh look (nothing is counted then).

        Under its share a job is admitted at once, under the lock, so slots
        taking a burst of one job's envelopes together cannot all slip in.
        """
        with self._lock:
            if self._running[job_id] < self.share:
                self._running[job_id] += 1
                return []
            running = dict(self._running)
        waiting, fresh = self._waiting(fresh=False)
        while True:
            others = [
                envelope
                for envelope in waiting
                if (other := job_of(envelope)) != job_id and running.get(other, 0) < self.share
            ]
            if not others:
                self.enter(job_id)
                return []
            if fresh:
                return others
            waiting, fresh = self._waiting(fresh=True)

    def _waiting(self, *, fresh: bool) -> tuple[list[str], bool]:
        """The envelopes waiting in the queue, from a recent look unless ``fresh``; and
        whether the look was taken now."""
        at = time.monotonic()
        with self._lock:
            if not fresh and self._peeked is not None and at - self._peeked_at < PEEK_FRESH_S:
                return self._peeked, False
        waiting = self.delivery.waiting(self.role, PEEK)
        with self._lock:
            self._peeked, self._peeked_at = waiting, at
        return waiting, True

    def enter(self, job_id: str) -> None:
        """Count a slot as running ``job_id`` (one that runs although it would yield)."""
        with self._lock:
            self._running[job_id] += 1

    def leave(self, job_id: str) -> None:
        """The slot no longer runs ``job_id``."""
        with self._lock:
            self._running[job_id] -= 1
            if not self._running[job_id]:
                del self._running[job_id]
