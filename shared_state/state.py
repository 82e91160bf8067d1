"""``State``: everything redfleet keeps in Redis, behind one connection."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import redis

from . import keys
from .client import ClientOptions, connect, describe
from .errors import ConnectionFailed, JobNotFound
from .events import DEFAULT_GLOBAL_MAXLEN, DEFAULT_JOB_MAXLEN, EventLog
from .jobs import DEFAULT_RETENTION_S
from .redact import redact
from .scripts import Runner

if TYPE_CHECKING:
    from .admission import Routes
    from .artifacts import ArtifactStore
    from .budget import DailySpend, TokenBudget
    from .delivery import Delivery
    from .heartbeats import WorkerRegistry
    from .jobs import JobStore
    from .memory.files import MemoryFiles
    from .memory.recall import Recall
    from .memory.store import MemoryStore
    from .models import Event
    from .records import Records
    from .tasks import TaskStore
    from .usage import JobUsage
    from .workspace import FileEntry, Workspace


class State:
    """Jobs, tasks, events, delivery, worker heartbeats and memory over one Redis client."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        retention_s: int = DEFAULT_RETENTION_S,
        job_maxlen: int = DEFAULT_JOB_MAXLEN,
        global_maxlen: int = DEFAULT_GLOBAL_MAXLEN,
        replicas: int = 0,
    ) -> None:
        """``replicas``: how many replicas must acknowledge each job-state write
        (``Runner``; 0: none wait, the default)."""
        self.client = client
        self.events = EventLog(client, global_maxlen=global_maxlen)
        self.runner = Runner(client, self.events, replicas=replicas)
        self._retention_s = retention_s
        self._job_maxlen = job_maxlen
        self._recall: Recall | None = None
        self.tenant: str | None = None  # see ``for_tenant``

    # Each store below is made, and its module imported, when first used: a command that
    # reads claims or events (``redfleet claims``, ``logs``) loads no memory, admission or
    # budgets, which it never reads.

    @cached_property
    def delivery(self) -> Delivery:
        from .delivery import Delivery

        return Delivery(self.client)

    @cached_property
    def tasks(self) -> TaskStore:
        from .tasks import TaskStore

        return TaskStore(self.runner, self.delivery)

    @cached_property
    def jobs(self) -> JobStore:
        from .jobs import JobStore

        return JobStore(
            self.runner, self.delivery, retention_s=self._retention_s, job_maxlen=self._job_maxlen
        )

    @cached_property
    def workers(self) -> WorkerRegistry:
        from .heartbeats import WorkerRegistry

        return WorkerRegistry(self.runner)

    @cached_property
    def memory(self) -> MemoryStore:
        from .memory.store import MemoryStore

        return MemoryStore(self.client, embedder="default")  # a write embeds its item

    @cached_property
    def memory_files(self) -> MemoryFiles:
        from .memory.files import MemoryFiles

        return MemoryFiles(self.client)

    @cached_property
    def routes(self) -> Routes:
        """The model routes' shared limits (``admission``)."""
        from .admission import Routes

        return Routes(self.client)

    @cached_property
    def spend(self) -> DailySpend:
        """The tenants' daily money budgets."""
        from .budget import DailySpend

        return DailySpend(self.client)

    def for_tenant(self, tenant: str | None) -> State:
        """This state as one tenant's reader sees it (None: every tenant, unchanged).

        Another tenant's job is ``JobNotFound`` everywhere a job is read: its
        record, tasks and events (read after the record), artifacts, records,
        usage and files. The same connection: closing either closes both.
        """
        if tenant is None or tenant == self.tenant:
            return self
        if self.tenant is not None:  # a reader of one tenant never becomes another's
            raise ValueError(f"tenant: this state reads tenant {self.tenant!r} only")
        scoped = copy.copy(self)
        scoped.tenant = tenant
        scoped.jobs = self.jobs.scoped(tenant)
        return scoped

    def visible_events(self) -> Callable[[Event], bool] | None:
        """For the global stream: a filter keeping this tenant's jobs' events (each job's
        record read once), or None when every tenant is seen."""
        if self.tenant is None:
            return None
        seen: dict[str, bool] = {}

        def keep(event: Event) -> bool:
            if event.job_id not in seen:
                seen[event.job_id] = bool(event.job_id) and self.sees(event.job_id)
            return seen[event.job_id]

        return keep

    @classmethod
    def connect(
        cls, url: str, *, client_options: ClientOptions | None = None, **options: int
    ) -> State:
        """Connect to ``url`` and check the server answers; ConnectionFailed if not.

        The client retries connection errors with backoff (``ClientOptions``);
        a server still unreachable after that is an error here, not later.
        """
        client = connect(url, client_options)
        try:
            client.ping()
        except ConnectionFailed as exc:
            client.close()
            why = describe(exc.__cause__ or exc)  # the translation says only "unreachable"
            raise ConnectionFailed(redact(f"cannot reach Redis at {url}: {why}")) from exc
        except redis.ResponseError as exc:
            client.close()
            raise ConnectionFailed(redact(f"Redis at {url} refused: {exc}")) from exc
        return cls(client, **options)

    def recall(self) -> Recall:
        """Keyword recall over memory: one per process, so its index is built once per tenant.

        Made on first use: ranking loads numpy, which a process that never
        recalls should not pay for.
        """
        if self._recall is None:
            from .memory.recall import Recall

            self._recall = Recall(self.memory)
        return self._recall

    def budget(self, job_id: str, tenant: str = "", *, budgeted: bool = True) -> TokenBudget:
        """The token budget every model call of ``job_id`` reserves from (and, given the
        job's ``tenant``, that tenant's daily money budget, if it has one). ``budgeted``
        False: the job is known to have none (its claim said so, ``Opened.budgeted``)."""
        from .budget import TokenBudget

        self.jobs.check(job_id)
        return TokenBudget(self.runner, job_id, tenant=tenant, spend=self.spend, budgeted=budgeted)

    def usage(self, job_id: str) -> JobUsage:
        """The job's model usage, recorded after every call."""
        from .usage import JobUsage

        self.jobs.check(job_id)
        return JobUsage(self.runner, job_id)

    def records(self, job_id: str) -> Records:
        """The job's journal, checkpoints, workspace and progress."""
        from .records import Records

        self.jobs.check(job_id)
        return Records(self.tasks, job_id)

    def artifacts(self, job_id: str, *, ride: bool = False) -> ArtifactStore:
        """The job's artifacts; ``ride``: stored with this thread's next write (a task's run)."""
        from .artifacts import ArtifactStore

        self.jobs.check(job_id)
        return ArtifactStore(self.client, job_id, self.runner, ride=ride)

    def workspace_tree(self, tenant: str, tree_id: str) -> dict[str, FileEntry]:
        """The files of an imported tree, by path; TreeNotFound if the tenant holds none."""
        from .workspace import Trees

        return Trees(self.client, tenant).entries(tree_id)

    def workspace(self, job_id: str) -> Workspace:
        """The job's files: the workspace it was submitted with and its coders' changes."""
        from .workspace import Workspace

        job = self.jobs.get(job_id)
        return Workspace(self.client, tenant=job.tenant, tree=job.workspace, job_id=job_id)

    def locate_artifact(self, artifact_id: str) -> str:
        """The id of a kept job (this state's tenant's, when scoped) holding ``artifact_id``,
        newest first; ArtifactNotFound if none."""
        from .artifacts import ArtifactNotFound

        job_ids = [j.decode() for j in self.client.zrange(keys.JOBS, 0, -1, desc=True)]
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.exists(keys.artifact(job_id, artifact_id))
        for job_id, found in zip(job_ids, pipe.execute(), strict=True):
            if found and (self.tenant is None or self.sees(job_id)):
                return job_id
        raise ArtifactNotFound(artifact_id)

    def sees(self, job_id: str) -> bool:
        """Whether this state may read ``job_id`` (any kept job, when not scoped)."""
        try:
            self.jobs.check(job_id)
        except JobNotFound:
            return False
        return True

    def close(self) -> None:
        """Flush the queued global-mirror entries, then close the connection."""
        try:
            self.events.flush()
        finally:
            self.client.close()

    def __enter__(self) -> State:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
