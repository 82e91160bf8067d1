"""Typed records of what lives in Redis (pydantic v2, JSON on the wire)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .kinds import JobStatus, Role, Scenario, TaskStatus
from .names import check_name


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class JobSpec(_Record):
    """What a user submits."""

    goal: str = Field(max_length=2000)  # and not blank (below: one message for "" and "  ")
    scenario: Scenario = Scenario.NOOP
    fanout: int = Field(default=3, ge=1, le=100)
    max_attempts: int = Field(default=3, ge=1, le=100)
    token_budget: int = Field(default=0, ge=0, description="tokens all calls may use; 0: none")
    priority: int = Field(
        default=0, ge=0, le=9, description="its model calls' place while a route is busy (9 first)"
    )
    budget_usd: float = Field(
        default=0.0, ge=0, description="USD all calls may cost, at their routes' prices; 0: none"
    )
    tenant: str = Field(default="default", description="whose memory the job reads and writes")
    user: str = Field(default="default", description="the user the job runs for")
    idempotency_key: str = Field(
        default="",
        max_length=200,
        description="a submit with a key seen before returns that job instead of a new one",
    )
    workspace: str = Field(
        default="",
        max_length=80,
        description="the tree id of an imported workspace (``workspace.import_tree``)",
    )
    workspace_commit: str = Field(default="", max_length=64, description="its git commit")
    check: str = Field(default="", max_length=500, description="the workspace's own check command")
    approve: str = Field(
        default="",
        max_length=500,
        description="tools whose calls wait for a person's approval, comma-separated",
    )

    @field_validator("tenant", "user")
    @classmethod
    def _names(cls, value: str, info: ValidationInfo) -> str:
        return check_name(value, info.field_name or "name")

    @field_validator("idempotency_key")
    @classmethod
    def _key_printable(cls, key: str) -> str:
        if any(not "!" <= c <= "~" for c in key):
            raise ValueError("printable ASCII without spaces, at most 200 characters")
        return key

    @field_validator("approve")
    @classmethod
    def _tool_names(cls, given: str) -> str:
        """Sorted, each once: ``"write_file, run_checks"`` is ``"run_checks,write_file"``."""
        names = sorted({n.strip() for n in given.split(",") if n.strip()})
        bad = [n for n in names if not re.fullmatch(r"[a-z_]{1,64}", n)]
        if bad:
            raise ValueError(f"not a tool name: {bad[0]!r} (lower-case letters and '_')")
        return ",".join(names)

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, goal: str) -> str:
        if not goal.strip():
            raise ValueError("must not be blank")
        return goal.strip()


class Job(_Record):
    job_id: str
    goal: str
    scenario: Scenario
    fanout: int
    max_attempts: int
    status: JobStatus
    reason: str = ""
    result: str = ""  # the root task's result (an agents job: its report artifact id)
    root_task: str
    created_ms: int
    finished_ms: int = 0
    tenant: str = "default"  # jobs recorded before tenants belong to the default one
    user: str = "default"
    retries: int = 0  # `redfleet retry` rounds
    resumes: int = 0  # `redfleet resume` rounds
    constraints: str = ""  # the user's constraints, a JSON list (`resume --constraint`)
    criteria_version: str = ""  # of the goal, constraints and features, at the last resume
    criteria_ms: int = 0  # when the criteria last changed (Redis time)
    resume_features: str = ""  # the last resume's feature list artifact
    resume_checks: str = ""  # the last resume's checks artifact
    workspace: str = ""  # the tree id of the files it was submitted with ("" none)
    workspace_commit: str = ""  # the git commit they were read at ("" not a repository)
    check: str = ""  # the workspace's own check command (`submit --check`)
    approve: str = ""  # tools whose calls wait for a person (`submit --approve`), sorted, ","
    priority: int = 0  # its model calls' place while a route is busy (0-9, higher first)
    budget_usd: float = 0.0  # USD its calls may cost, as submitted (0: none)
    # Not stored: set on the Job a submit returns when its idempotency key named this job.
    existed: bool = Field(default=False, exclude=True)


class Task(_Record):
    task_id: str
    job_id: str
    role: Role
    parent_id: str = ""
    brief: str = ""
    input: str = ""  # artifact id of the task's input (brief, refs), "" for a root
    wave: str = ""  # the parent's resume stage when this task was spawned
    status: TaskStatus
    attempt: int = 1
    token: int = 0
    owner: str = ""
    lease_until: int = 0
    renewals: int = 0  # leases renewed, over all attempts (renewLease counts them)
    retries: int = 0  # fresh attempts given by `redfleet retry`
    not_before: int = 0  # a retry is not delivered before this (ms, Redis time)
    question: str = ""  # blocked: what the person is asked
    approval_for: str = ""  # blocked: the digest of the call an approval lets through
    approved_for: str = ""  # approved: that digest, as the person approved it
    approval_note: str = ""  # approved: the person's note, a user turn for the task
    approval_stage: str = ""  # approved: the stage it was given in (the note's only)
    pending: int = 0
    stage: str = ""
    error: str = ""
    result: str = ""
    created_ms: int = 0


class Claim(_Record):
    """Ownership of a task: who, with which fencing token, until when."""

    task_id: str
    job_id: str
    role: Role
    owner: str
    token: int
    lease_until: int


# An event's fields that are whole numbers, wherever it was written (a stream holds
# strings): ``to_json_dict`` gives them as JSON numbers, so a script can compare them.
INTEGER_FIELDS = frozenset({
    "attempt", "cached_tokens", "children", "cost_micro_usd", "current_token",
    "input_tokens", "latency_ms", "lease_until", "output_tokens", "prefix_tokens",
    "retry", "retry_in_ms", "round", "state_bytes", "step", "tasks", "tool_result_bytes",
})  # fmt: skip
_INTEGER = re.compile(r"-?[0-9]+")


class Event(_Record):
    """One entry of an event stream."""

    model_config = ConfigDict(frozen=True, extra="allow")

    id: str
    event: str
    ts: datetime
    job_id: str | None = None
    task_id: str | None = None
    worker: str | None = None
    token: int | None = None

    @classmethod
    def from_entry(cls, entry_id: str, fields: dict[str, str], job_id: str = "") -> Event:
        data: dict[str, Any] = {k: v for k, v in fields.items() if v != ""}
        ms = int(data.pop("ts_ms", entry_id.split("-", 1)[0]))
        if job_id:
            data.setdefault("job_id", job_id)
        return cls(id=entry_id, ts=datetime.fromtimestamp(ms / 1000, tz=UTC), **data)

    def to_json_dict(self) -> dict[str, Any]:
        doc = self.model_dump(mode="json", exclude_none=True)
        for name in INTEGER_FIELDS.intersection(doc):
            if isinstance(value := doc[name], str) and _INTEGER.fullmatch(value):
                doc[name] = int(value)
        return doc


class WorkerInfo(_Record):
    worker_id: str
    pid: int
    host: str
    role: Role
    state: str  # busy while any slot holds a task
    slots: int = 1  # tasks it runs at once (--concurrency)
    busy: int = 0  # slots holding a task now
    tasks: str = ""  # what they hold: "job_id/task_id", space-separated
    heartbeat_age_ms: int
