"""The heartbeat thread of a worker process: lease renewal, liveness, the tie to its supervisor.

One thread per worker process, on a Redis client of its own: socket and
connect timeouts of a third of the lease and no retries (the next tick is
the retry), so one stalled call costs one tick, never the lease. Each tick
(a third of the lease apart) it

- tells the supervisor that started the process that it still makes progress
  (a byte on the liveness pipe, ``SupervisorLink``), whether or not Redis
  answers, and notices when that supervisor is gone;
- renews the lease of every task the worker's slots hold (``lease.Lease``)
  in one pipeline, one round trip however many slots, with the worker's
  heartbeat (slots, how many are busy, with which tasks); flushes the
  queued global-stream mirror entries, the CPU by phase and the RQ
  heartbeats of the slots (``slots.SlotBeats``), and looks for `rq suspend`
  for the process's slots (``suspended``), in one more. A lost
  connection ends the tick; any other error in one slot's renewal is that
  slot's alone.

A lease as this process sees it ends ``lease_ms`` after the last successful
renewal was sent (see ``lease``); a lost one is never renewed again and its
slot's next ``check`` raises LeaseLost. A request already on the wire when a
partition began may still reach Redis later; its stale token (and the
scripts' lease check) refuses it.

A slot whose task has reached no ``check`` for ``stuck_after_s`` (a provider
call that never returns, a deadlock in its thread) has its lease given up
here, as the supervisor kills a process that stopped making progress: the
task is reclaimed after the lease, and the stuck thread writes nothing when
it wakes. The other slots go on.

A worker whose supervisor is gone asks itself for a warm stop (SIGHUP, what
PR_SET_PDEATHSIG sends where it exists) and, if its task still runs after the
supervisor's drain timeout, gives the lease up so that any fleet reclaims it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import structlog
from rq.suspension import WORKERS_SUSPENDED

from shared_state import Claim, ConnectionFailed, State, StateError, TaskStore, keys
from shared_state.client import ClientOptions, sibling
from shared_state.heartbeats import WorkerRegistry
from shared_state.kinds import Role
from shared_state.scripts import Runner

from .lease import DEFAULT_STUCK_AFTER_S, REFUSALS, Lease
from .phases import CLOCK
from .slots import SlotBeats

log = structlog.get_logger("redfleet.heartbeat")

_SUPERVISOR_PID = "REDFLEET_SUPERVISOR_PID"
_LIVENESS_FD = "REDFLEET_LIVENESS_FD"
_DRAIN_S = "REDFLEET_DRAIN_S"


@dataclass(frozen=True)
class SupervisorLink:
    """What ties a worker process to the ``redfleet up`` that started it.

    The supervisor passes it in the environment: its pid, the write end of
    the worker's liveness pipe, and its drain timeout (how long an orphaned
    worker may take to finish its task).
    """

    pid: int
    liveness_fd: int
    drain_s: float

    def env(self) -> dict[str, str]:
        return {
            _SUPERVISOR_PID: str(self.pid),
            _LIVENESS_FD: str(self.liveness_fd),
            _DRAIN_S: str(self.drain_s),
        }

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str]) -> SupervisorLink | None:
        """Take the link a supervisor passed out of ``environ``; None for a worker started by hand.

        Taken out, so that no process this worker starts (a reviewer's checks) inherits it.
        """
        if _SUPERVISOR_PID not in environ:
            return None
        link = cls(int(environ.pop(_SUPERVISOR_PID)), int(environ.pop(_LIVENESS_FD)),
                   float(environ.pop(_DRAIN_S)))  # fmt: skip
        # A full pipe must never block a tick, and no child of the worker may hold it.
        os.set_blocking(link.liveness_fd, False)
        os.set_inheritable(link.liveness_fd, False)
        return link

    def signal_alive(self) -> bool:
        """Tell the supervisor this process still makes progress; False once it is gone."""
        try:
            os.write(self.liveness_fd, b".")
        except BlockingIOError:
            pass  # the supervisor is behind on reading: the bytes waiting say enough
        except OSError:
            return False  # EPIPE: nobody holds the read end any more
        return os.getppid() == self.pid


def heartbeat_options(lease_ms: int) -> ClientOptions:
    """The heartbeat's client: a call that stalls ends within a sixth of the lease.

    Half the interval between ticks: a renewal that stalls, and the quicker
    retry after it, still fit twice over in the lease.
    """
    sixth_s = lease_ms / 6000
    return ClientOptions(socket_timeout_s=sixth_s, connect_timeout_s=sixth_s, retries=0)


# After the supervisor's drain timeout, a task that still has not stopped (stuck
# in a long call that never reaches a check) gets this long before the process exits.
_ORPHAN_EXIT_GRACE_S = 5.0


class Heartbeat(threading.Thread):
    def __init__(
        self,
        state: State,
        *,
        worker_id: str,
        role: Role,
        lease_ms: int,
        info: dict[str, Any],
        link: SupervisorLink | None = None,
        slots: int = 1,
        stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
    ) -> None:
        super().__init__(name="redfleet-heartbeat", daemon=True)
        self.state = state
        self.worker_id = worker_id
        self.role = role
        self.lease_ms = lease_ms
        self.lease_s = lease_ms / 1000
        self.link = link
        # A third of the lease: two renewals may fail before the lease runs out,
        # and a long task adds one task.renewed event per interval, not per second.
        self.interval_s = lease_ms / 3 / 1000
        self.ttl_ms = max(int(self.interval_s * 3000), 3000)
        self.info = info
        self.stuck_after_s = stuck_after_s
        self.client = sibling(state.client, heartbeat_options(lease_ms))
        # The process's one event log: what these scripts emit is mirrored with the rest.
        runner = Runner(self.client, state.events)
        self._runner = runner
        self._tasks = TaskStore(runner, state.delivery)
        self._workers = WorkerRegistry(runner)
        # Set while `rq suspend` holds: the slots take no envelope (``slots.SlotWorker``).
        self.suspended = threading.Event()
        self.rq_workers = SlotBeats()  # the slots' RQ records, beaten from here
        self.leases = [Lease(worker_id, lease_ms) for _ in range(slots)]
        self._stopping = threading.Event()
        self._reachable = True  # whether the last tick reached Redis (logged on change)
        self._orphaned_at: float | None = None

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout=5)
        self.client.close()

    # -- the thread ------------------------------------------------------------

    def run(self) -> None:
        CLOCK.base("heartbeat")
        # After a failed tick the next comes at a third of the interval: a renewal
        # that stalled (L/6) and its retries still land well inside the lease.
        while not self._stopping.wait(self.interval_s if self._reachable else self.interval_s / 3):
            self.tick()

    def tick(self) -> None:
        if self.link is not None and not self.link.signal_alive():
            self._supervisor_gone()
        for lease in self.leases:
            lease.expired()  # an overdue lease is lost now, whether or not Redis answers below
            lease.give_up_if_stuck(self.stuck_after_s)
        try:
            self._runner.drop()  # a beat left riding by a tick that failed: this one's replaces it
            self.beat()  # rides with the renewals
            self._renew_all()
            self._runner.flush()  # the beat, when no slot held a lease to renew
            self.flush()
        except ConnectionFailed as exc:
            if self._reachable:
                log.warning("heartbeat.redis_unreachable", worker=self.worker_id, error=str(exc))
            self._reachable = False
            return
        except Exception as exc:
            # A tick may fail (Redis OOM, READONLY during a failover); the
            # thread must not: the next tick renews, or the lease runs out.
            log.warning("heartbeat.tick_failed", worker=self.worker_id, error=repr(exc))
            return
        if not self._reachable:
            log.info("heartbeat.redis_back", worker=self.worker_id)
        self._reachable = True

    def _renew_all(self) -> None:
        """Renew every slot's claim in one round trip; a refusal or an error is that slot's alone.

        One pipeline, so that a tick costs the same round trip with 1 slot or
        1,000 (one call each would make a tick slots x RTT long).
        """
        sent_at = time.monotonic()  # before any is sent: the local deadline errs early
        held: list[tuple[Lease, Claim]] = []
        outcomes: list[int | StateError] = []
        try:
            for lease in self.leases:
                if (claim := lease.renewing()) is not None:
                    held.append((lease, claim))
            if held:
                outcomes = self._tasks.renew_many([claim for _, claim in held], self.lease_ms)
        finally:  # also after a lost connection (no outcomes): every owner may write again
            answered = outcomes if len(outcomes) == len(held) else [None] * len(held)
            for (lease, claim), outcome in zip(held, answered, strict=True):
                lease.renewed(claim, sent_at, outcome)
                if isinstance(outcome, StateError) and not isinstance(outcome, REFUSALS):
                    log.warning("heartbeat.renew_failed", worker=self.worker_id,
                                task_id=claim.task_id, error=str(outcome))  # fmt: skip

    def beat(self) -> None:
        held = [claim for lease in self.leases if (claim := lease.claim) is not None]
        fields = {
            **self.info,
            "role": self.role.value,
            "state": "busy" if held else "idle",
            "slots": len(self.leases),
            "busy": len(held),
            "tasks": " ".join(f"{c.job_id}/{c.task_id}" for c in held),
        }
        self._workers.beat(self.worker_id, self.ttl_ms, fields, ride=True)

    def flush(self) -> None:
        """Write the process's queued mirror entries, its CPU by phase since the last tick
        (``phases``) and its slots' RQ heartbeats that are due (``slots.SlotBeats``), and
        look for `rq suspend` (``suspended``), over this thread's own client: one round
        trip for the process, not a look or a heartbeat per slot."""
        events = self.state.events
        pending, spent = events.take_pending(), CLOCK.take()
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(WORKERS_SUSPENDED)
        if pending:
            events.queue_mirror(pipe, pending)
        beaten = self.rq_workers.queue(pipe, self.interval_s)
        for phase, micros in spent.items():
            pipe.hincrby(keys.METRICS, f"cpu_us|{phase}", micros)
        try:
            suspended, *_ = pipe.execute()
        except ConnectionFailed:
            events.defer_mirrored(pending)  # as the script runner does: the next tick sends them
            CLOCK.give_back(spent)
            self.rq_workers.unsent(beaten)
            raise
        if suspended:
            self.suspended.set()
        else:
            self.suspended.clear()

    def _supervisor_gone(self) -> None:
        assert self.link is not None
        if self._orphaned_at is None:
            self._orphaned_at = time.monotonic()
            log.warning("worker.orphaned", worker=self.worker_id, supervisor=self.link.pid)
            # A warm stop, as the supervisor's drain would have asked for.
            os.kill(os.getpid(), signal.SIGHUP)
            return
        orphaned_s = time.monotonic() - self._orphaned_at
        if orphaned_s > self.link.drain_s:
            for lease in self.leases:
                lease.lose(lease.claim, "supervisor gone and the task outlasted its drain timeout")
        if orphaned_s > self.link.drain_s + max(_ORPHAN_EXIT_GRACE_S, self.lease_s):
            # The task thread is stuck where no check is reached, and nobody is left
            # to kill this process: it goes itself (its lease is already given up).
            log.warning("worker.exiting", worker=self.worker_id, why="supervisor gone, task stuck")
            with contextlib.suppress(Exception):
                self._workers.remove(self.worker_id)
            os._exit(1)
