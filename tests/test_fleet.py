"""Faults with real worker processes: SIGKILL, SIGSTOP, lost envelopes, poison tasks."""

from __future__ import annotations

import os
import signal
from collections import Counter

from coordinator.reaper import Reaper
from shared_state import Envelope, JobSpec, Role, Scenario, State, keys

from .conftest import events_named, wait_for
from .processes import busy

LEASE_MS = 1_500


def _succeeded(state: State, job_id: str) -> bool:
    return state.jobs.get(job_id).status == "succeeded"


def _busy_coder(state: State, job_id: str):
    """A coder worker currently holding a claim on one of the job's tasks."""
    return next(iter(busy(state, job_id, Role.CODER)), None)


def test_a_task_of_a_sigkilled_worker_is_reclaimed_and_the_job_succeeds(
    state: State, start_fleet
) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=LEASE_MS)
    job = state.jobs.submit(JobSpec(goal="crash me", scenario=Scenario.SLOW, fanout=2))
    victim = wait_for(lambda: _busy_coder(state, job.job_id), 30, "a busy coder")
    os.kill(victim.pid, signal.SIGKILL)
    wait_for(lambda: _succeeded(state, job.job_id), 90, "the job to succeed")
    task = state.tasks.get(job.job_id, victim.task_id)
    assert task.attempt == 2 and task.owner != victim.worker_id
    requeued = events_named(state, job.job_id, "task.requeued")
    assert [e.task_id for e in requeued] == [victim.task_id]
    assert requeued[0].model_extra["reason"] == f"lease expired (owner {victim.worker_id})"
    done = Counter(e.task_id for e in events_named(state, job.job_id, "task.succeeded"))
    assert set(done) == {t.task_id for t in state.tasks.list(job.job_id)}
    assert set(done.values()) == {1}
    assert not events_named(state, job.job_id, "task.fenced")  # nobody wrote with a stale token


def test_a_zombie_worker_woken_after_a_takeover_writes_nothing(state: State, start_fleet) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=LEASE_MS)
    job = state.jobs.submit(JobSpec(goal="zombie", scenario=Scenario.SLOW, fanout=1))
    zombie = wait_for(lambda: _busy_coder(state, job.job_id), 30, "a busy coder")
    os.kill(zombie.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: state.tasks.get(job.job_id, zombie.task_id).owner not in ("", zombie.worker_id),
            30,
            "another worker to take the task over",
        )
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    wait_for(lambda: _succeeded(state, job.job_id), 60, "the job to succeed")
    # Woken past its own lease deadline, it stops at its next check and sends nothing
    # (a write it did send would be refused: see test_lost_replies and test_tasks).
    assert not [
        e for e in events_named(state, job.job_id, "task.fenced") if e.worker == zombie.worker_id
    ]
    ended = [
        e for e in events_named(state, job.job_id, "task.succeeded") if e.task_id == zombie.task_id
    ]
    assert len(ended) == 1
    assert ended[0].worker != zombie.worker_id
    assert state.tasks.get(job.job_id, zombie.task_id).owner == ended[0].worker


def test_the_reaper_redelivers_a_task_whose_envelope_was_removed(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="lost"))
    queue = state.delivery.queues[Role.PLANNER]
    envelope = state.client.hget(keys.task(job.job_id, job.root_task), "envelope").decode()
    queue.remove(envelope)
    state.client.delete(f"rq:job:{envelope}")
    reaper = Reaper(state, redeliver_after_ms=300)
    assert reaper.tick().redelivered == []  # still inside the grace period
    wait_for(lambda: reaper.tick().redelivered == [job.root_task], 10, "a redelivery")
    fresh = state.client.hget(keys.task(job.job_id, job.root_task), "envelope").decode()
    assert fresh != envelope
    assert queue.get_job_ids() == [fresh]
    assert state.delivery.is_waiting(Role.PLANNER, fresh)
    assert reaper.tick().redelivered == []  # a waiting envelope is left alone
    (event,) = events_named(state, job.job_id, "task.requeued")
    assert event.model_extra["reason"] == "delivery lost: no envelope in queue"


def test_a_poison_task_dies_after_max_attempts_while_the_fleet_serves_other_jobs(
    state: State, start_fleet
) -> None:
    running = start_fleet(planners=1, coders=2, reviewers=1, lease_ms=1_000)
    poison = state.jobs.submit(
        JobSpec(goal="poison", scenario=Scenario.CRASH, fanout=2, max_attempts=2)
    )
    wait_for(lambda: state.jobs.get(poison.job_id).status == "failed", 90, "the job to fail")
    healthy = state.jobs.submit(JobSpec(goal="healthy", scenario=Scenario.NOOP, fanout=2))
    wait_for(lambda: _succeeded(state, healthy.job_id), 60, "the other job to succeed")
    (dead,) = events_named(state, poison.job_id, "task.dead")
    assert dead.model_extra["attempt"] == "2"
    reason = state.jobs.get(poison.job_id).reason
    assert reason.startswith(f"task {dead.task_id} (coder) dead after 2 attempt(s): lease expired")
    assert running.fleet.report.restarts >= 2


def test_a_duplicate_delivery_ends_quietly(state: State, start_fleet) -> None:
    job = state.jobs.submit(JobSpec(goal="twice", fanout=2))
    state.delivery.send([Envelope(job.job_id, job.root_task, Role.PLANNER)])
    assert len(state.delivery.queues[Role.PLANNER].get_job_ids()) == 2
    start_fleet(planners=2, coders=1, reviewers=1, lease_ms=LEASE_MS)
    wait_for(lambda: _succeeded(state, job.job_id), 60, "the job to succeed")
    wait_for(lambda: state.delivery.depths()["planner"] == 0, 30, "the duplicate to be consumed")
    claimed = Counter(e.task_id for e in events_named(state, job.job_id, "task.claimed"))
    assert claimed[job.root_task] == 3  # plan, review, report: one claim per stage
    claims = events_named(state, job.job_id, "task.claimed")
    tokens = [e.token for e in claims if e.task_id == job.root_task]
    assert tokens == sorted(set(tokens))  # each claim a new, higher token
    assert state.tasks.get(job.job_id, job.root_task).token == tokens[-1]
    assert not events_named(state, job.job_id, "task.fenced")
