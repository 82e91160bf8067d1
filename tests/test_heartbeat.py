"""The heartbeat renews every slot's lease in one round trip, each slot's outcome its own.

Against a real Redis through the loopback proxy, which counts the reads of
client bytes it passes on: a tick that sent one call per lease would take
at least as many reads as there are leases.
"""

from __future__ import annotations

from shared_state import JobSpec, Role, Scenario, State
from workers.heartbeat import Heartbeat

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
