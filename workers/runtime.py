"""The worker process: an RQ worker on one role queue, and the task loop.

RQ delivers envelopes; ``execute(job_id, task_id)`` is the whole envelope.
Each execution claims the task first (Lua compare-and-set) and does nothing
unless the claim succeeds, so a duplicate delivery ends quietly. While the
task runs, the heartbeat thread renews its lease; every write carries the
fencing token, and none is started once the lease is lost (refused, or past
its local deadline: see ``heartbeat``). A job of scenario ``agents`` runs the
roles with the worker's model provider; the other scenarios are scripted
behaviours. One queue per worker keeps RQ on its atomic BLMOVE dequeue path;
RQ's own job timeout is off (the lease decides what is lost).

Three Redis clients, each with socket timeouts, keepalive and health checks:
the task loop's (the ``State`` given, retrying through a restart), the
heartbeat's (a third of the lease, no retries) and RQ's own — RQ raises the
socket timeout of the client it is given to fit its blocking dequeue, which
must never apply to the task's calls; with ``worker_ttl`` 35 s that is 30 s.

Stopping: SIGTERM, SIGINT and SIGHUP all drain (finish the task, deregister,
exit 0); a second SIGTERM or SIGINT is RQ's cold stop. A worker started by
``redfleet up`` also drains when its supervisor dies — PR_SET_PDEATHSIG sends
it SIGHUP on Linux, and the heartbeat notices the lost parent everywhere —
and gives its task up if it still runs after the supervisor's drain timeout.

Riding out Redis: RQ's dequeue retries connection errors itself; any other
end of RQ's work loop that no stop asked for (a Redis timeout, an error its
bookkeeping could not survive) is followed by waiting until Redis answers
(pinging at pauses from 0.5 s doubling to 5 s) and a fresh RQ loop in the
same process under the same worker id — no exit, so no restart storm.
"""

from __future__ import annotations

import ctypes
import itertools
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
from rq import SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer

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
from shared_state.client import ClientOptions, sibling

from . import roles, scenarios
from .errors import LeaseLost, NotInWorker
from .heartbeat import Heartbeat, SupervisorLink
from .llm import ProviderChoice
from .task_run import TaskRun

log = structlog.get_logger("redfleet.worker")

_runtime: WorkerRuntime | None = None

# RQ blocks in its dequeue for worker_ttl - 15 s and raises its client's socket
# timeout to worker_ttl - 5 s: 35 keeps a silent connection noticed within 30 s.
_RQ_WORKER_TTL_S = 35
# RQ's client retries a dropped connection; a longer outage ends RQ's loop and
# the worker's own loop (``_serve``) waits it out.
_RQ_CLIENT = ClientOptions(socket_timeout_s=_RQ_WORKER_TTL_S - 5, retries=3)
_PROBE = ClientOptions(socket_timeout_s=2.0, connect_timeout_s=2.0, retries=0)
_RESUME_FIRST_S = 0.5
_RESUME_CAP_S = 5.0
_STEADY_S = 30.0  # an RQ loop that ran this long was no quick failure: the pause starts over

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def execute(job_id: str, task_id: str) -> None:
    """RQ entry point for one delivery."""
    if _runtime is None:
        raise NotInWorker("execute() runs inside a redfleet worker process")
    _runtime.run_task(job_id, task_id)


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
        )

    def run_task(self, job_id: str, task_id: str) -> None:
        sent_at = time.monotonic()  # the lease runs from here at the latest
        try:
            claimed = self.state.tasks.claim(job_id, task_id, self.worker_id, self.lease_ms)
        except NotFound:
            log.info("delivery.dropped", job_id=job_id, task_id=task_id, why="no such task")
            return
        if claimed is None:
            log.info("delivery.duplicate", job_id=job_id, task_id=task_id)
            return
        self.heartbeat.hold(claimed.claim, sent_at)
        run = TaskRun(self.state, claimed.job, claimed.task, claimed.claim, self.heartbeat)
        try:
            if claimed.job.scenario is Scenario.AGENTS:
                roles.run(run, self.provider, self.worker_id)
            else:
                scenarios.run(run)
        except (LeaseLost, Fenced, JobFinished) as exc:
            # Someone else owns the task now (or nobody should): write nothing more.
            log.warning("task.abandoned", job_id=job_id, task_id=task_id, reason=str(exc))
        except StateError:
            raise
        except Exception as exc:
            log.exception("task.error", job_id=job_id, task_id=task_id)
            try:
                run.fail(f"{type(exc).__name__}: {exc}"[:500])
            except (LeaseLost, Fenced, JobFinished) as gone:
                log.warning("task.abandoned", job_id=job_id, task_id=task_id, reason=str(gone))
        finally:
            self.heartbeat.release()


class _RQWorker(SimpleWorker):
    """RQ's in-process worker, as a redfleet worker needs it.

    SIGHUP drains like SIGTERM; ``stopping`` tells the worker's own loop that a
    stop was asked for, ``drained`` that a burst found the queue empty —
    anything else that ends ``work`` is a failure to ride out.
    """

    # RQ doubles its pause between failed dequeues up to 60 s: after an outage it
    # would sleep on long after Redis is back.
    max_connection_wait_time = _RESUME_CAP_S

    def __init__(self, *args: object, stop: threading.Event, **kwargs: object) -> None:
        self.stopping = stop
        self.drained = False
        super().__init__(*args, **kwargs)

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()
        signal.signal(signal.SIGHUP, self.request_stop)
        if self.stopping.is_set():
            self._stop_requested = True  # asked for while the loop started, under our handler

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping.set()
        if self._shutdown_requested_date is not None:
            return  # a repeated hangup (PR_SET_PDEATHSIG, then the heartbeat's) changes nothing
        super().request_stop(signum, frame)

    def set_shutdown_requested_date(self) -> None:
        # Not written: RQ writes it from the signal handler, in the middle of a task,
        # where a call stalled by a partition would freeze the task and an error would
        # surface in its code. Only `rq info` shows it.
        pass

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        found = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        self.drained = found is None  # only a burst (or an idle limit) comes back empty
        return found

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            # register_death fails while Redis is away and skips the unsubscribe:
            # without this every resumed loop would leave a pubsub thread behind.
            if self.pubsub_thread is not None:
                self.pubsub_thread.stop()


def _stop_on_signals(stop: threading.Event) -> None:
    """Outside RQ's work loop (starting, waiting for Redis) a stop signal only sets ``stop``."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
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
) -> None:
    """Serve one role queue until stopped (SIGTERM/SIGINT/SIGHUP: finish the task, then exit)."""
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
        state, role=role, lease_ms=lease_ms, worker_id=worker_id, provider=provider, link=link
    )
    runtime.heartbeat.tick()
    runtime.heartbeat.start()
    rq_client = sibling(state.client, _RQ_CLIENT)
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
        provider=runtime.provider.describe(),
    )
    try:
        _serve(role, worker_id, rq_client, stop, burst=burst)
    finally:
        runtime.heartbeat.stop()
        _runtime = None
        rq_client.close()
        _record(state, "worker.stopped", worker_id, role, deregister=True)
        log.info("worker.stopped", worker=worker_id)


def _serve(
    role: Role, worker_id: str, client: redis.Redis, stop: threading.Event, *, burst: bool
) -> None:
    """Run RQ's work loop until a stop is asked for or a burst empties the queue.

    A loop that ends otherwise (RQ logs why) runs again once Redis answers, as
    a fresh RQ worker: RQ refuses a second birth under one name while the
    first was never recorded dead. The pause before it grows while loops keep
    ending quickly, so a fault that persists is no busy loop.
    """
    probe = sibling(client, _PROBE)
    pause = _RESUME_FIRST_S
    try:
        for generation in itertools.count():
            if stop.is_set():
                return
            started = time.monotonic()
            rq_worker = None
            error = "RQ's work loop ended"
            try:
                rq_worker = _RQWorker(
                    [queue_name(role)],
                    name=f"{worker_id}.{generation}" if generation else worker_id,
                    connection=client,
                    serializer=JSONSerializer,
                    worker_ttl=_RQ_WORKER_TTL_S,
                    stop=stop,
                )
                rq_worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                error = str(exc)
            except StopRequested:
                pass  # a stop signal in the instant after RQ's loop: ``stop`` is set
            finally:
                _stop_on_signals(stop)  # RQ's handlers belong to a worker that is done
            if stop.is_set() or (rq_worker is not None and rq_worker.drained):
                return
            if time.monotonic() - started > _STEADY_S:
                pause = _RESUME_FIRST_S
            log.warning("worker.rq_loop_ended", worker=worker_id, error=error, resume_in_s=pause)
            if not _await_redis(probe, stop, pause):
                return
            log.info("worker.resumed", worker=worker_id, generation=generation + 1)
            pause = min(pause * 2, _RESUME_CAP_S)
    finally:
        probe.close()


def _await_redis(probe: redis.Redis, stop: threading.Event, pause: float) -> bool:
    """Wait until Redis answers (True) or a stop is asked for (False), at growing pauses."""
    while not stop.wait(pause):
        try:
            probe.ping()
            return True
        except redis.RedisError:
            pause = min(pause * 2, _RESUME_CAP_S)
    return False


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
