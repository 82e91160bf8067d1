"""The worker process: task slots on one role queue, and the task loop.

RQ delivers envelopes; ``execute(job_id, task_id)`` is the whole envelope.
Each execution claims the task first (Lua compare-and-set) and does nothing
unless the claim succeeds, so a duplicate delivery ends quietly. While the
task runs, the heartbeat thread renews its lease; every write carries the
fencing token, and none is started once the lease is lost (refused, or past
its local deadline: see ``lease``). A job of scenario ``agents`` runs the
roles with the worker's model provider; the other scenarios are scripted
behaviours. One queue per worker keeps RQ on its atomic BLMOVE dequeue path;
RQ's own job timeout is off (the lease decides what is lost).

A process runs ``concurrency`` tasks at once, one per slot (``slots``): each
slot is an RQ worker in a thread of its own, with its own lease
(``lease.Lease``); the slots share the process's heartbeat thread,
tokenizer, provider HTTP client and Redis connection pool, and a fair share
(``fair_share``) keeps one job's fan-out from taking every slot while other
jobs wait. An exception in one slot's task fails that task only.

Redis clients, each with socket timeouts, keepalive and health checks: the
task loop's (the ``State`` given, retrying through a restart, shared by the
slots), the heartbeat's (a third of the lease, no retries) and one per slot
for RQ — RQ raises the socket timeout of the client it is given to fit its
blocking dequeue, which must never apply to the task's calls.

Stopping: SIGTERM, SIGINT and SIGHUP all drain (every slot finishes its
task, then the worker deregisters and exits 0); a second SIGTERM or SIGINT
is a cold stop (exit at once; the tasks' leases run out and the reaper
hands them on). A worker started by ``redfleet up`` also drains when its
supervisor dies — PR_SET_PDEATHSIG sends it SIGHUP on Linux, and the
heartbeat notices the lost parent everywhere — and gives its tasks up if
they still run after the supervisor's drain timeout.
"""

from __future__ import annotations

import ctypes
import gc
import os
import secrets
import signal
import socket
import sys
import threading
import time
from types import FrameType

import redis
import structlog

from shared_state import (
    Fenced,
    JobFinished,
    NotFound,
    Role,
    Scenario,
    State,
    StateError,
    queue_name,
)
from shared_state.backoff import Failure
from shared_state.delivery import job_of

from . import roles, scenarios, slots
from .context.tokens import tokenizer_for
from .errors import LeaseLost, NotInWorker, ProviderUnavailable
from .fair_share import FairShare
from .heartbeat import Heartbeat, SupervisorLink
from .lease import DEFAULT_STUCK_AFTER_S, Lease
from .llm import ProviderChoice, ProviderName
from .llm.transport import shared_transport
from .outcomes import Failed, settle
from .phases import CLOCK
from .task_run import TaskRun

log = structlog.get_logger("redfleet.worker")

_runtime: WorkerRuntime | None = None
_slot = threading.local()  # .lease: the Lease of the slot whose thread this is

# How often the main thread looks at its slots while it waits for them to end.
_WATCH_S = 0.5
# Envelopes a slot tries to swap in for one of a job at its share before it runs that one
# (each try is a round trip; one fails only when another slot took that envelope first).
SWAP_TRIES = 3
_UNBLOCK_EVERY_S = 1.0  # a CLIENT LIST costs Redis O(clients): not more often than this

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def execute(job_id: str, task_id: str) -> None:
    """RQ entry point for one delivery."""
    lease: Lease | None = getattr(_slot, "lease", None)
    if _runtime is None or lease is None:
        raise NotInWorker("execute() runs inside a task slot of a redfleet worker process")
    with CLOCK.phase("setup"):  # the agent loop's steps charge their own phases
        _runtime.run_task(job_id, task_id, lease)


def new_worker_id(role: Role) -> str:
    return f"{role.value}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


class WorkerRuntime:
    def __init__(
        self,
        state: State,
        *,
        role: Role,
        lease_ms: int,
        worker_id: str,
        provider: ProviderChoice | None = None,
        link: SupervisorLink | None = None,
        concurrency: int = 1,
        stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
    ) -> None:
        self.state = state
        self.role = role
        self.provider = provider or ProviderChoice()
        self.lease_ms = lease_ms
        self.worker_id = worker_id
        self.heartbeat = Heartbeat(
            state,
            worker_id=worker_id,
            role=role,
            lease_ms=lease_ms,
            info={"pid": os.getpid(), "host": socket.gethostname()},
            link=link,
            slots=concurrency,
            stuck_after_s=stuck_after_s,
        )
        self.fair = FairShare(state.delivery, role, concurrency)
        # The tasks this process's slots run, with their leases. A claim by the same worker
        # id on a live lease is the claim script's retry (it answers with the same token),
        # so a second envelope of a task another slot here runs must end here, not claim
        # it again; once that slot's lease is lost (a stuck slot), the task may run here.
        self._held: dict[tuple[str, str], Lease] = {}
        self._held_lock = threading.Lock()

    def run_task(self, job_id: str, task_id: str, lease: Lease) -> None:
        # The slot's dequeue counted it in the fair share already (``choose``): a call from
        # elsewhere is counted here.
        if getattr(_slot, "counted", None) == job_id:
            _slot.counted = None
        else:
            self.fair.enter(job_id)
        try:
            self._run_once(job_id, task_id, lease)
        finally:
            self.fair.leave(job_id)

    def choose(self, rq_id: str) -> str:
        """The envelope a slot runs, given the one its dequeue took: that one, or one of a
        job under its share waiting in the queue, swapped in its place (``fair_share``);
        counted in the fair share either way, until the task ends (``release``)."""
        self.release()  # a count an earlier envelope left (never so, unless RQ broke off)
        job_id = job_of(rq_id)
        others = self.fair.take(job_id)
        for instead in others[:SWAP_TRIES]:
            if self.state.delivery.swap(self.role, rq_id, instead):
                _slot.counted = job_of(instead)
                self.fair.enter(_slot.counted)
                log.info("delivery.yielded", job_id=job_id, envelope=rq_id, to_job=_slot.counted,
                         instead=instead, share=self.fair.share)  # fmt: skip
                return instead
        if others:  # each was taken by another slot meanwhile: no slot idles, this one runs
            self.fair.enter(job_id)
        _slot.counted = job_id
        return rq_id

    def release(self) -> None:
        """The slot's envelope ended without a task run (RQ never called ``execute``, or
        its dequeue broke off after ``choose``): its count in the fair share goes."""
        counted = getattr(_slot, "counted", None)
        if counted is not None:
            _slot.counted = None
            self.fair.leave(counted)

    def _run_once(self, job_id: str, task_id: str, lease: Lease) -> None:
        key = (job_id, task_id)
        with self._held_lock:
            other = self._held.get(key)
            duplicate = other is not None and not other.lost.is_set()
            if not duplicate:
                self._held[key] = lease
        if duplicate:
            log.info("delivery.duplicate", job_id=job_id, task_id=task_id, why="held by a slot")
            return
        try:
            self._run(job_id, task_id, lease)
        finally:
            with self._held_lock:
                if self._held.get(key) is lease:  # not a later slot's, running it since
                    del self._held[key]

    def _run(self, job_id: str, task_id: str, lease: Lease) -> None:
        sent_at = time.monotonic()  # the lease runs from here at the latest
        started = slots.take_start_writes()  # RQ's, as the envelope started: the claim's
        try:
            # The claim opens the run: its records come back in the same round trip, and
            # so do an agent's reads outside the job, once the process knows the job.
            claimed = self.state.tasks.claim(
                job_id, task_id, self.worker_id, self.lease_ms,
                open_run=lambda job: (roles.opening_reads(self.state, job, task_id)
                                      if job.scenario is Scenario.AGENTS else None),
                carrying=started,
            )  # fmt: skip
        except NotFound:
            log.info("delivery.dropped", job_id=job_id, task_id=task_id, why="no such task")
            return
        except BaseException:
            slots.keep_start_writes(started)  # no answer: they go as the envelope ends
            raise
        if claimed is None:
            log.info("delivery.duplicate", job_id=job_id, task_id=task_id)
            return
        lease.hold(claimed.claim, sent_at)
        # The worker's own account of what it did, outside Redis (a failover drill reads
        # it: a claim or completion the primary acknowledged and then lost shows here).
        log.info("task.claimed", job_id=job_id, task_id=task_id, token=claimed.claim.token,
                 attempt=claimed.task.attempt)  # fmt: skip
        run = TaskRun(
            self.state, claimed.job, claimed.task, claimed.claim, lease, opened=claimed.opened
        )
        try:
            try:
                if claimed.job.scenario is Scenario.AGENTS:
                    outcome = roles.run(run, self.provider, self.worker_id)
                else:
                    outcome = scenarios.run(run)
            except (LeaseLost, StateError):
                raise
            except Exception as exc:  # a bug or a fault no role expected: tried again
                log.exception("task.error", job_id=job_id, task_id=task_id)
                # A provider still down after its calls waited out their admission waits
                # backs off longest.
                kind = Failure.PROVIDER if isinstance(exc, ProviderUnavailable) else Failure.ERROR
                outcome = Failed(f"{type(exc).__name__}: {exc}", retryable=True, kind=kind)
            settle(run, outcome)
            log.info("task.settled", job_id=job_id, task_id=task_id, token=claimed.claim.token,
                     outcome=type(outcome).__name__.lower())  # fmt: skip
        except (LeaseLost, Fenced, JobFinished) as exc:
            # Someone else owns the task now (or nobody should): write nothing more.
            log.warning("task.abandoned", job_id=job_id, task_id=task_id, reason=str(exc))
        except StateError as exc:
            # Redis would not take the run's writes (unreachable past the retries, or no
            # replica acknowledged them): the task is left to its lease, as a lost worker's.
            log.warning("task.abandoned", job_id=job_id, task_id=task_id, reason=str(exc))
            raise
        finally:
            if self.state.runner.drop():  # a run that ended with no write to carry them
                log.info("task.riders_dropped", job_id=job_id, task_id=task_id)
            lease.release()


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM, SIGINT and SIGHUP ask for a drain; a second SIGTERM or SIGINT for a cold stop.

    A repeated hangup (PR_SET_PDEATHSIG, then the heartbeat's) changes nothing.
    """

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set() and signum != signal.SIGHUP:
            log.warning("worker.cold_stop", signal=signal.Signals(signum).name)
            raise SystemExit(1)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _hide_environment() -> None:
    """Make this process's memory and environment (API keys) unreadable to the code it checks.

    The reviewer runs generated tests as the same user; a non-dumpable process's
    ``/proc/<pid>/environ`` and memory are closed to other processes of that user.
    """
    _prctl(PR_SET_DUMPABLE, 0)


def _die_with(link: SupervisorLink) -> bool:
    """Get SIGHUP (a warm stop) when the supervisor dies; False if it already has.

    The kernel sends it when the supervisor's thread that started this process
    ends: the fleet starts every worker from its supervising thread. A
    supervisor that died before prctl ran would never send it: the parent pid
    tells.
    """
    _prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
    return link.signal_alive()


def run_worker(
    state: State,
    *,
    role: Role,
    lease_ms: int,
    burst: bool = False,
    provider: ProviderChoice | None = None,
    concurrency: int = 1,
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
) -> None:
    """Serve one role queue with ``concurrency`` slots until a signal (drain, then exit)."""
    global _runtime
    _hide_environment()
    stop = threading.Event()
    _stop_on_signals(stop)  # before PR_SET_PDEATHSIG: SIGHUP must never kill the process
    link = SupervisorLink.from_env(os.environ)
    if link is not None and not _die_with(link):
        log.warning("worker.orphaned", supervisor=link.pid, why="gone before the worker started")
        return
    worker_id = new_worker_id(role)
    runtime = _runtime = WorkerRuntime(
        state,
        role=role,
        lease_ms=lease_ms,
        worker_id=worker_id,
        provider=provider,
        link=link,
        concurrency=concurrency,
        stuck_after_s=stuck_after_s,
    )
    _preload(state, runtime.provider)
    # What the process loaded to serve (its modules, the tokenizer's tables, numpy) stays
    # for its life: out of the collector's generations, a full collection no longer walks
    # it. Collected first, so no garbage of the loading is kept for good.
    gc.collect()
    gc.freeze()
    runtime.heartbeat.tick()
    runtime.heartbeat.start()
    try:
        state.delivery.register_queues()  # `rq info` lists the role queues before any job
    except (redis.RedisError, StateError) as exc:
        log.warning("worker.queues_unregistered", worker=worker_id, error=str(exc))
    _record(state, "worker.started", worker_id, role)
    log.info(
        "worker.started",
        worker=worker_id,
        role=role.value,
        queue=queue_name(role),
        slots=concurrency,
        provider=runtime.provider.describe(),
    )
    waiting = [threading.Event() for _ in range(concurrency)]
    threads = [
        threading.Thread(
            target=_slot_main,
            args=(state, runtime.heartbeat.leases[i], slots.slot_name(worker_id, i), role, stop),
            kwargs={
                "waiting": waiting[i],
                "burst": burst,
                "commands": i == 0,
                "suspended": runtime.heartbeat.suspended,
                "choice": runtime,
                "beats": runtime.heartbeat.rq_workers,
            },
            name=f"redfleet-slot-{i}",
            daemon=True,  # a cold stop leaves them: their leases run out
        )
        for i in range(concurrency)
    ]
    try:
        for thread in threads:
            thread.start()
        _watch(state, worker_id, threads, waiting, stop)
    finally:
        runtime.heartbeat.stop()
        _runtime = None
        _record(state, "worker.stopped", worker_id, role, deregister=True)
        log.info("worker.stopped", worker=worker_id)


def _preload(state: State, provider: ProviderChoice) -> None:
    """Load what every agent task uses before a slot waits on it, once, not in the first
    task of each slot: the tokenizer (~1 s of CPU), recall with numpy (~0.15 s),
    and for a model behind HTTP its connection pools (``shared_transport``)."""
    tokenizer_for()
    state.recall()
    if provider.provider is not ProviderName.SCRIPTED:
        shared_transport()


def _slot_main(
    state: State,
    lease: Lease,
    name: str,
    role: Role,
    stop: threading.Event,
    *,
    waiting: threading.Event,
    burst: bool,
    commands: bool,
    suspended: threading.Event | None = None,
    choice: slots.Choice | None = None,
    beats: slots.SlotBeats | None = None,
) -> None:
    """One slot's thread: its RQ loop, started again if it ever breaks (the others go on)."""
    _slot.lease = lease
    CLOCK.base("rq")
    client = slots.slot_client(state.client, name)
    try:
        while True:
            try:
                slots.serve(name, queue_name(role), client, stop, waiting, burst=burst,
                            commands=commands, suspended=suspended, choice=choice,
                            beats=beats)  # fmt: skip
                return
            except Exception:
                log.exception("worker.slot_crashed", worker=name)
                if stop.wait(slots.RESTART_PAUSE_S):
                    return
    finally:
        client.close()


def _watch(
    state: State,
    worker_id: str,
    threads: list[threading.Thread],
    waiting: list[threading.Event],
    stop: threading.Event,
) -> None:
    """Wait in the main thread (where signals arrive) until every slot has ended.

    Once a stop is asked for, slots waiting in their blocking dequeue are
    woken — again, at most once a second, while any alive slot still waits
    (one may have been between two dequeues).
    """
    woken_at = -_UNBLOCK_EVERY_S
    while alive := [t for t in threads if t.is_alive()]:
        if not stop.is_set():
            stop.wait(_WATCH_S)
            continue
        idle = any(w.is_set() for t, w in zip(threads, waiting, strict=True) if t.is_alive())
        if idle and time.monotonic() - woken_at >= _UNBLOCK_EVERY_S:
            woken_at = time.monotonic()
            try:
                slots.unblock(state.client, worker_id)
            except (redis.RedisError, StateError) as exc:
                log.info("worker.unblock_failed", worker=worker_id, error=str(exc))
        alive[0].join(_WATCH_S)


def _record(
    state: State, event: str, worker_id: str, role: Role, *, deregister: bool = False
) -> None:
    """Best effort: a worker's heartbeat expires by itself; never mask the real error."""
    try:
        state.events.append(event, {"worker": worker_id, "role": role.value})
        if deregister:
            state.workers.remove(worker_id)
        state.events.flush()
    except (redis.RedisError, StateError) as exc:
        log.warning("worker.event_unrecorded", worker=worker_id, event=event, error=str(exc))
