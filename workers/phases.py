"""Where a worker process's CPU goes, by phase of its work.

Each thread charges its CPU time (``time.thread_time``: its own, not the
process's, so task slots running at once do not count each other) to the
phase it is in: a slot thread is in ``rq`` (RQ's loop: dequeue, its
bookkeeping) unless running a task, where it is in ``setup`` (the claim, the
run's opening reads, recall, the role's own code, the completion) unless in
one of the agent loop's steps — ``build`` (the context engine), ``call`` (the
provider: the HTTP client and the JSON), ``record`` (the reservation, the
settlement, usage and checkpoint) or ``tools``; the heartbeat thread is in
``heartbeat``. A phase entered inside another charges its time to itself only.

The process's totals go to the fleet's metrics with the heartbeat
(``cpu_us|<phase>`` in ``rf:metrics``, µs): no write per call, and they lag
by a heartbeat. ``/metrics`` serves them as
``redfleet_worker_cpu_seconds_total{phase}``; ``benchmarks/fleet_scale.py``
divides them by the model calls.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import TracebackType


class _Phase:
    """``with`` one phase: one object per name, shared by every thread (it holds no state
    of its own), so entering a phase allocates nothing. Each switch reads the thread's CPU
    clock once (a system call): the agent loop enters as few phases a call as it can."""

    __slots__ = ("clock", "name")

    def __init__(self, clock: PhaseClock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        self.clock._enter(self.name)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.clock._leave()


class PhaseClock:
    """CPU time by phase, per thread, summed for the process."""

    def __init__(self) -> None:
        self._totals: Counter[str] = Counter()  # µs, not yet taken
        self._lock = threading.Lock()
        self._local = threading.local()
        self._phases: dict[str, _Phase] = {}

    def base(self, phase: str) -> None:
        """The phase this thread is in when in no other (a slot: ``rq``): set as the thread
        starts, in no phase (the exit of one entered uncounted would be taken for another's)."""
        if getattr(self._local, "depth", 0):
            raise RuntimeError("PhaseClock.base inside a phase")
        self._local.stack = []
        self._local.current = phase
        self._local.mark = time.thread_time()

    def phase(self, name: str) -> _Phase:
        """``with`` it: charge this thread's CPU to ``name`` while inside (a thread with no
        base: not counted)."""
        phase = self._phases.get(name)
        if phase is None:
            phase = self._phases.setdefault(name, _Phase(self, name))
        return phase

    def _enter(self, name: str) -> None:
        local = self._local
        if getattr(local, "current", None) is None:
            local.depth = getattr(local, "depth", 0) + 1  # uncounted: its exit is too
            return
        self._switch(name)

    def _leave(self) -> None:
        local = self._local
        if getattr(local, "depth", 0):
            local.depth -= 1
            return
        self._switch(None)

    def _switch(self, entering: str | None) -> None:
        now, local = time.thread_time(), self._local
        spent = round((now - local.mark) * 1e6)
        if spent > 0:
            with self._lock:
                self._totals[local.current] += spent
        if entering is None:
            local.current = local.stack.pop()
        else:
            local.stack.append(local.current)
            local.current = entering
        local.mark = now

    def take(self) -> Counter[str]:
        """The µs charged by phase since the last ``take`` (this thread's until now too)."""
        local = self._local
        if getattr(local, "current", None) is not None:
            self._switch(local.current)  # charge what this thread ran so far
            self._switch(None)
        with self._lock:
            taken, self._totals = self._totals, Counter()
        return taken

    def give_back(self, taken: Counter[str]) -> None:
        """Totals ``take`` took but could not write: they go with the next."""
        with self._lock:
            self._totals.update(taken)


CLOCK = PhaseClock()  # the process's
