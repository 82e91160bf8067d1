"""Growth: every index and RQ's leftovers drain as fast as work arrives, on a real server."""

from __future__ import annotations

import os
import signal
import time

from rq import Worker
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job as RQJob

from coordinator.reaper import Reaper
from shared_state import JobSpec, Role, Scenario, State, keys
from shared_state.delivery import RESULT_TTL_S
from shared_state.jobs import SUBMIT_GRACE_MS
from shared_state.scripts import server_ms

from .conftest import events_named, wait_for
from .processes import busy

RETENTION_S = 2
JOBS = 1_000  # more than any batch the reaper ever took per tick
BEAT = {"pid": 1, "host": "h", "role": "coder", "state": "idle", "task_id": "", "job_id": ""}


def _indexed(state: State, job_ids: list[str]) -> dict[str, int]:
    """How many of ``job_ids`` each cross-job index still holds."""
    pipe = state.client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.zscore(keys.JOBS, job_id)
        pipe.sismember(keys.ACTIVE_JOBS, job_id)
        pipe.zscore(keys.EXPIRING_JOBS, job_id)
    found = pipe.execute()
    names = ("jobs", "active", "expiring")
    return {n: sum(bool(v) for v in found[i::3]) for i, n in enumerate(names)}


def _finished_jobs(state: State, n: int) -> list[str]:
    """``n`` jobs ended at once: three in four succeed (retired), one in four is cancelled."""
    ids = []
    for i in range(n):
        job = state.jobs.submit(JobSpec(goal=f"g{i}", scenario=Scenario.NOOP))
        if i % 4 == 3:
            state.jobs.cancel(job.job_id)
        else:
            root = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000).claim
            assert state.tasks.complete(root, "").job_finished
            state.jobs.finalize(job.job_id)
        ids.append(job.job_id)
    return ids


def test_finished_jobs_leave_every_index_after_their_retention_however_many(
    state: State, redis_url: str
) -> None:
    short = State.connect(redis_url, retention_s=RETENTION_S)
    job_ids = _finished_jobs(short, JOBS)
    assert _indexed(state, job_ids) == {"jobs": JOBS, "active": 0, "expiring": JOBS}
    expires = dict(zip(job_ids, state.client.zmscore(keys.EXPIRING_JOBS, job_ids), strict=True))
    reaper = Reaper(state, redeliver_after_ms=5_000)
    before = server_ms(state.client)
    first = reaper.tick()
    after = server_ms(state.client)
    indexed = state.client.zmscore(keys.JOBS, job_ids)
    kept = {j for j, score in zip(job_ids, indexed, strict=True) if score is not None}
    # Exactly the ids whose keys have expired went (the first ones ended while others ran).
    assert {j for j, t in expires.items() if t > after} <= kept
    assert not {j for j, t in expires.items() if t <= before} & kept
    assert kept and first.pruned_jobs == JOBS - len(kept)
    last = max(expires.values())
    wait_for(lambda: server_ms(state.client) > last, RETENTION_S + 10, "the retention to pass")
    assert reaper.tick().pruned_jobs == len(kept)
    assert _indexed(state, job_ids) == {"jobs": 0, "active": 0, "expiring": 0}
    assert not any(state.client.exists(keys.job(j)) for j in job_ids)  # Redis expired them


def test_an_id_without_a_record_is_kept_while_it_may_be_a_submission_in_progress(
    state: State,
) -> None:
    now = state.client.time()[0] * 1000
    young, old, unindexed = "j-young", "j-old", "j-unindexed"
    state.client.zadd(keys.JOBS, {young: now, old: now - SUBMIT_GRACE_MS - 1_000})
    state.client.sadd(keys.ACTIVE_JOBS, young, old, unindexed)
    reaper = Reaper(state, redeliver_after_ms=5_000)
    assert sorted(reaper.tick().retired) == [old, unindexed]
    assert state.jobs.active() == [young]  # indexed just now: records may be on their way
    assert reaper.tick().retired == []
    # With no record there is nothing to keep: the old id leaves the job index at once.
    assert [j.decode() for j in state.client.zrange(keys.JOBS, 0, -1)] == [young]


def test_the_sweep_drops_old_ids_whose_record_went_without_an_expiry(state: State) -> None:
    kept, vanished = (state.jobs.submit(JobSpec(goal=g)) for g in ("kept", "vanished"))
    state.client.delete(keys.job(vanished.job_id))
    assert state.jobs.prune_index() == 0  # as young as a submission still writing
    old = state.client.time()[0] * 1000 - SUBMIT_GRACE_MS - 1_000
    state.client.zadd(keys.JOBS, {kept.job_id: old, vanished.job_id: old})
    assert state.jobs.prune_index(batch=0) == 0  # the expiring index alone knows neither
    assert state.jobs.prune_index() == 1
    assert [j.decode() for j in state.client.zrange(keys.JOBS, 0, -1)] == [kept.job_id]


def test_a_stopped_heartbeat_leaves_the_worker_index_one_tick_past_the_bound(
    state: State,
) -> None:
    reaper = Reaper(state, redeliver_after_ms=5_000, stale_worker_ms=600)
    state.workers.beat("stopped", 200, BEAT)
    state.workers.beat("beating", 200, BEAT)
    assert reaper.tick().pruned_workers == 0
    deadline = time.monotonic() + 0.8
    while time.monotonic() < deadline:
        state.workers.beat("beating", 200, BEAT)
        time.sleep(0.1)
    assert reaper.tick().pruned_workers == 1
    assert [w.decode() for w in state.client.zrange(keys.WORKERS, 0, -1)] == ["beating"]


def _rq_leftovers(state: State, role: Role, rq_id: str) -> dict[str, object]:
    queue = state.delivery.queues[role]
    return {
        "ttl": state.client.ttl(RQJob.key_for(rq_id)),
        "started": rq_id in queue.started_job_registry.get_job_ids(cleanup=False),
        "executions": state.client.exists(ExecutionRegistry(rq_id, state.client).key),
        "intermediate": rq_id.encode() in state.client.lrange(queue.intermediate_queue_key, 0, -1),
    }


def _busy_coder_envelope(state: State, job_id: str) -> tuple[int, str, str] | None:
    """(pid, task id, envelope id) of a coder worker holding a claim on one of the job's tasks."""
    for w in busy(state, job_id, Role.CODER):
        envelope = state.client.hget(keys.task(job_id, w.task_id), "envelope")
        return w.pid, w.task_id, envelope.decode()
    return None


def test_a_reaped_lease_leaves_its_old_envelope_expiring_and_out_of_rqs_registries(
    state: State, start_fleet
) -> None:
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=1_500)
    job = state.jobs.submit(JobSpec(goal="kill me", scenario=Scenario.SLOW, fanout=1))
    pid, task_id, envelope = wait_for(
        lambda: _busy_coder_envelope(state, job.job_id), 30, "a busy coder"
    )
    assert _rq_leftovers(state, Role.CODER, envelope) == {
        "ttl": -1,
        "started": True,
        "executions": 1,
        "intermediate": False,
    }
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: events_named(state, job.job_id, "task.requeued"), 30, "the lease reaped")
    # The reaper discards the old envelope after it reaps, later in the same tick.
    left = wait_for(
        lambda: (now := _rq_leftovers(state, Role.CODER, envelope))["ttl"] > 0 and now,
        10,
        "the old envelope discarded",
    )
    assert 0 < left.pop("ttl") <= RESULT_TTL_S
    assert left == {"started": False, "executions": 0, "intermediate": False}
    fresh = state.client.hget(keys.task(job.job_id, task_id), "envelope").decode()
    assert fresh != envelope


def test_a_lost_delivery_leaves_its_old_envelope_expiring_and_out_of_the_intermediate_list(
    state: State,
) -> None:
    job = state.jobs.submit(JobSpec(goal="lost"))
    queue = state.delivery.queues[Role.PLANNER]
    envelope = state.client.hget(keys.task(job.job_id, job.root_task), "envelope").decode()
    # What RQ's dequeue does before a worker that then dies could start the job.
    state.client.lmove(queue.key, queue.intermediate_queue_key, "RIGHT", "LEFT")
    assert _rq_leftovers(state, Role.PLANNER, envelope)["intermediate"]
    reaper = Reaper(state, redeliver_after_ms=200)
    report = wait_for(lambda: (r := reaper.tick()).redelivered and r, 10, "a redelivery")
    assert report.discarded == [envelope]
    left = _rq_leftovers(state, Role.PLANNER, envelope)
    assert 0 < left.pop("ttl") <= RESULT_TTL_S
    assert left == {"started": False, "executions": 0, "intermediate": False}


def test_an_envelope_started_by_a_worker_now_gone_is_discarded_by_the_sweep(
    state: State,
) -> None:
    queue = state.delivery.queues[Role.PLANNER]
    state.workers.beat("alive", 60_000, BEAT)
    envelopes = []
    for worker in ("gone", "alive"):
        job = state.jobs.submit(JobSpec(goal=worker))
        rq_id = state.client.hget(keys.task(job.job_id, job.root_task), "envelope").decode()
        queue.remove(rq_id)
        # As RQ starts a job, here for a worker that was killed after the task's last write.
        with state.client.pipeline() as pipe:
            Execution.create(queue.fetch_job(rq_id), 420, pipeline=pipe, worker_name=worker)
            pipe.execute()
        envelopes.append(rq_id)
    gone, alive = envelopes
    report = Reaper(state, redeliver_after_ms=60_000).tick()  # a new reaper sweeps at once
    assert report.discarded == [gone]
    left = _rq_leftovers(state, Role.PLANNER, gone)
    assert 0 < left.pop("ttl") <= RESULT_TTL_S
    assert left == {"started": False, "executions": 0, "intermediate": False}
    assert _rq_leftovers(state, Role.PLANNER, alive)["started"]


def _memory(state: State) -> tuple[int, int]:
    return state.client.dbsize(), state.client.info("memory")["used_memory"]


def test_after_a_burst_and_its_retention_keys_and_memory_return_to_the_baseline(
    state: State, redis_url: str, start_fleet
) -> None:
    start_fleet(planners=2, coders=2, reviewers=1, lease_ms=5_000)
    wait_for(
        lambda: len(state.workers.list()) == Worker.count(connection=state.client) == 5,
        30,
        "the workers to beat and register with RQ",
    )
    base_keys, base_memory = _memory(state)
    short = State.connect(redis_url, retention_s=RETENTION_S)
    spec = JobSpec(goal="burst", scenario=Scenario.NOOP, fanout=2)
    job_ids = [short.jobs.submit(spec).job_id for _ in range(150)]
    peak_keys, peak_memory = base_keys, base_memory

    def all_retired() -> bool:
        nonlocal peak_keys, peak_memory
        n, mem = _memory(state)
        peak_keys, peak_memory = max(peak_keys, n), max(peak_memory, mem)
        return _indexed(state, job_ids)["active"] == 0

    wait_for(all_retired, 90, "every job to finish")
    assert peak_keys > base_keys + 500
    # Retention, then the finished envelopes' expiry, then a reaper tick.
    wait_for(
        lambda: _indexed(state, job_ids)["jobs"] == 0 and not state.client.keys("rq:job:*"),
        RETENTION_S + RESULT_TTL_S + 20,
        "the jobs and their envelopes to expire",
    )
    # The fleet's reaper (a tick every 100 ms) trims RQ's registries.
    wait_for(
        lambda: _memory(state)[0] <= base_keys + 1,  # + RQ's set of queues
        10,
        "the key count back to the baseline",
    )
    _, after_memory = _memory(state)
    assert _indexed(state, job_ids) == {"jobs": 0, "active": 0, "expiring": 0}
    # What stays is the capped global event stream's new entries: a small share of the peak.
    assert after_memory - base_memory < (peak_memory - base_memory) / 10, (
        base_memory,
        peak_memory,
        after_memory,
    )
