"""`redfleet retry`: a failed job goes on from where it stopped, with the same id."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from shared_state import JobSpec, Scenario, State, TaskStatus, keys
from shared_state.errors import JobNotFound, NotRetryable

from .conftest import events_named, wait_for
from .test_cli import assert_one_line_error, run


def test_a_job_failed_by_a_poison_task_succeeds_after_retry_and_nothing_runs_twice(
    state: State, start_fleet, redis_url: str
) -> None:
    first = start_fleet(planners=1, coders=2, reviewers=1, lease_ms=1_000)
    job = state.jobs.submit(
        JobSpec(goal="poison", scenario=Scenario.CRASH, fanout=3, max_attempts=2)
    )
    wait_for(lambda: state.jobs.get(job.job_id).status == "failed", 90, "the job to fail")
    before = Counter(e.task_id for e in events_named(state, job.job_id, "task.succeeded"))
    # the healthy coders finished before the poison one died; the planner is still waiting
    assert len(before) == 2
    wait_for(lambda: not state.client.sismember(keys.ACTIVE_JOBS, job.job_id), 30, "retired")
    assert state.client.ttl(keys.job(job.job_id)) > 0  # a failed job's records expire
    first.stop()

    out = run("retry", job.job_id, "--json", url=redis_url)
    assert out.returncode == 0, out.stderr
    requeued = json.loads(out.stdout)["requeued"]
    assert len(requeued) == 1  # the poison coder (its siblings had succeeded)
    # running again: watched by the reaper, and nothing of it expires while it runs
    assert state.client.sismember(keys.ACTIVE_JOBS, job.job_id)
    task_keys = [keys.task(job.job_id, t.task_id) for t in state.tasks.list(job.job_id)]
    for key in [*keys.job_keys(job.job_id), *task_keys]:
        assert state.client.ttl(key) in (-1, -2), key  # -2: a key the job never wrote

    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=1_000)  # another fleet takes it on

    wait_for(lambda: state.jobs.get(job.job_id).status == "succeeded", 90, "the retried job")
    succeeded = Counter(e.task_id for e in events_named(state, job.job_id, "task.succeeded"))
    assert all(n == 1 for n in succeeded.values()), succeeded  # no task ran twice
    tasks = state.tasks.list(job.job_id)
    assert len(succeeded) == len(tasks)  # planner, 3 coders, reviewer
    assert all(t.status is TaskStatus.SUCCEEDED for t in tasks)
    assert state.jobs.get(job.job_id).retries == 1
    assert events_named(state, job.job_id, "job.retried")


def test_only_a_failed_job_can_be_retried(state: State, redis_url: str) -> None:
    job = state.jobs.submit(JobSpec(goal="fine"))
    with pytest.raises(NotRetryable, match="is queued"):
        state.jobs.retry(job.job_id)
    with pytest.raises(JobNotFound):
        state.jobs.retry("j-nope")
    assert_one_line_error(run("retry", job.job_id, url=redis_url), "only a failed job")
    assert_one_line_error(run("retry", "", url=redis_url), "JOB_ID")


def test_retry_wait_gives_up_after_its_timeout_and_the_job_goes_on(
    state: State, redis_url: str
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    claimed = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000)
    assert claimed is not None
    state.tasks.fail(claimed.claim, "broken", retryable=False)
    wait_for(lambda: state.jobs.get(job.job_id).status == "failed", 10, "the job to fail")
    proc = run("retry", job.job_id, "--wait", "--timeout", "1", url=redis_url)
    assert proc.returncode == 1, proc.stderr
    assert "gave up waiting for job" in proc.stderr and "not cancelled" in proc.stderr
    assert state.jobs.get(job.job_id).status == "running"  # retried, nobody serves it
    alone = run("retry", job.job_id, "--timeout", "1", url=redis_url)
    assert_one_line_error(alone, "--timeout: only with --wait")
