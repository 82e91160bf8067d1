"""The heartbeat renews every slot's lease in one round trip, each slot's outcome its own,
and carries the slots' RQ heartbeats in the same tick.

Against a real Redis through the loopback proxy, which counts the reads of
client bytes it passes on: a tick that sent one call per lease would take
at least as many reads as there are leases.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from rq import Queue
from rq.serializers import JSONSerializer
from rq.utils import now as rq_now

from shared_state import JobSpec, Role, Scenario, State
from workers import slots
from workers.heartbeat import Heartbeat
from workers.slots import SlotWorker

from .conftest import events_named
from .proxy import FaultProxy

SLOTS = 12
LEASE_MS = 3_000


def _held(state: State, remote: State) -> tuple[Heartbeat, list]:
    """A 12-slot heartbeat over the proxy, every slot holding a claim of a job of its own."""
    beat = Heartbeat(
        remote, worker_id="w1", role=Role.CODER, lease_ms=LEASE_MS, info={}, slots=SLOTS
    )
    jobs = [state.jobs.submit(JobSpec(goal=f"g{i}", scenario=Scenario.NOOP)) for i in range(SLOTS)]
    for lease, job in zip(beat.leases, jobs, strict=True):
        claimed = remote.tasks.claim(job.job_id, job.root_task, "w1", LEASE_MS)
        assert claimed is not None
        lease.hold(claimed.claim)
    return beat, jobs


def test_a_tick_renews_every_slots_lease_in_one_round_trip(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    beat, jobs = _held(state, remote)
    beat.tick()  # the first: the heartbeat's client connects, scripts are loaded
    before = [lease._deadline for lease in beat.leases]
    reads = proxy.requests
    beat.tick()
    # Renewals, the worker's heartbeat and the mirror flush: three round trips, not 12 + 2.
    assert proxy.requests - reads <= 3
    assert all(lease._deadline > was for lease, was in zip(beat.leases, before, strict=True))
    assert all(len(events_named(state, job.job_id, "task.renewed")) == 2 for job in jobs)
    for job in jobs:  # each renewal says its task's role (the fleet's metrics count by it)
        role = state.tasks.get(job.job_id, job.root_task).role.value
        renewed = events_named(state, job.job_id, "task.renewed")
        assert {e.model_extra.get("role") for e in renewed} == {role}, (role, renewed)
    beat.client.close()


def test_a_refused_renewal_loses_that_slots_lease_only(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    beat, jobs = _held(state, remote)
    victim = beat.leases[4]
    state.jobs.cancel(jobs[4].job_id)  # its renewal is refused: the job is finished
    before = [lease._deadline for lease in beat.leases]
    beat.tick()
    assert victim.lost.is_set() and victim.claim is None
    assert "cancelled" in victim.lost_reason
    others = [i for i in range(SLOTS) if i != 4]
    assert not any(beat.leases[i].lost.is_set() for i in others)
    assert all(beat.leases[i]._deadline > before[i] for i in others)
    assert beat._reachable
    beat.client.close()


def test_a_flushed_script_cache_reloads_and_renews_every_lease(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    beat, jobs = _held(state, remote)
    beat.tick()
    state.client.script_flush()  # as after a restart: every EVALSHA answers NOSCRIPT
    before = [lease._deadline for lease in beat.leases]
    beat.tick()
    assert not any(lease.lost.is_set() for lease in beat.leases)
    assert all(lease._deadline > was for lease, was in zip(beat.leases, before, strict=True))
    assert all(len(events_named(state, job.job_id, "task.renewed")) == 2 for job in jobs)
    beat.client.close()


def _stored_beats(state: State, workers: list[SlotWorker]) -> list[bytes | None]:
    return [state.client.hget(w.key, "last_heartbeat") for w in workers]


def _age(workers: list[SlotWorker], seconds: float) -> None:
    """As if each worker's last RQ heartbeat was ``seconds`` ago."""
    for worker in workers:
        worker.last_heartbeat = rq_now() - timedelta(seconds=seconds)


def test_a_tick_carries_the_slots_rq_heartbeats_so_an_idle_slot_sends_none(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    beat = Heartbeat(remote, worker_id="w1", role=Role.CODER, lease_ms=LEASE_MS, info={})
    queue = Queue("test.beats", connection=remote.client, serializer=JSONSerializer)
    workers = []
    for i in range(SLOTS):
        worker = SlotWorker(
            [queue], name=f"w1/{i}", connection=remote.client, serializer=JSONSerializer,
            worker_ttl=slots.RQ_WORKER_TTL_S, stop=threading.Event(), waiting=threading.Event(),
            commands=False, beats=beat.rq_workers,
        )  # fmt: skip
        beat.rq_workers.add(f"w1/{i}", worker)  # as ``serve`` does, before RQ's loop starts
        workers.append(worker)
    beat.tick()  # the first: the heartbeat's client connects
    # A tick between a slot's start and its RQ worker's birth writes no record of it: RQ
    # would take one for a live worker of that name, and refuse the birth.
    assert not any(state.client.exists(w.key) for w in workers)
    for worker in workers:
        worker.register_birth()  # as RQ's loop does before its first dequeue
    beat.tick()
    born = _stored_beats(state, workers)
    assert all(born)  # the births' own, not due again yet

    _age(workers, slots.RQ_HEARTBEAT_EVERY_S)
    reads = proxy.requests
    beat.tick()
    assert proxy.requests - reads <= 2  # the worker's heartbeat; the flush with the beats
    first = _stored_beats(state, workers)
    assert all(was != now for was, now in zip(born, first, strict=True))
    assert all(
        slots.RQ_WORKER_TTL_S < state.client.ttl(w.key) <= slots.RQ_WORKER_TTL_S + 60
        for w in workers
    )

    # What RQ's loop does at each turn of an idle slot's dequeue: nothing goes out.
    reads = proxy.requests
    for worker in workers:
        worker.heartbeat()
    assert proxy.requests == reads
    assert _stored_beats(state, workers) == first

    # A tick while none is due beats none; one that is due is beaten.
    _age(workers[3:4], slots.RQ_HEARTBEAT_EVERY_S)
    beat.tick()
    after = _stored_beats(state, workers)
    assert [i for i in range(SLOTS) if after[i] != first[i]] == [3]

    # A tick that got no answer leaves the beats it carried due: the next one sends them.
    _age(workers[7:8], slots.RQ_HEARTBEAT_EVERY_S)
    proxy.drop_reply(b"last_heartbeat")
    beat.tick()
    assert not beat._reachable
    assert (rq_now() - workers[7].last_heartbeat).total_seconds() >= slots.RQ_HEARTBEAT_EVERY_S
    sent = state.client.hget(workers[7].key, "last_heartbeat")  # it did arrive, unanswered
    beat.tick()
    assert beat._reachable
    assert state.client.hget(workers[7].key, "last_heartbeat") != sent

    # A slot's RQ worker that ended (its death recorded, its record kept a minute) is
    # never kept longer by a tick.
    workers[5].teardown()
    _age(workers[5:6], slots.RQ_HEARTBEAT_EVERY_S)
    beat.tick()
    assert state.client.hget(workers[5].key, "last_heartbeat") == after[5]
    assert 0 < state.client.ttl(workers[5].key) <= 60
    beat.client.close()
