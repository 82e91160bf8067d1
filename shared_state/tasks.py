"""Task ownership: claim, renew, complete, fail, spawn, reap — each one Lua script.

Every write by a worker carries the fencing token its claim returned; a stale
token raises ``Fenced`` (and the script records ``task.fenced``). Tasks that a
script puts back in a queue (a re-queued parent, spawned children, a failed
or reaped attempt) are delivered here, so no caller can forget to.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from . import keys
from .backoff import Failure, retry_args
from .client import Queued
from .delivery import Delivery, Envelope
from .errors import (
    StateError,
    TaskNotFound,
)
from .kinds import Role
from .models import Claim, Job, Task
from .redact import redact
from .replies import ABSENT, Asked, check
from .scripts import Reads, Runner, ScriptResult, server_ms, to_ms


def new_task_id(role: Role) -> str:
    return f"{role.value[0]}-{secrets.token_hex(5)}"


@dataclass(frozen=True)
class Child:
    """A task to spawn: its role, a short brief and its input's artifact id.

    Payloads go by reference: anything longer than the brief lives in the
    input artifact.
    """

    role: Role
    brief: str = ""
    input: str = ""


@dataclass(frozen=True)
class Completion:
    parent_requeued: str
    job_finished: bool


@dataclass(frozen=True)
class Opened:
    """The records a claim that opened its run brought back with it (``TaskStore.claim``)."""

    checkpoint: str | None  # the task's last checkpoint (JSON), if any
    journal: dict[str, str]  # the task's journal entries: key -> entry (JSON)
    input: str | None  # its input artifact's text; None: none, gone, or one a forget redacted
    read: tuple[Any, ...] | None  # the replies to the reads that rode along; None: none did
    # Whether the job has a token or money budget its calls reserve from (True: not known).
    budgeted: bool = True


@dataclass(frozen=True)
class Claimed:
    """A successful claim: the task as claimed, its job, and the claim to write with.

    ``job`` is the job as this store first saw it (see ``TaskStore.claim``):
    its spec is exact, its status may have moved on since.
    """

    task: Task
    job: Job
    claim: Claim
    opened: Opened | None = None  # the run's records, when the claim opened it


def _decoded(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


def _task_from(fields: dict[str, Any]) -> Task:
    return Task.model_validate(fields)


class TaskStore:
    # Jobs whose spec this store has seen; a worker claims many tasks of few jobs.
    JOBS_KEPT = 256

    def __init__(self, runner: Runner, delivery: Delivery) -> None:
        self.runner = runner
        self.client = runner.client
        self.delivery = delivery
        self._jobs: dict[str, Job] = {}
        self._jobs_lock = threading.Lock()

    # -- the owner's writes -------------------------------------------------------

    def claim(
        self,
        job_id: str,
        task_id: str,
        worker: str,
        lease_ms: int,
        *,
        open_run: Callable[[Job], Reads | None] | None = None,
        carrying: Sequence[Queued] = (),
    ) -> Claimed | None:
        """Claim a task; None when it is not claimable (a duplicate delivery, a finished job).

        The job's fields come back only with the first claim of a job: its spec
        changes only when the job is resumed (every claim says how often it
        was), so the store keeps it rather than have every claim read and
        ship the whole job hash.

        With ``open_run``, the claim opens the run too (``Claimed.opened``): the
        task's checkpoint, journal and input (and whether the job has a budget)
        come back with it, and so do the replies to the reads ``open_run`` queues
        for the job, when this store knows the job already — a run starts in one
        round trip. For a job it knows, ``open_run`` returning None says its runs
        need no opening.

        ``carrying``: commands another client queued that go in the claim's round trip,
        after it, their replies unread (``Runner.run_reading``): RQ's writes as the
        envelope that delivered the task starts (``slots.take_start_writes``).
        """
        job = self._jobs.get(job_id)
        reads = open_run(job) if open_run is not None and job is not None else None
        opening = open_run is not None and (job is None or reads is not None)
        # An expired lease taken over here is a lost worker's: its retry backs off as such.
        args = [worker, lease_ms, "" if job else "1", *retry_args(Failure.LOST)]
        args.append("1" if opening else "")
        res, read = self.runner.run_reading(
            "claimTask", job_id, keys.script_keys("claimTask", job_id, task_id), args, reads,
            carrying,
        )  # fmt: skip
        if not check("claimTask", res, Asked(job_id=job_id, task_id=task_id)).ok:
            return None
        task = _task_from(res.data["task"])
        if job is not None and job.resumes != int(res.data["resumes"]):
            job, reads = None, None  # resumed since: its goal and constraints may be new
        if job is None:
            raw = res.data.get("job") or _decoded(self.client.hgetall(keys.job(job_id)))
            job = self._keep_job(Job.model_validate(raw))
        opened = None
        if opening:
            opened = Opened(
                checkpoint=res.data.get("checkpoint"),
                journal=res.data["journal"],
                input=res.data.get("input"),
                read=tuple(read) if reads is not None else None,
                budgeted=bool(res.data["budgeted"]),
            )
        claim = Claim(
            task_id=task_id,
            job_id=job_id,
            role=task.role,
            owner=worker,
            token=task.token,
            lease_until=task.lease_until,
        )
        return Claimed(task=task, job=job, claim=claim, opened=opened)

    def _keep_job(self, job: Job) -> Job:
        # Shared by a process's task slots: two evicting at once must not both pick one key.
        with self._jobs_lock:
            if len(self._jobs) >= self.JOBS_KEPT:
                self._jobs.pop(next(iter(self._jobs)), None)  # the first seen goes first
            self._jobs[job.job_id] = job
        return job

    def renew(self, claim: Claim, lease_ms: int) -> int:
        """Extend the lease; returns the new deadline (ms, Redis time)."""
        res = self.runner.run(
            "renewLease",
            claim.job_id,
            keys.script_keys("renewLease", claim.job_id, claim.task_id),
            [claim.token, lease_ms, claim.owner],
        )
        check("renewLease", res, Asked.owner(claim))
        return int(res.data["lease_until"])

    def renew_many(self, claims: Sequence[Claim], lease_ms: int) -> list[int | StateError]:
        """Extend every lease in one round trip; per claim, its new deadline or why not.

        A refusal (fenced, the job finished, the task gone) or an error reply
        is that claim's alone; a lost connection raises ConnectionFailed.
        """
        calls = [
            (
                c.job_id,
                keys.script_keys("renewLease", c.job_id, c.task_id),
                [c.token, lease_ms, c.owner],
            )
            for c in claims
        ]
        outcomes: list[int | StateError] = []
        for claim, res in zip(claims, self.runner.run_many("renewLease", calls), strict=True):
            if isinstance(res, Exception):
                outcomes.append(StateError(f"renewing task {claim.task_id}: {res}"))
                continue
            try:
                check("renewLease", res, Asked.owner(claim))
            except StateError as exc:
                outcomes.append(exc)
                continue
            outcomes.append(int(res.data["lease_until"]))
        return outcomes

    def complete(self, claim: Claim, parent_id: str, result: str = "") -> Completion:
        res = self.runner.run(
            "completeTask",
            claim.job_id,
            # A root task has no parent: its own key stands in (the script ignores it).
            keys.script_keys(
                "completeTask", claim.job_id, claim.task_id, parent_id=parent_id or claim.task_id
            ),
            [claim.token, claim.owner, result],
        )
        check("completeTask", res, Asked.owner(claim))
        # Integers on the first reply, strings when a retry is answered from the record.
        done = Completion(res.data["parent_requeued"], int(res.data["job_finished"]) == 1)
        if done.parent_requeued:
            parent_role = Role(res.data["parent_role"])
            self.delivery.send([Envelope(claim.job_id, done.parent_requeued, parent_role)])
        return done

    def fail(
        self, claim: Claim, reason: str, *, retryable: bool = True, kind: Failure = Failure.ERROR
    ) -> str:
        """End this attempt; returns 'requeued' or 'dead'.

        A requeued task waits out ``kind``'s backoff (``backoff.RETRY``); the
        reaper delivers it when it is due.
        """
        res = self.runner.run(
            "failTask",
            claim.job_id,
            keys.script_keys("failTask", claim.job_id, claim.task_id),
            # Masked where it enters: a reason quotes errors, and an error may quote a key.
            [claim.token, claim.owner, redact(reason), int(retryable), *retry_args(kind)],
        )
        check("failTask", res, Asked.owner(claim))
        outcome = res.data["outcome"]
        if outcome == "requeued" and not int(res.data["retry_in_ms"]):
            self.delivery.send([Envelope(claim.job_id, claim.task_id, claim.role)])
        return outcome

    def spawn(
        self,
        claim: Claim,
        stage: str,
        children: Sequence[Child],
        *,
        journal: tuple[str, str] = ("", ""),
    ) -> list[str]:
        """Create child tasks, park the parent as waiting (resuming at ``stage``).

        ``journal`` is a (key, entry) written to the job's journal in the same
        atomic step, for a spawn made by a journaled tool call.
        """
        if not children:
            raise ValueError("spawn needs at least one child")
        ids = [new_task_id(c.role) for c in children]
        child_args = [
            x for i, c in zip(ids, children, strict=True) for x in (i, c.role, c.brief, c.input)
        ]
        res = self.runner.run(
            "spawnChildren",
            claim.job_id,
            [
                *keys.script_keys("spawnChildren", claim.job_id, claim.task_id),
                *(keys.task(claim.job_id, i) for i in ids),
            ],
            [claim.token, claim.owner, stage, *journal, *child_args],
        )
        check("spawnChildren", res, Asked.owner(claim))
        self.delivery.send(
            Envelope(claim.job_id, i, c.role) for i, c in zip(ids, children, strict=True)
        )
        return ids

    def owner_write(
        self,
        claim: Claim,
        writes: Sequence[tuple[str, str, str]],
        guards: Sequence[tuple[str, str, str | None]] = (),
        *,
        ride: bool = False,
    ) -> None:
        """Fenced HSETs into the record hashes of the claim's job: (key, field, value) each.

        The keys must be the job's journal, checkpoints, workspace or progress; any other
        raises ForeignTarget and nothing is written. ``guards`` (key, field, value read,
        None for a field that did not exist): any that changed since raises
        RecordChanged, and nothing is written. ``ride``: sent with this thread's next
        write (``Runner.ride``), which raises what this one would.
        """
        targets = list(dict.fromkeys(key for key, _, _ in [*guards, *writes]))

        def triple(key: str, field: str, value: str | None) -> tuple[int | str, ...]:
            return (targets.index(key) + 1, field, ABSENT if value is None else value)

        args = [x for g in guards for x in triple(*g)] + [x for w in writes for x in triple(*w)]
        where = [*keys.script_keys("ownerWrite", claim.job_id, claim.task_id), *targets]
        call = ("ownerWrite", claim.job_id, where, [claim.token, claim.owner, len(guards), *args])
        if ride:
            self.runner.ride([call], lambda res: _checked("ownerWrite", res, Asked.owner(claim)))
            return
        check("ownerWrite", self.runner.run(*call), Asked.owner(claim))

    def children(self, job_id: str, parent_id: str, wave: str) -> list[Task]:
        """The tasks ``parent_id`` spawned for the stage ``wave``, in creation order: from
        the list the spawn left on the parent (a task spawned by an older version has none:
        the job's tasks are read then)."""
        listed = self.client.hget(keys.task(job_id, parent_id), f"children:{wave}")
        if listed is None:
            return [t for t in self.list(job_id) if t.parent_id == parent_id and t.wave == wave]
        return self._fetch([(job_id, i) for i in listed.decode().split()])  # as spawned

    def block(self, claim: Claim, question: str, *, approval_for: str, stage: str) -> None:
        """Park the task for a person; it resumes at ``stage`` once approved.

        ``approval_for`` names what an approval lets through (the digest of
        the call waiting for it): a resumed task proceeds only with a call of
        that digest, so a changed call needs a new approval.
        """
        res = self.runner.run(
            "blockTask",
            claim.job_id,
            keys.script_keys("blockTask", claim.job_id, claim.task_id),
            [claim.token, claim.owner, redact(question), approval_for, stage],
        )
        check("blockTask", res, Asked.owner(claim))

    # -- a person's decisions ----------------------------------------------------

    def decide(
        self, job_id: str, task_id: str, *, approve: bool, note: str, by: str, asked: str = ""
    ) -> None:
        """Approve (the task is queued to resume) or reject (it is dead, the job fails).

        ``asked``: the ``approval_for`` of the question the person saw; the decision
        is refused (QuestionChanged) if the task asks another one now ("": any).
        """
        res = self.runner.run(
            "decideTask",
            job_id,
            keys.script_keys("decideTask", job_id, task_id),
            ["approve" if approve else "reject", redact(note), by, secrets.token_hex(8), asked],
        )
        check("decideTask", res, Asked(job_id=job_id, task_id=task_id, expected=asked))
        if approve:
            self.delivery.send([Envelope(job_id, task_id, Role(res.data["role"]))])

    # -- the reaper's writes -----------------------------------------------------

    def reap(self, job_id: str, task_id: str) -> str | None:
        """End an expired attempt; returns 'requeued', 'dead', or None if the lease is live.

        A requeued task waits out a lost worker's backoff (``backoff.RETRY``) first."""
        res = self.runner.run(
            "reapTask",
            job_id,
            keys.script_keys("reapTask", job_id, task_id),
            retry_args(Failure.LOST),
        )
        if not check("reapTask", res, Asked(job_id=job_id, task_id=task_id)).ok:
            return None
        if res.data["outcome"] == "requeued" and not int(res.data["retry_in_ms"]):
            self.delivery.send([Envelope(job_id, task_id, Role(res.data["role"]))])
        return res.data["outcome"]

    def redeliver(self, job_id: str, task_id: str, grace_ms: int, reason: str) -> bool:
        """Send a new envelope for a queued task whose delivery was lost, or whose retry
        is due (``grace_ms`` 0)."""
        task_keys = keys.script_keys("redeliverTask", job_id, task_id)
        res = self.runner.run("redeliverTask", job_id, task_keys, [grace_ms, reason])
        if check("redeliverTask", res, Asked(job_id=job_id, task_id=task_id)).ok:
            self.delivery.send([Envelope(job_id, task_id, Role(res.data["role"]))])
        return res.ok

    # -- reading -----------------------------------------------------------------

    def get(self, job_id: str, task_id: str) -> Task:
        found = self._fetch([(job_id, task_id)])
        if not found:
            raise TaskNotFound(task_id)
        return found[0]

    def list(self, job_id: str) -> list[Task]:
        """All tasks of a job, in creation order."""
        ids = self.client.smembers(keys.tasks(job_id))
        found = self._fetch([(job_id, i.decode()) for i in ids])
        return sorted(found, key=lambda t: (t.created_ms, t.task_id))

    def _fetch(self, pairs: Sequence[tuple[str, str]]) -> list[Task]:
        """Task records in one round trip; ones that expired are left out."""
        pipe = self.client.pipeline(transaction=False)
        for job_id, task_id in pairs:
            pipe.hgetall(keys.task(job_id, task_id))
        return [
            _task_from({k.decode(): v.decode() for k, v in raw.items()})
            for raw in pipe.execute()
            if raw
        ]

    def expired(self, job_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(job_id, task_id) of claims whose lease deadline has passed (Redis time)."""
        return self._due(job_ids, keys.leases, 0)

    def queued_since(self, job_ids: Sequence[str], older_than_ms: int) -> list[tuple[str, str]]:
        """(job_id, task_id) of tasks queued for longer than ``older_than_ms``."""
        return self._due(job_ids, keys.queued, older_than_ms)

    def retries_due(self, job_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(job_id, task_id) of retries whose backoff is over (Redis time)."""
        return self._due(job_ids, keys.retries, 0)

    def _due(
        self, job_ids: Sequence[str], index: Callable[[str], str], age_ms: int
    ) -> list[tuple[str, str]]:
        """Members of each job's time index scored at or before now - ``age_ms``."""
        if not job_ids:
            return []
        cutoff = server_ms(self.client) - age_ms
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.zrangebyscore(index(job_id), "-inf", cutoff)
        return [
            (job_id, t.decode())
            for job_id, ids in zip(job_ids, pipe.execute(), strict=True)
            for t in ids
        ]

    def claims(self, job_ids: Sequence[str]) -> list[tuple[Task, int]]:
        """Live claims with their remaining lease (ms), across the given jobs."""
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.zrange(keys.leases(job_id), 0, -1)
        pipe.time()
        *lists, now = pipe.execute()
        now_ms = to_ms(now)
        tasks = self._fetch(
            [(job_id, t.decode()) for job_id, ids in zip(job_ids, lists, strict=True) for t in ids]
        )
        return [(t, t.lease_until - now_ms) for t in tasks if t.status == "claimed"]


def _checked(script: str, res: ScriptResult | redis.ResponseError, asked: Asked) -> None:
    """``check`` for a call that rode with another: its error reply raised as it is."""
    if isinstance(res, redis.ResponseError):
        raise res
    check(script, res, asked)
