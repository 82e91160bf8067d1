"""``State``: everything redfleet keeps in Redis, behind one connection."""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from . import keys
from .artifacts import ArtifactNotFound, ArtifactStore
from .budget import TokenBudget
from .client import ClientOptions, connect
from .delivery import Delivery
from .errors import ConnectionFailed
from .events import DEFAULT_GLOBAL_MAXLEN, DEFAULT_JOB_MAXLEN, EventLog
from .heartbeats import WorkerRegistry
from .jobs import DEFAULT_RETENTION_S, JobStore
from .memory.files import MemoryFiles
from .memory.store import MemoryStore
from .records import Records
from .redact import redact
from .scripts import Runner
from .tasks import TaskStore
from .usage import JobUsage
from .workspace import FileEntry, Trees, Workspace

if TYPE_CHECKING:
    from .memory.recall import Recall


class State:
    """Jobs, tasks, events, delivery, worker heartbeats and memory over one Redis client."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        retention_s: int = DEFAULT_RETENTION_S,
        job_maxlen: int = DEFAULT_JOB_MAXLEN,
        global_maxlen: int = DEFAULT_GLOBAL_MAXLEN,
    ) -> None:
        self.client = client
        self.events = EventLog(client, global_maxlen=global_maxlen)
        self.runner = Runner(client, self.events)
        self.delivery = Delivery(client)
        self.tasks = TaskStore(self.runner, self.delivery)
        self.jobs = JobStore(
            self.runner, self.delivery, retention_s=retention_s, job_maxlen=job_maxlen
        )
        self.workers = WorkerRegistry(self.runner)
        self.memory = MemoryStore(client)
        self.memory_files = MemoryFiles(client)
        self._recall: Recall | None = None

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
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            client.close()
            raise ConnectionFailed(redact(f"cannot reach Redis at {url}: {exc}")) from exc
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

    def budget(self, job_id: str) -> TokenBudget:
        """The token budget every model call of ``job_id`` reserves from."""
        return TokenBudget(self.runner, job_id)

    def usage(self, job_id: str) -> JobUsage:
        """The job's model usage, recorded after every call."""
        return JobUsage(self.runner, job_id)

    def records(self, job_id: str) -> Records:
        """The job's journal, checkpoints, workspace and progress."""
        return Records(self.tasks, job_id)

    def artifacts(self, job_id: str) -> ArtifactStore:
        return ArtifactStore(self.client, job_id)

    def workspace_tree(self, tenant: str, tree_id: str) -> dict[str, FileEntry]:
        """The files of an imported tree, by path; TreeNotFound if the tenant holds none."""
        return Trees(self.client, tenant).entries(tree_id)

    def workspace(self, job_id: str) -> Workspace:
        """The job's files: the workspace it was submitted with and its coders' changes."""
        job = self.jobs.get(job_id)
        return Workspace(self.client, tenant=job.tenant, tree=job.workspace, job_id=job_id)

    def locate_artifact(self, artifact_id: str) -> str:
        """The id of a kept job holding ``artifact_id`` (newest first); ArtifactNotFound if none."""
        job_ids = [j.decode() for j in self.client.zrange(keys.JOBS, 0, -1, desc=True)]
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.exists(keys.artifact(job_id, artifact_id))
        for job_id, found in zip(job_ids, pipe.execute(), strict=True):
            if found:
                return job_id
        raise ArtifactNotFound(artifact_id)

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
