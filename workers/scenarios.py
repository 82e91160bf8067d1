"""Scripted task behaviours: the fleet's work without a model.

Every job runs the same shape: its planner spawns ``fanout`` coders, waits,
spawns one reviewer, waits, and completes. A behaviour is resumed from the
stage recorded in the task (never from memory), so a planner re-queued by its
last child, or reclaimed after a crash, continues where it was.

    noop   every task finishes at once
    slow   every task takes ~3 s in 0.5 s steps, its lease renewed meanwhile
    crash  fault injection: the first coder kills its own worker process with
           SIGKILL on every attempt, so the task dies after max attempts and
           the job fails; once the job is retried (``redfleet retry``) the
           poison is gone and the task succeeds
"""

from __future__ import annotations

import os
import signal

from shared_state import Child, Role, Scenario

from .outcomes import Done, HandedOff, Outcome
from .task_run import TaskRun

SLOW_STEPS = 6
SLOW_STEP_S = 0.5

# Planner stages, in order; each names what the planner does when it resumes.
START, REVIEW, REPORT = "", "review", "report"


def run(task: TaskRun) -> Outcome:
    """The behaviour's outcome, for ``outcomes.settle`` (a spawn is made here, as a role's
    tool makes it)."""
    if task.job.scenario is Scenario.SLOW:
        for _ in range(SLOW_STEPS):
            task.work_for(SLOW_STEP_S)
    if task.task.role is Role.PLANNER:
        return _plan(task)
    return _work(task)


def _plan(task: TaskRun) -> Outcome:
    job = task.job
    if task.task.stage == START:
        task.spawn(
            REVIEW,
            [
                Child(Role.CODER, f"coder {i + 1}/{job.fanout}: {job.goal}"[:200])
                for i in range(job.fanout)
            ],
        )
        return HandedOff()
    if task.task.stage == REVIEW:
        task.spawn(REPORT, [Child(Role.REVIEWER, f"review: {job.goal}"[:200])])
        return HandedOff()
    return Done(f"{job.fanout} coder task(s) reviewed")


def _work(task: TaskRun) -> Outcome:
    poisoned = task.task.brief.startswith("coder 1/") and not task.task.retries
    if task.job.scenario is Scenario.CRASH and poisoned:
        os.kill(os.getpid(), signal.SIGKILL)
    return Done(f"{task.task.role.value} done")
