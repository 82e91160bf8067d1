"""Small builders shared by the tests."""

from __future__ import annotations

from shared_state import Child, Claim, Job, JobSpec, Role, Scenario, State, Task


def claim_of(task: Task, owner: str) -> Claim:
    return Claim(
        task_id=task.task_id,
        job_id=task.job_id,
        role=task.role,
        owner=owner,
        token=task.token,
        lease_until=task.lease_until,
    )


def job_with_children(
    state: State, n: int, *, max_attempts: int = 3, lease_ms: int = 60_000
) -> tuple[Job, Claim, list[str]]:
    """A job whose planner (claimed by 'planner-0') spawned ``n`` queued coder tasks."""
    job = state.jobs.submit(JobSpec(goal="test", scenario=Scenario.NOOP, max_attempts=max_attempts))
    root = state.tasks.claim(job.job_id, job.root_task, "planner-0", lease_ms)
    assert root is not None
    parent = claim_of(root, "planner-0")
    ids = state.tasks.spawn(parent, "review", [Child(Role.CODER, f"c{i}") for i in range(n)])
    return job, parent, ids
