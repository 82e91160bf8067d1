"""The Python API (``coordinator.api.Client``) against a private Redis and a real fleet."""

from __future__ import annotations

import pytest

from coordinator import Client, Progress, WaitTimeout
from shared_state import JobNotFound, Scenario, State

from .helpers import job_with_children


def test_a_client_submits_waits_and_reads_the_status_of_a_job(state: State, start_fleet):
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=2_000)
    client = Client(state)
    job_id = client.submit("greet", scenario=Scenario.NOOP, fanout=2)
    seen: list[Progress] = []
    job = client.wait(job_id, timeout=60, on_progress=seen.append)
    assert job.status == "succeeded"
    assert seen[0].done < seen[-1].done == seen[-1].total == 4
    assert seen[-1].status == "succeeded"
    doc = client.status(job_id)
    assert doc["status"] == "succeeded" and len(doc["tasks"]) == 4
    assert doc["providers"] == {}  # noop calls no model
    assert client.artifacts(job_id) == []


def test_a_wait_that_times_out_leaves_the_job_running(state: State) -> None:
    client = Client(state)
    job_id = client.submit("nobody serves", scenario=Scenario.NOOP)
    with pytest.raises(WaitTimeout, match="not cancelled"):
        client.wait(job_id, timeout=0.3)
    assert state.jobs.get(job_id).status == "queued"
    with pytest.raises(JobNotFound):
        client.wait("j-missing", timeout=1)


def test_progress_names_the_stage_a_waiting_planner_resumes_at_as_next(state: State) -> None:
    client = Client(state)
    job, _, _ = job_with_children(state, 2)  # the planner spawned two coders, resumes at review
    progress = client.progress(job.job_id)
    assert progress.stage == "review" and progress.stage_next
    assert ", next stage review, " in progress.line()
    fresh = client.submit("not started", scenario=Scenario.NOOP)
    assert ", stage start, " in client.progress(fresh).line()
    assert not client.progress(fresh).stage_next
