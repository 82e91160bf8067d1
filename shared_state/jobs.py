"""Jobs: submission, lookup, cancellation, and retention once finished."""

from __future__ import annotations

import copy
import secrets
from functools import cached_property
from typing import TYPE_CHECKING

import redis

from . import keys
from .delivery import Delivery, Envelope
from .errors import (
    ConnectionFailed,
    IdempotencyConflict,
    JobNotFound,
    MemoryRefused,
    SubmitUnconfirmed,
)
from .events import DEFAULT_JOB_MAXLEN, EventLog
from .kinds import JobStatus, Role
from .models import Job, JobSpec
from .redact import redact
from .replies import Asked, check
from .scripts import Runner, ScriptResult, server_ms, to_ms
from .tasks import new_task_id
from .workspace import TreeNotFound

if TYPE_CHECKING:
    from .memory.store import MemoryStore

DEFAULT_RETENTION_S = 7 * 24 * 3600
# An indexed id without a record this young may be a submission still writing it.
SUBMIT_GRACE_MS = 60_000
# A submit writes its records within this of indexing the id, or not at all:
# well inside the grace, so the reaper never drops a job that then appears.
SUBMIT_DEADLINE_MS = SUBMIT_GRACE_MS // 2
_PRUNE_CHUNK = 1_000  # ids per round trip when pruning the job index


def _decode(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


# What a repeated submit must repeat for its idempotency key to name the same job.
_SUBMITTED = ("goal", "scenario", "fanout", "user", "workspace", "check", "approve", "priority")


def _same_submit(spec: JobSpec, job: Job) -> None:
    """IdempotencyConflict unless ``spec`` asks for the job its key already names."""
    differs = [f for f in _SUBMITTED if getattr(spec, f) != getattr(job, f)]
    if differs:
        raise IdempotencyConflict(spec.idempotency_key, job.job_id, differs)


class JobStore:
    def __init__(
        self,
        runner: Runner,
        delivery: Delivery,
        *,
        retention_s: int = DEFAULT_RETENTION_S,
        job_maxlen: int = DEFAULT_JOB_MAXLEN,
    ) -> None:
        self.runner = runner
        self.client: redis.Redis = runner.client
        self.events: EventLog = runner.events
        self.delivery = delivery
        self.retention_s = retention_s
        self.job_maxlen = job_maxlen
        # The one tenant this store reads and acts for (None: every tenant, as a fleet does).
        self.tenant: str | None = None

    @cached_property
    def memory(self) -> MemoryStore:
        """Where a job's own memory items expire with it and its episode is written. Its
        writes embed, once (each recalling process would embed it otherwise, under its
        index's lock). Made on first use: a reader of jobs never loads memory."""
        from .memory.store import MemoryStore

        return MemoryStore(self.client, embedder="default")

    def scoped(self, tenant: str) -> JobStore:
        """This store for one tenant: another tenant's job is ``JobNotFound``, as if absent.

        The readers' boundary (the CLI with ``--tenant``, a ``Client`` given a
        tenant, a tenant's dashboard token): whoever holds the Redis URL itself
        reads every tenant.
        """
        scoped = copy.copy(self)
        scoped.tenant = tenant
        return scoped

    def _visible(self, raw: dict[bytes, bytes]) -> bool:
        """Whether a job record is there and this store may see it."""
        if not raw:
            return False
        return self.tenant is None or raw.get(b"tenant", b"default").decode() == self.tenant

    def check(self, job_id: str) -> None:
        """JobNotFound unless ``job_id`` is a job this store may act on (one read when scoped)."""
        if self.tenant is not None:
            self.get(job_id)

    def submit(self, spec: JobSpec) -> Job:
        """Record the job and its root planner task, then deliver the task.

        The id is chosen here and every step is idempotent, so a reply lost on
        the wire is retried without a second job, and the caller always learns
        the id (``SubmitUnconfirmed`` names it when Redis stays away). The
        cross-job indexes come first, then the job's records (one script),
        then the envelope: a crash after the indexes leaves an id the reaper
        drops once it is old enough; a crash before the envelope leaves a
        queued task that the reaper redelivers.

        With ``spec.idempotency_key`` the key is bound to the id first (SET NX,
        kept for the retention): a later submit with the same key and tenant
        returns that job (``existed``), or finishes writing it if the first
        submit never did.
        """
        if spec.workspace and not self.client.exists(keys.tree(spec.tenant, spec.workspace)):
            raise TreeNotFound(spec.tenant, spec.workspace)
        job_id = f"j-{secrets.token_hex(6)}"
        once = keys.submit_key(spec.tenant, spec.idempotency_key) if spec.idempotency_key else ""
        if once:
            # SET NX then GET in one transaction: the id bound to the key, ours or a prior
            # submit's. (SET ... NX GET in one command needs Redis 7; 6.2 is supported.)
            with self.client.pipeline(transaction=True) as pipe:
                pipe.set(once, job_id, nx=True, ex=self.retention_s)
                pipe.get(once)
                bound, holder = pipe.execute()
            prior = None if bound else holder
            if prior is not None:
                try:
                    existing = self.get(prior.decode())
                except JobNotFound:
                    job_id = prior.decode()  # that submit never got as far: finish it
                else:
                    _same_submit(spec, existing)
                    return existing.model_copy(update={"existed": True})
        root = new_task_id(Role.PLANNER)
        job = Job(
            job_id=job_id,
            goal=spec.goal,
            scenario=spec.scenario,
            fanout=spec.fanout,
            max_attempts=spec.max_attempts,
            tenant=spec.tenant,
            user=spec.user,
            status=JobStatus.QUEUED,
            root_task=root,
            created_ms=0,  # set by the script, on Redis time
            workspace=spec.workspace,
            workspace_commit=spec.workspace_commit,
            check=spec.check,
            approve=spec.approve,
            priority=spec.priority,
            budget_usd=spec.budget_usd,
        )
        fields = {
            **job.model_dump(mode="json", exclude={"created_ms"}),
            "stream_maxlen": self.job_maxlen,
            "retention_ms": self.retention_s * 1000,
        }
        try:
            now = server_ms(self.client)
            with self.client.pipeline(transaction=False) as pipe:
                pipe.zadd(keys.JOBS, {job_id: now}, nx=True)
                pipe.sadd(keys.ACTIVE_JOBS, job_id)
                pipe.execute()
            res = self.runner.run(
                "submitJob",
                job_id,
                keys.script_keys("submitJob", job_id, root_id=root),
                [
                    root,
                    spec.token_budget,
                    spec.goal[:200],
                    now,
                    SUBMIT_DEADLINE_MS,
                    *(x for kv in fields.items() for x in kv),
                ],
            )
            if res.data.get("existed") and once:
                found = self.get(job_id)
                if found.root_task != root:  # another submit with the key wrote it first
                    _same_submit(spec, found)
                    return found.model_copy(update={"existed": True})
            if not res.ok and once and self.client.get(once) == job_id.encode():
                self.client.delete(once)  # too late, nothing made: the next starts afresh
            check("submitJob", res, Asked(job_id=job_id))
            self.delivery.send([Envelope(job_id, root, Role.PLANNER)])
            self.events.flush()  # a new job shows in `redfleet logs` at once
        except ConnectionFailed as exc:
            raise SubmitUnconfirmed(job_id, redact(str(exc))) from exc
        return job.model_copy(update={"created_ms": int(res.data["created_ms"])})

    def get(self, job_id: str) -> Job:
        raw = self.client.hgetall(keys.job(job_id))
        if not self._visible(raw):
            raise JobNotFound(job_id)
        return Job.model_validate(_decode(raw))

    def list(self, limit: int = 50) -> list[Job]:
        """The most recent jobs (of this store's tenant), newest first; ids without a record
        are skipped.

        Such an id is a job whose keys expired (``prune_index`` drops it) or a
        submission still writing its records (``submit`` indexes the id
        first), so it is not removed here. A scoped store reads on in pages
        until it has ``limit`` of its tenant's jobs or the index ends.
        """
        found: list[Job] = []
        start, page = 0, limit if self.tenant is None else max(limit, 200)
        while len(found) < limit:
            ids = [i.decode() for i in self.client.zrevrange(keys.JOBS, start, start + page - 1)]
            pipe = self.client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(keys.job(job_id))
            found += [Job.model_validate(_decode(r)) for r in pipe.execute() if self._visible(r)]
            if len(ids) < page or self.tenant is None:
                break
            start += page
        return found[:limit]

    def prune_index(self, batch: int = 200) -> int:
        """Drop from the job index the ids whose records have expired; returns how many.

        ``_expire`` records in the expiring index when a finished job's keys
        expire; every id whose time has passed is dropped, however many —
        O(ids due), no scan — so the index drains as fast as jobs finish.
        Then the oldest ``batch`` ids are checked for a record gone without
        an expiry recorded (a job finished before the expiring index existed,
        a record deleted by hand); one indexed less than ``SUBMIT_GRACE_MS``
        ago may be a submission still writing and stays. The ``job:`` and
        ``temp:`` memory items of every dropped job go with it, and so do its keys
        an older version did not know to expire (``_unlisted``).
        """
        now = server_ms(self.client)
        pruned = 0
        while True:
            due = self.client.zrangebyscore(
                keys.EXPIRING_JOBS, "-inf", now, start=0, num=_PRUNE_CHUNK
            )
            if not due:
                break
            self.memory.expire_jobs([j.decode() for j in due])
            with self.client.pipeline(transaction=False) as pipe:
                pipe.zrem(keys.JOBS, *due)
                pipe.zrem(keys.EXPIRING_JOBS, *due)
                pipe.unlink(*_unlisted(due))
                pruned += pipe.execute()[0]
            if len(due) < _PRUNE_CHUNK:
                break
        if batch:
            oldest = self.client.zrangebyscore(
                keys.JOBS, "-inf", now - SUBMIT_GRACE_MS, start=0, num=batch
            )
            pipe = self.client.pipeline(transaction=False)
            for job_id in oldest:
                pipe.exists(keys.job(job_id.decode()))
            gone = [j for j, exists in zip(oldest, pipe.execute(), strict=True) if not exists]
            if gone:
                self.memory.expire_jobs([j.decode() for j in gone])
                self.client.unlink(*_unlisted(gone))
                pruned += self.client.zrem(keys.JOBS, *gone)
        return pruned

    def active(self) -> list[str]:
        """The ids of the jobs not yet finished (of this store's tenant, when scoped)."""
        ids = sorted(i.decode() for i in self.client.smembers(keys.ACTIVE_JOBS))
        if self.tenant is None or not ids:
            return ids
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(keys.job(job_id), "tenant")
        tenants = [(t or b"default").decode() for t in pipe.execute()]
        return [j for j, t in zip(ids, tenants, strict=True) if t == self.tenant]

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> None:
        self.check(job_id)
        job_keys = keys.script_keys("cancelJob", job_id)
        res = self.runner.run("cancelJob", job_id, job_keys, [redact(reason)])
        check("cancelJob", res, Asked(job_id=job_id))
        self.finalize(job_id)

    def retry(self, job_id: str) -> list[str]:
        """Give a failed job's dead and cancelled tasks fresh attempts; the ids requeued.

        The job runs again with the same id: succeeded tasks are not run
        again, and a parent waiting on its children goes on once they
        complete (``_reopen``).
        """
        res, task_ids = self._reopen(job_id, "retryJob", "retries", [])
        requeued = res.data["requeued"].split()
        roles = dict(
            zip(
                task_ids,
                (r.decode() for r in self._roles(job_id, task_ids)),
                strict=True,
            )
        )
        deliver = [*requeued, *res.data["queued"].split()]
        self.delivery.send(Envelope(job_id, t, Role(roles[t])) for t in deliver)
        self.events.flush()
        return requeued

    def resume(
        self,
        job_id: str,
        *,
        stage: str,
        goal: str,
        constraints: str,
        criteria_version: str,
        criteria_changed: bool,
        features: str,
        checks: str,
    ) -> str:
        """Queue a finished job's root planner at ``stage``: a new round, the same id.

        Crash-safe as ``retry`` is (``_reopen``); returns the stage.
        """
        request = secrets.token_hex(8)  # answers a re-sent resume, even after its round ended
        args = [stage, goal, constraints, criteria_version, int(criteria_changed), features, checks,
                request]  # fmt: skip
        res, _ = self._reopen(job_id, "resumeJob", "resumes", args)
        root = self.get(job_id).root_task
        self.delivery.send([Envelope(job_id, root, Role.PLANNER)])
        self.events.flush()
        return res.data["stage"]

    def _reopen(
        self, job_id: str, script: str, counter: str, args: list[str | int]
    ) -> tuple[ScriptResult, list[str]]:
        """Run ``retryJob`` or ``resumeJob`` on a finished job, crash-safe; the reply and the
        job's task ids.

        The job is retired first (what the reaper does for a finished job), so a
        later reaper pass has nothing of it to retire. It is watched (active) and
        kept (out of the expiring index) before the script runs: a crash after
        the script leaves a running job the reaper sees and the index keeps; a
        crash before it, a finished job the reaper retires again. ``counter``
        (its rounds so far) lets the script answer a re-sent call from the record.
        """
        self.check(job_id)
        self.finalize(job_id)
        round_ = int(self.client.hget(keys.job(job_id), counter) or 0)
        task_ids = sorted(t.decode() for t in self.client.smembers(keys.tasks(job_id)))
        fixed = keys.script_keys(script, job_id)
        others = [k for k in keys.job_keys(job_id) if k not in fixed]
        expiring = self.client.zscore(keys.EXPIRING_JOBS, job_id)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.sadd(keys.ACTIVE_JOBS, job_id)
            pipe.zrem(keys.EXPIRING_JOBS, job_id)
            added, _ = pipe.execute()
        res = self.runner.run(
            script,
            job_id,
            [*fixed, *others, *(keys.task(job_id, t) for t in task_ids)],
            [len(others), round_, *args],
        )
        if not res.ok:
            if expiring is not None:
                self.client.zadd(keys.EXPIRING_JOBS, {job_id: expiring})
            if added:  # it was not watched before: a finished job stays retired
                self.client.srem(keys.ACTIVE_JOBS, job_id)
        check(script, res, Asked(job_id=job_id))
        if res.ok:
            # Its artifacts kept their own clocks; the job's finish starts them again.
            ids = self.client.zrange(keys.artifacts(job_id), 0, -1)
            with self.client.pipeline(transaction=False) as pipe:
                for artifact_id in ids:
                    pipe.persist(keys.artifact(job_id, artifact_id.decode()))
                pipe.execute()
        return res, task_ids

    def _roles(self, job_id: str, task_ids: list[str]) -> list[bytes]:
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(keys.task(job_id, task_id), "role")
        return pipe.execute()

    def finalize(self, job_id: str) -> bool:
        """Retire a finished job and set every key of it to expire; False if left alone.

        It also ends the tasks a failed or cancelled job left unfinished
        (``endTasks``: nothing of it stays queued, waiting, blocked or claimed)
        and sets every task to expire. Idempotent; the reaper calls it for any
        active job found finished, so a crash right after a job's last script
        loses nothing.
        An active id without a record is retired too (its records expired, or
        a submission died before writing them) once it was indexed at least
        ``SUBMIT_GRACE_MS`` ago by Redis time, or is not indexed at all;
        younger, it may be a submission still writing.
        """
        status, retention_ms = self.client.hmget(keys.job(job_id), "status", "retention_ms")
        if status is None:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.zscore(keys.JOBS, job_id)
                pipe.time()
                indexed, now = pipe.execute()
            if indexed is not None and to_ms(now) - indexed < SUBMIT_GRACE_MS:
                return False
        elif not JobStatus(status.decode()).finished:
            return False
        task_ids = [t.decode() for t in self.client.smembers(keys.tasks(job_id))]
        if status in (b"failed", b"cancelled") and not self._end_tasks(job_id, task_ids):
            return False  # a retry or resume began since the status was read: it runs
        if status is not None:
            self._episode(job_id)
        self._expire(job_id, [keys.task(job_id, t) for t in task_ids], retention_ms)
        return True

    def _end_tasks(self, job_id: str, task_ids: list[str]) -> bool:
        """End what a failed or cancelled job left queued, waiting, blocked or claimed;
        False if the job is no longer failed or cancelled (nothing was ended)."""
        task_keys = [keys.task(job_id, t) for t in task_ids]
        res = self.runner.run(
            "endTasks", job_id, [*keys.script_keys("endTasks", job_id), *task_keys], []
        )
        return check("endTasks", res, Asked(job_id=job_id)).ok

    def _episode(self, job_id: str) -> None:
        """The finished job's episode for its user (once per round: its id is the job's)."""
        from .memory.episodes import record_episode

        try:
            record_episode(self.memory, self.get(job_id))
        except (JobNotFound, MemoryRefused, ValueError):
            # Retirement never waits on memory: an episode quoting something forgotten
            # (or otherwise refused) is not written, and the job retires all the same.
            return

    def _expire(self, job_id: str, extra: list[str], retention_ms: bytes | None) -> None:
        """Set the job's keys (and ``extra``) to expire after its own retention.

        When they expire (Redis time) goes to the expiring index, from which
        ``prune_index`` drops the id from the job index. No ``retention_ms``
        means no job record: nothing of it is kept, and its id goes at the
        next prune.
        """
        ttl_ms = int(retention_ms) if retention_ms else self.retention_s * 1000
        now = server_ms(self.client)
        with self.client.pipeline(transaction=False) as pipe:
            for key in [*keys.job_keys(job_id), *extra]:
                pipe.pexpire(key, ttl_ms)
            pipe.zadd(keys.EXPIRING_JOBS, {job_id: now + ttl_ms if retention_ms else now})
            pipe.srem(keys.ACTIVE_JOBS, job_id)
            pipe.execute()
        # The artifacts are listed after the job's clock started: one stored since then
        # sees that clock itself (``ArtifactStore.put``), one stored before is listed here.
        artifacts = self.client.zrange(keys.artifacts(job_id), 0, -1)
        with self.client.pipeline(transaction=False) as pipe:
            for artifact_id in artifacts:
                pipe.pexpire(keys.artifact(job_id, artifact_id.decode()), ttl_ms)
            pipe.execute()


def _unlisted(job_ids: list[bytes]) -> list[str]:
    """Keys of a job that a finalize by an older version (in a fleet being upgraded) left
    without an expiry, as it did not list them: gone when the job's id is dropped."""
    return [keys.journal_names(j.decode()) for j in job_ids]
