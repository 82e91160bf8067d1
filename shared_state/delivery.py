"""Delivery of tasks to workers through RQ: one queue per role.

An RQ job here is only an envelope, ``execute(job_id, task_id)`` encoded as
JSON; ownership is decided by the claim script, never by RQ. RQ may deliver
an envelope twice (the second claim fails quietly) or lose it (the reaper
finds the task queued with no live envelope and sends a new one). Each
delivery gets a fresh RQ job id, recorded in the task hash as ``envelope``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from . import keys
from .models import Role

EXECUTE = "workers.runtime.execute"
QUEUE_PREFIX = "redfleet."
FAILURE_TTL_S = 3600
# A finished envelope expires after this. Not 0: RQ deletes a job kept for 0 s
# at once, walking every registry of its queue, which costs a worker about as
# much as claiming and completing the task; an expiry costs nothing.
RESULT_TTL_S = 60


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
        self.queues = {
            role: Queue(queue_name(role), connection=client, serializer=JSONSerializer)
            for role in Role
        }

    def send(self, envelopes: Iterable[Envelope]) -> None:
        """Enqueue one RQ job per envelope and record its id on the task, in one MULTI."""
        envelopes = list(envelopes)
        if not envelopes:
            return
        with self.client.pipeline() as pipe:
            for env in envelopes:
                rq_id = f"{env.task_id}_{secrets.token_hex(3)}"
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

    def is_waiting(self, role: Role, rq_id: str) -> bool:
        """True while the envelope sits in its queue, not yet taken by a worker."""
        return self.client.lpos(self.queues[role].key, rq_id) is not None

    def waiting_ids(self, roles: set[Role]) -> set[bytes]:
        """Every envelope id waiting in the given roles' queues (one LRANGE each)."""
        pipe = self.client.pipeline(transaction=False)
        for role in roles:
            pipe.lrange(self.queues[role].key, 0, -1)
        return {rq_id for ids in pipe.execute() for rq_id in ids}

    def depths(self) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        for queue in self.queues.values():
            pipe.llen(queue.key)
        return {role.value: n for role, n in zip(self.queues, pipe.execute(), strict=True)}
