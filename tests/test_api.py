"""The Python API (``coordinator.api.Client``) against a private Redis and a real fleet."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import ValidationError

from coordinator import Client, Progress, WaitTimeout
from shared_state import JobNotFound, Scenario, State, TaskStatus

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


def test_a_retry_that_sets_a_budget_ends_the_runs_the_jobs_end_left_open_first(
    state: State,
) -> None:
    """A run reads whether its job has a budget at its claim: one a failed job left open
    (the worker that failed it died before the job's end ended the rest) would go on
    calling without reserving. A retry ends it (the job's end, ``JobStore.finalize``, first);
    its task runs again, from a new claim that says the job has a budget now."""
    job, _, (dying, running) = job_with_children(state, 2, max_attempts=1)

    def opening(_job: object) -> Callable[[object], None]:
        return lambda _pipe: None  # opens the run, with no reads outside the job

    open_run = state.tasks.claim(job.job_id, running, "w1", 60_000, open_run=opening)
    assert open_run is not None and open_run.opened is not None
    assert not open_run.opened.budgeted
    doomed = state.tasks.claim(job.job_id, dying, "w2", 60_000)
    assert doomed is not None
    assert state.tasks.fail(doomed.claim, "boom", retryable=False) == "dead"
    assert state.jobs.get(job.job_id).status == "failed"
    assert state.tasks.get(job.job_id, running).status == TaskStatus.CLAIMED  # left open
    Client(state).retry(job.job_id, token_budget=1_000)
    task = state.tasks.get(job.job_id, running)
    assert task.status == TaskStatus.QUEUED and task.owner == ""
    again = state.tasks.claim(job.job_id, running, "w3", 60_000, open_run=opening)
    assert again is not None and again.opened is not None and again.opened.budgeted


def test_a_submit_with_a_bad_field_refuses_before_it_imports_the_folder(
    state: State, tmp_path
) -> None:
    """Every field is checked first: a blank goal does not store the folder's files."""
    (tmp_path / "a.py").write_text("print('a')\n")
    client = Client(state)
    with pytest.raises(ValidationError, match="must not be blank"):
        client.submit("  ", workspace=tmp_path)
    assert state.client.dbsize() == 0
    job_id = client.submit("with files", workspace=tmp_path, scenario=Scenario.NOOP)
    job = state.jobs.get(job_id)
    assert job.workspace.startswith("t-") and job.workspace_commit == ""
