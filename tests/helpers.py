"""Small builders shared by the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_benchmark(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``benchmarks/<script> ARGS`` as a user runs it, its output captured."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
