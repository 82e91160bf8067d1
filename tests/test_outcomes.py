"""A run's outcome is typed, and one place settles it with one fenced write (real server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared_state import JobStatus, State, TaskStatus
from workers.outcomes import Asks, Done, Failed, HandedOff, Outcome, settle

from .test_journal import claimed

WORKERS = Path(__file__).resolve().parent.parent / "workers"


@pytest.mark.parametrize(
    ("outcome", "task_status", "job_status"),
    [
        (Done("a-result"), TaskStatus.SUCCEEDED, JobStatus.SUCCEEDED),
        (Failed("broken input"), TaskStatus.DEAD, JobStatus.FAILED),
        (Failed("provider timed out", retryable=True), TaskStatus.QUEUED, JobStatus.RUNNING),
        (Asks('may I call write_file path="x"?', "d1"), TaskStatus.BLOCKED, JobStatus.BLOCKED),
        (HandedOff(), TaskStatus.CLAIMED, JobStatus.RUNNING),
    ],
)
def test_each_outcome_is_settled_as_its_type_says(
    state: State, outcome: Outcome, task_status: TaskStatus, job_status: JobStatus
) -> None:
    run = claimed(state)
    settle(run, outcome)
    task = state.tasks.get(run.job.job_id, run.task.task_id)
    assert task.status is task_status
    assert state.jobs.get(run.job.job_id).status is job_status
    if isinstance(outcome, Done):
        assert task.result == "a-result"
    if isinstance(outcome, Failed):
        assert task.error == outcome.reason
    if isinstance(outcome, Asks):
        assert (task.question, task.approval_for) == (outcome.question, "d1")


def test_a_reason_is_kept_at_most_500_characters(state: State) -> None:
    run = claimed(state)
    settle(run, Failed("x" * 5_000))
    assert len(state.tasks.get(run.job.job_id, run.task.task_id).error) == 500


def test_roles_and_behaviours_end_their_runs_only_through_settle() -> None:
    # Whether a task is done, dead or tried again is decided by the outcome's type in
    # ``settle``; a role that wrote its own completion or failure would be a second place.
    ending = re.compile(r"\brun\.(complete|fail|block)\(|\btask\.(complete|fail|block)\(")
    sources = [*sorted((WORKERS / "roles").glob("*.py")), WORKERS / "scenarios.py"]
    offenders = [
        f"{path.name}:{n}"
        for path in sources
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if ending.search(line)
    ]
    assert offenders == []
