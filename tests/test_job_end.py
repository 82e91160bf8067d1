"""Every way a job ends goes through one hook, and leaves no task of it open (real server)."""

from __future__ import annotations

import time

import pytest

from coordinator.api import Client
from coordinator.reaper import Reaper
from shared_state import JobFinished, JobSpec, Scenario, State, TaskStatus, keys
from workers import handoff

from .conftest import events_named
from .helpers import job_with_children

OPEN = {TaskStatus.QUEUED, TaskStatus.WAITING, TaskStatus.BLOCKED, TaskStatus.CLAIMED}


def _statuses(state: State, job_id: str) -> dict[str, TaskStatus]:
    return {t.task_id: t.status for t in state.tasks.list(job_id)}


def test_a_failed_jobs_tasks_all_end_and_a_retry_takes_them_up_where_they_were(
    state: State,
) -> None:
    job, parent, (dying, queued, claimed) = job_with_children(state, 3, max_attempts=1)
    held = state.tasks.claim(job.job_id, claimed, "coder-1", 60_000).claim
    doomed = state.tasks.claim(job.job_id, dying, "coder-2", 60_000).claim
    assert state.tasks.fail(doomed, "boom", retryable=False) == "dead"
    # Failed, but its planner waits, one coder is queued and one still claimed...
    assert _statuses(state, job.job_id)[parent.task_id] is TaskStatus.WAITING
    assert handoff.job_ended(state, job.job_id)  # what the worker calls after the death
    ended = _statuses(state, job.job_id)
    assert not OPEN & set(ended.values()), ended
    assert ended[queued] is ended[claimed] is ended[parent.task_id] is TaskStatus.CANCELLED
    was = {
        e.task_id: e.model_extra["was"] for e in events_named(state, job.job_id, "task.cancelled")
    }
    assert was == {parent.task_id: "waiting", queued: "queued", claimed: "claimed"}
    assert state.client.zcard(keys.leases(job.job_id)) == 0
    assert state.client.zcard(keys.queued(job.job_id)) == 0
    assert state.client.ttl(keys.task(job.job_id, parent.task_id)) > 0  # they expire with it
    # The claimed task's owner learns it at its next renewal, and stops.
    with pytest.raises(JobFinished):
        state.tasks.renew(held, 60_000)
    assert handoff.job_ended(state, job.job_id)  # idempotent: nothing more to end
    assert len(events_named(state, job.job_id, "task.cancelled")) == 3

    requeued = state.jobs.retry(job.job_id)
    assert sorted(requeued) == sorted([dying, queued, claimed])
    assert _statuses(state, job.job_id)[parent.task_id] is TaskStatus.WAITING  # waits again
    for task_id in requeued:
        claim = state.tasks.claim(job.job_id, task_id, "coder-3", 60_000).claim
        state.tasks.complete(claim, parent.task_id, "ok")
    assert _statuses(state, job.job_id)[parent.task_id] is TaskStatus.QUEUED  # fan-in went on


def test_a_task_the_reaper_finds_dead_ends_its_job_in_the_same_tick(state: State) -> None:
    job, parent, (first, second, queued) = job_with_children(state, 3, max_attempts=1)
    for lost in (first, second):  # their workers are never heard of again
        state.tasks.claim(job.job_id, lost, "coder-1", 50)
    envelopes = {
        state.client.hget(keys.task(job.job_id, t), "envelope").decode() for t in (first, second)
    }
    deadline = time.monotonic() + 10
    while len(state.tasks.expired([job.job_id])) < 2:
        assert time.monotonic() < deadline, "the leases never expired"
        time.sleep(0.02)
    report = Reaper(state, redeliver_after_ms=60_000).tick()
    assert len(report.dead) == 1 and report.dead[0] in (first, second)  # the other: cancelled
    assert report.retired == [job.job_id]  # not left for the next tick
    assert set(report.discarded) == envelopes  # both old envelopes, the cancelled one's too
    ended = _statuses(state, job.job_id)
    assert not OPEN & set(ended.values()), ended
    assert ended[queued] is ended[parent.task_id] is TaskStatus.CANCELLED
    assert state.jobs.active() == []
    assert state.client.ttl(keys.task(job.job_id, parent.task_id)) > 0  # its clock started


def test_a_cancel_through_the_api_ends_every_task_and_writes_the_handoff(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="write a parser", scenario=Scenario.AGENTS))
    client = Client(state)
    client.cancel(job.job_id, reason="changed my mind")
    assert _statuses(state, job.job_id) == {job.root_task: TaskStatus.CANCELLED}
    assert [r.kind for r in state.artifacts(job.job_id).list()] == ["handoff"]
    assert state.jobs.active() == []
    with pytest.raises(JobFinished):
        client.cancel(job.job_id)
    # The reaper, finding it ended, has nothing left to do.
    assert Reaper(state, redeliver_after_ms=60_000).tick().retired == []
