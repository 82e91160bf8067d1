"""The closed sets a record's fields take: roles, statuses, scenarios.

Plain enums, apart from the pydantic records of ``models`` that use them, so the
command line can name them in its options without loading pydantic.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    PLANNER = "planner"
    CODER = "coder"
    REVIEWER = "reviewer"


class TaskStatus(StrEnum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    WAITING = "waiting"
    BLOCKED = "blocked"  # waiting for a person: `redfleet approve` or `reject`
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    BLOCKED = "blocked"  # a task waits for a person; the others go on
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class Scenario(StrEnum):
    """What a job's tasks do.

    agents: the planner, coder and reviewer roles, driven by the fleet's model
    provider (the ``scripted`` provider replays a script; no model is called).
    The others are scripted task behaviours for exercising the core, with no
    model at all. noop: every task finishes at once. slow: every task takes
    ~3 s in 0.5 s steps, renewing its lease. crash: fault injection for fleet
    tests — the first coder task kills its own worker process on every attempt
    until the job is retried (``redfleet retry``: the poison is gone then).
    """

    AGENTS = "agents"
    NOOP = "noop"
    SLOW = "slow"
    CRASH = "crash"
