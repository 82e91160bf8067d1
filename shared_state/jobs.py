"""Jobs: submission, lookup, cancellation, and retention once finished."""

from __future__ import annotations

import secrets

import redis

from . import keys
from .delivery import Delivery, Envelope
from .errors import Code, JobFinished, JobNotFound
from .events import DEFAULT_JOB_MAXLEN, EventLog
from .models import Job, JobSpec, JobStatus, Role
from .scripts import Runner, server_ms
from .tasks import new_task_id

DEFAULT_RETENTION_S = 7 * 24 * 3600


def _decode(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


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

    def submit(self, spec: JobSpec) -> Job:
        """Record the job and its root planner task, then deliver the task.

        The records are written in one MULTI before the envelope is sent: a
        crash in between leaves a queued task that the reaper redelivers.
        """
        job_id = f"j-{secrets.token_hex(6)}"
        root = new_task_id(Role.PLANNER)
        now = server_ms(self.client)
        job = Job(
            job_id=job_id,
            goal=spec.goal,
            scenario=spec.scenario,
            fanout=spec.fanout,
            max_attempts=spec.max_attempts,
            status=JobStatus.QUEUED,
            root_task=root,
            created_ms=now,
        )
        with self.client.pipeline() as pipe:
            pipe.hset(
                keys.job(job_id),
                mapping={
                    **job.model_dump(mode="json"),
                    "stream_maxlen": self.job_maxlen,
                    "retention_ms": self.retention_s * 1000,
                },
            )
            pipe.hset(
                keys.task(job_id, root),
                mapping={
                    "task_id": root,
                    "job_id": job_id,
                    "role": Role.PLANNER.value,
                    "parent_id": "",
                    "brief": spec.goal[:200],
                    "status": "queued",
                    "attempt": 1,
                    "token": 0,
                    "owner": "",
                    "lease_until": 0,
                    "pending": 0,
                    "stage": "",
                    "created_ms": now,
                    "queued_ms": now,
                },
            )
            pipe.hset(
                keys.budget(job_id), mapping={"limit": spec.token_budget, "used": 0, "reserved": 0}
            )
            pipe.sadd(keys.tasks(job_id), root)
            pipe.zadd(keys.queued(job_id), {root: now})
            pipe.zadd(keys.JOBS, {job_id: now})
            pipe.sadd(keys.ACTIVE_JOBS, job_id)
            for event, fields in (
                ("job.submitted", {"goal": spec.goal[:200], "scenario": spec.scenario.value}),
                ("task.queued", {"task_id": root, "role": Role.PLANNER.value}),
            ):
                self.events.append(
                    event, fields, job_id=job_id, job_maxlen=self.job_maxlen, pipeline=pipe
                )
            pipe.execute()
        self.delivery.send([Envelope(job_id, root, Role.PLANNER)])
        return job

    def get(self, job_id: str) -> Job:
        raw = self.client.hgetall(keys.job(job_id))
        if not raw:
            raise JobNotFound(job_id)
        return Job.model_validate(_decode(raw))

    def list(self, limit: int = 50) -> list[Job]:
        """The most recent jobs, newest first; ids whose records expired are pruned."""
        ids = [i.decode() for i in self.client.zrevrange(keys.JOBS, 0, limit - 1)]
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(keys.job(job_id))
        jobs, gone = [], []
        for job_id, raw in zip(ids, pipe.execute(), strict=True):
            if raw:
                jobs.append(Job.model_validate(_decode(raw)))
            else:
                gone.append(job_id)
        if gone:
            self.client.zrem(keys.JOBS, *gone)
        return jobs

    def prune_index(self, batch: int = 200) -> int:
        """Drop the oldest ids from the job index whose records have expired."""
        ids = [i.decode() for i in self.client.zrange(keys.JOBS, 0, batch - 1)]
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.exists(keys.job(job_id))
        gone = [j for j, exists in zip(ids, pipe.execute(), strict=True) if not exists]
        if gone:
            self.client.zrem(keys.JOBS, *gone)
        return len(gone)

    def active(self) -> list[str]:
        return sorted(i.decode() for i in self.client.smembers(keys.ACTIVE_JOBS))

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> None:
        job_keys = [keys.job(job_id), keys.job_events(job_id), keys.leases(job_id)]
        job_keys += [keys.queued(job_id), keys.tasks(job_id)]
        res = self.runner.run("cancelJob", job_id, job_keys, [reason])
        if res.code == Code.NOT_FOUND:
            raise JobNotFound(job_id)
        if res.code == Code.JOB_FINISHED:
            raise JobFinished(job_id, res.data["job_status"])
        self.finalize(job_id)

    def retire(self, job_id: str) -> None:
        """Drop a job that succeeded from the active set; its keys start to expire.

        The scripts already started the retention clock of each task as it
        finished; the active set is a cross-job key, so no script may touch it
        together with the job's keys.
        """
        retention_ms = self.client.hget(keys.job(job_id), "retention_ms")
        self._expire(job_id, [], retention_ms)

    def finalize(self, job_id: str) -> bool:
        """Retire a finished job and set every key of it to expire.

        Unlike ``retire`` this also covers the tasks a failed or cancelled job
        left unfinished. Idempotent; the reaper calls it for any active job
        found finished, so a crash right after a job's last script loses nothing.
        """
        status, retention_ms = self.client.hmget(keys.job(job_id), "status", "retention_ms")
        if status is not None and not JobStatus(status.decode()).finished:
            return False
        task_ids = [t.decode() for t in self.client.smembers(keys.tasks(job_id))]
        self._expire(job_id, [keys.task(job_id, t) for t in task_ids], retention_ms)
        return True

    def _expire(self, job_id: str, extra: list[str], retention_ms: bytes | None) -> None:
        """Set the job's keys (and ``extra``) to expire after its own retention."""
        ttl_ms = int(retention_ms) if retention_ms else self.retention_s * 1000
        with self.client.pipeline(transaction=False) as pipe:
            for key in [*keys.job_keys(job_id), *extra]:
                pipe.pexpire(key, ttl_ms)
            pipe.srem(keys.ACTIVE_JOBS, job_id)
            pipe.execute()
