"""Delivery of tasks to workers through RQ: one queue per role.

An RQ job here is only an envelope, ``execute(job_id, task_id)`` encoded as
JSON; ownership is decided by the claim script, never by RQ. RQ may deliver
an envelope twice (the second claim fails quietly) or lose it (the reaper
finds the task queued with no live envelope and sends a new one). Each
delivery gets a fresh RQ job id, ``<job id>_<task id>_<random>``, recorded in
the task hash as ``envelope``; a worker reads whose tasks wait in a queue
from the ids alone (``waiting``, ``job_of``).

An envelope whose worker died is never finished by RQ: its job hash, its
entry in the queue's started ("wip") registry and its executions would stay
until RQ's own maintenance (every 10 minutes, on a worker's clock, then as a
failed job kept an hour). The reaper hands such envelopes to ``discard``: the
one of an attempt it ended or of a delivery it found lost, and, once a
minute, those whose worker is gone (``abandoned``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import redis

from . import keys
from .kinds import Role
from .scripts import run_plain

if TYPE_CHECKING:  # RQ loads where an envelope is touched: reading jobs and claims needs none
    from rq import Queue

EXECUTE = "workers.runtime.execute"
QUEUE_PREFIX = "redfleet."
FAILURE_TTL_S = 3600
# A finished envelope expires after this. Not 0: RQ deletes a job kept for 0 s
# at once, walking every registry of its queue, which costs a worker about as
# much as claiming and completing the task; an expiry costs nothing. Short:
# finished envelopes are most of Redis's memory under load (a soak at 20 jobs/s
# peaked at 31.5 MB with 60 s, 13.2 MB with 10 s), and nothing reads them but
# `rq info` and rq-dashboard, which show them for this long.
RESULT_TTL_S = 10


def queue_name(role: Role) -> str:
    return f"{QUEUE_PREFIX}{role.value}"


@dataclass(frozen=True)
class Envelope:
    """What a delivery carries: only identifiers, never a payload."""

    job_id: str
    task_id: str
    role: Role


class Delivery:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    @cached_property
    def queues(self) -> dict[Role, Queue]:
        """RQ's queue of each role, made on first use."""
        from rq import Queue
        from rq.serializers import JSONSerializer

        return {
            role: Queue(queue_name(role), connection=self.client, serializer=JSONSerializer)
            for role in Role
        }

    def register_queues(self) -> None:
        """List the role queues in RQ's queue registry, so `rq info` shows an idle fleet.

        RQ adds a queue to its registry (the ``rq:queues`` set) only when a job
        is enqueued on it, and has no public call to do so otherwise; this is
        the same SADD (``Queue.redis_queues_keys``, ``Queue.key``). Idempotent;
        a worker calls it once as it starts.
        """
        from rq import Queue

        self.client.sadd(Queue.redis_queues_keys, *(q.key for q in self.queues.values()))

    def send(self, envelopes: Iterable[Envelope]) -> None:
        """Enqueue one RQ job per envelope and record its id on the task, in one MULTI."""
        envelopes = list(envelopes)
        if not envelopes:
            return
        with self.client.pipeline() as pipe:
            for env in envelopes:
                rq_id = f"{env.job_id}_{env.task_id}_{secrets.token_hex(3)}"
                self.queues[env.role].enqueue_call(
                    EXECUTE,
                    args=(env.job_id, env.task_id),
                    job_id=rq_id,
                    timeout=-1,  # the lease, not RQ, decides when work is lost
                    result_ttl=RESULT_TTL_S,
                    failure_ttl=FAILURE_TTL_S,
                    description=f"redfleet {env.role.value} task {env.task_id}",
                    pipeline=pipe,
                )
                pipe.hset(keys.task(env.job_id, env.task_id), "envelope", rq_id)
            pipe.execute()

    def discard(self, envelopes: Iterable[tuple[Role, str]]) -> None:
        """Retire superseded envelopes, (role, RQ job id) each: out of RQ's registries.

        Each one's executions are deleted and taken out of the started
        registry, its id out of the queue's intermediate list (a worker that
        died between dequeue and start leaves it there, and RQ's maintenance
        marks it), and its job hash expires like a finished envelope's. A
        paused worker still holding one finishes it as RQ finishes any job
        (its claim or write is refused): its slot writes the whole record
        again, finished, with the same expiry (``workers.slots``).
        """
        from rq.executions import Execution, ExecutionRegistry
        from rq.job import Job as RQJob

        for role, rq_id in envelopes:
            queue = self.queues[role]
            started = queue.started_job_registry
            executions = ExecutionRegistry(rq_id, connection=self.client)
            with self.client.pipeline(transaction=False) as pipe:
                for execution_id in executions.get_execution_ids():
                    execution = Execution(execution_id, rq_id, connection=self.client)
                    started.remove_execution(execution, pipeline=pipe)
                    pipe.delete(execution.key)
                pipe.delete(executions.key)
                pipe.lrem(queue.intermediate_queue_key, 1, rq_id)
                pipe.delete(queue.intermediate_queue.get_first_seen_key(rq_id))
                RQJob(rq_id, connection=self.client).cleanup(RESULT_TTL_S, pipeline=pipe)
                pipe.execute()

    def abandoned(self) -> list[tuple[Role, str]]:
        """Envelopes RQ holds as started whose worker is gone, (role, RQ job id) each.

        A worker killed after its task's last write but before RQ's own
        bookkeeping leaves one that no lease or lost delivery points to. Gone
        means that the execution's worker (RQ's worker name is the redfleet
        worker id) has no live heartbeat, or that the execution record itself
        has expired. O(envelopes started); a paused worker whose heartbeat
        expired may see its envelope discarded, which only RQ's views notice.
        """
        from rq.executions import Execution

        started = [
            (role, rq_id, Execution(execution_id, rq_id, connection=self.client))
            for role, queue in self.queues.items()
            for rq_id, execution_id in queue.started_job_registry.get_job_and_execution_ids(
                cleanup=False
            )
        ]
        pipe = self.client.pipeline(transaction=False)
        for _, _, execution in started:
            pipe.hget(execution.key, "worker_name")
        names = pipe.execute()
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(keys.worker(_worker_id(name.decode()) if name else ""))
        return [
            (role, rq_id)
            for (role, rq_id, _), name, alive in zip(started, names, pipe.execute(), strict=True)
            if not (name and alive)
        ]

    def trim_registries(self) -> None:
        """Drop the entries of expired envelopes from the finished and failed registries.

        RQ's own cleanup (this one, on its scores' clock) runs from a worker
        every 10 minutes: at a few hundred envelopes a second that would be
        hundreds of thousands of entries. One round trip, O(entries dropped).
        """
        from rq.registry import FailedJobRegistry, FinishedJobRegistry

        with self.client.pipeline(transaction=False) as pipe:
            for queue in self.queues.values():
                for registry in (FinishedJobRegistry, FailedJobRegistry):
                    registry(queue.name, connection=pipe).cleanup()
            pipe.execute()

    def is_waiting(self, role: Role, rq_id: str) -> bool:
        """True while the envelope sits in its queue, not yet taken by a worker."""
        return self.client.lpos(self.queues[role].key, rq_id) is not None

    def waiting_ids(self, roles: set[Role]) -> set[bytes]:
        """Every envelope id waiting in the given roles' queues (one LRANGE each)."""
        pipe = self.client.pipeline(transaction=False)
        for role in roles:
            pipe.lrange(self.queues[role].key, 0, -1)
        return {rq_id for ids in pipe.execute() for rq_id in ids}

    def waiting(self, role: Role, limit: int) -> list[str]:
        """The first ``limit`` envelopes (RQ job ids) waiting in ``role``'s queue, in order;
        ``job_of`` names each one's job."""
        return [rq_id.decode() for rq_id in self.client.lrange(self.queues[role].key, 0, limit - 1)]

    def swap(self, role: Role, taken: str, instead: str) -> bool:
        """Take the waiting envelope ``instead`` in place of ``taken``, which a slot's
        dequeue moved to RQ's intermediate list, and put ``taken`` back at the head of the
        queue (``swapEnvelope``); False when ``instead`` waits no longer (nothing changed)."""
        queue = self.queues[role]
        where = [
            queue.key,
            queue.intermediate_queue_key,
            queue.intermediate_queue.get_first_seen_key(taken),
            keys.envelope_swap(taken, instead),
        ]
        return run_plain(self.client, "swapEnvelope", where, [taken, instead]).ok

    def depths(self) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        for queue in self.queues.values():
            pipe.llen(queue.key)
        return {role.value: n for role, n in zip(self.queues, pipe.execute(), strict=True)}


def job_of(rq_id: str) -> str:
    """The job an envelope's RQ job id names (an id from before ids named their job: a job
    of its own)."""
    return rq_id.partition("_")[0]


def _worker_id(rq_name: str) -> str:
    """The redfleet worker id behind an RQ worker name.

    Each slot of a worker is an RQ worker named ``<worker id>/<slot>``; a slot
    that rode out an outage runs a fresh RQ loop named ``<worker id>/<slot>.<n>``
    (RQ refuses a second birth under one name).
    """
    head, dot, tail = rq_name.rpartition(".")
    name = head if dot and tail.isdigit() else rq_name
    head, slash, tail = name.rpartition("/")
    return head if slash and tail.isdigit() else name
