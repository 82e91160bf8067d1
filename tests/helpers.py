"""Small builders shared by the tests."""

from __future__ import annotations

from shared_state import Child, Claim, Job, JobSpec, Role, Scenario, State


def job_with_children(
    state: State, n: int, *, max_attempts: int = 3, lease_ms: int = 60_000
) -> tuple[Job, Claim, list[str]]:
    """A job whose planner (claimed by 'planner-0') spawned ``n`` queued coder tasks."""
    job = state.jobs.submit(JobSpec(goal="test", scenario=Scenario.NOOP, max_attempts=max_attempts))
    root = state.tasks.claim(job.job_id, job.root_task, "planner-0", lease_ms)
    assert root is not None
    parent = root.claim
    ids = state.tasks.spawn(parent, "review", [Child(Role.CODER, f"c{i}") for i in range(n)])
    return job, parent, ids
