"""The worker process: an RQ worker on one role queue, and the task loop.

RQ delivers envelopes; ``execute(job_id, task_id)`` is the whole envelope.
Each execution claims the task first (Lua compare-and-set) and does nothing
unless the claim succeeds, so a duplicate delivery ends quietly. While the
task runs, the heartbeat thread renews its lease; every write carries the
fencing token. A job of scenario ``agents`` runs the roles with the worker's
model provider; the other scenarios are scripted behaviours. One queue per
worker keeps RQ on its atomic BLMOVE dequeue path; RQ's own job timeout is
off (the lease decides what is lost).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import socket
import sys

import redis
import structlog
from rq import SimpleWorker
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

from . import roles, scenarios
from .errors import LeaseLost, NotInWorker
from .heartbeat import Heartbeat
from .llm import ProviderChoice
from .task_run import TaskRun

log = structlog.get_logger("redfleet.worker")

_runtime: WorkerRuntime | None = None


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
        )

    def run_task(self, job_id: str, task_id: str) -> None:
        try:
            claimed = self.state.tasks.claim(job_id, task_id, self.worker_id, self.lease_ms)
        except NotFound:
            log.info("delivery.dropped", job_id=job_id, task_id=task_id, why="no such task")
            return
        if claimed is None:
            log.info("delivery.duplicate", job_id=job_id, task_id=task_id)
            return
        self.heartbeat.hold(claimed.claim)
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
            except (Fenced, JobFinished) as fenced:
                log.warning("task.abandoned", job_id=job_id, task_id=task_id, reason=str(fenced))
        finally:
            self.heartbeat.release()


def _hide_environment() -> None:
    """Make this process's memory and environment (API keys) unreadable to the code it checks.

    The reviewer runs generated tests as the same user; a non-dumpable process's
    ``/proc/<pid>/environ`` and memory are closed to other processes of that user.
    """
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


PR_SET_DUMPABLE = 4


def run_worker(
    state: State,
    *,
    role: Role,
    lease_ms: int,
    burst: bool = False,
    provider: ProviderChoice | None = None,
) -> None:
    """Serve one role queue until stopped (SIGTERM/SIGINT: finish the task, then exit)."""
    global _runtime
    _hide_environment()
    worker_id = new_worker_id(role)
    runtime = _runtime = WorkerRuntime(
        state, role=role, lease_ms=lease_ms, worker_id=worker_id, provider=provider
    )
    rq_worker = SimpleWorker(
        [state.delivery.queues[role]],
        name=worker_id,
        connection=state.client,
        serializer=JSONSerializer,
    )
    runtime.heartbeat.start()
    runtime.heartbeat.beat()
    state.events.append("worker.started", {"worker": worker_id, "role": role.value})
    log.info(
        "worker.started",
        worker=worker_id,
        role=role.value,
        queue=queue_name(role),
        provider=runtime.provider.describe(),
    )
    try:
        rq_worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
    finally:
        runtime.heartbeat.stop()
        _runtime = None
        try:
            state.events.append("worker.stopped", {"worker": worker_id, "role": role.value})
            state.workers.remove(worker_id)
            state.events.flush()
        except (redis.RedisError, StateError) as exc:
            # Best effort: the heartbeat expires by itself; never mask the real error.
            log.warning("worker.stop_unrecorded", worker=worker_id, error=str(exc))
        log.info("worker.stopped", worker=worker_id)
