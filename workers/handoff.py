"""The handoff package: what the next executor of a job continues from, built from records.

Never from a model: the job record, its latest feature list and verdict
(with the evidence logs and when they were stored), the working states its
tasks checkpointed, its journal (the idempotency keys of its effects), its
workspace, its live claims, the tasks waiting for a person and the last
resume's checks. A feature is
done only with a passing check as evidence; a fact is *confirmed* only when
the user said it (a user turn, verbatim) or a check proved it — what an
agent noted is an *assumption*, and is never shown as confirmed.

The package is versioned (``schema_version``); a package of a newer version
than this code knows is refused rather than half read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared_state import JobNotFound, Scenario, State, TaskStatus, Trust
from shared_state.scripts import server_ms

from .context import WorkingState
from .roles.features import FeatureList

SCHEMA_VERSION = 1


class Evidence(BaseModel):
    artifact_id: str
    stored_ms: int  # when the log was stored (Redis time): its age at resumption


class FeatureItem(BaseModel):
    id: str
    description: str
    check: str
    passes: bool
    evidence: list[Evidence] = Field(default_factory=list)


class FactItem(BaseModel):
    text: str
    source: str
    task_id: str = ""


class Operation(BaseModel):
    key: str  # the journal's idempotency key
    tool: str
    status: str
    result: str = ""


class LiveClaim(BaseModel):
    task_id: str
    role: str
    owner: str
    token: int
    lease_remaining_ms: int


class Approval(BaseModel):
    task_id: str
    role: str
    question: str
    approval_for: str  # the digest of the call an approval lets through


class Resumption(BaseModel):
    """One feature's verdict at the job's last resume (``workers/resume.py``)."""

    feature_id: str
    verdict: str  # keep | reverify | redo
    why: str


class ArtifactItem(BaseModel):
    id: str
    kind: str
    title: str


class HandoffPackage(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    job_id: str
    status: str
    reason: str = ""
    goal: str
    criteria_version: str  # a digest of the goal, the constraints and the features' checks
    constraints: list[str] = Field(default_factory=list)
    built_ms: int
    completed: list[FeatureItem] = Field(default_factory=list)
    remaining: list[FeatureItem] = Field(default_factory=list)  # in priority order
    confirmed_facts: list[FactItem] = Field(default_factory=list)
    assumptions: list[FactItem] = Field(default_factory=list)
    decisions: list[FactItem] = Field(default_factory=list)
    artifacts: list[ArtifactItem] = Field(default_factory=list)
    operations: list[Operation] = Field(default_factory=list)
    live_claims: list[LiveClaim] = Field(default_factory=list)
    approvals_needed: list[Approval] = Field(default_factory=list)
    resumption: list[Resumption] = Field(default_factory=list)  # the last resume's checks
    next_action: str = ""

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"handoff schema version {version} is newer than this redfleet reads "
                f"({SCHEMA_VERSION}): upgrade to read it"
            )
        return version

    def markdown(self) -> str:
        """A page a person can continue the job from. Text from users and models stays on
        its own line (``_inline``): a goal or a note cannot start a section of its own."""
        goal = _inline(self.goal)
        out = [f"# Handoff: job {self.job_id} ({self.status})", "", f"**Goal:** {goal}"]
        if self.reason:
            out.append(f"**Why it stopped:** {_inline(self.reason)}")
        out.append(f"**Criteria version:** `{self.criteria_version}`")
        out += [f"**Constraint:** {_inline(c)}" for c in self.constraints]
        out += ["", "## Done (with evidence)"]
        out += [_feature_line(f) for f in self.completed] or ["- nothing verified yet"]
        out += ["", "## Remaining (in order)"]
        out += [_feature_line(f) for f in self.remaining] or ["- nothing"]
        out += ["", "## Confirmed facts (the user said it, or a check proved it)"]
        out += [_noted(f) for f in self.confirmed_facts] or ["- none"]
        out += ["", "## Assumptions (an agent noted them; not verified)"]
        out += [_noted(f) for f in self.assumptions] or ["- none"]
        if self.decisions:
            out += ["", "## Decisions"] + [_noted(d) for d in self.decisions]
        if self.resumption:
            out += ["", "## Resumption checks (the last resume)"]
            out += [f"- {r.feature_id} {r.verdict}: {_inline(r.why)}" for r in self.resumption]
        if self.approvals_needed:
            out += ["", "## Waiting for you"]
            out += [
                f"- {a.task_id} ({a.role}) asks: {_inline(a.question)} — "
                f"`redfleet approve {self.job_id} {a.task_id}` or `reject ... --note`"
                for a in self.approvals_needed
            ]
        if self.live_claims:
            out += ["", "## Running now"]
            out += [
                f"- {c.task_id} ({c.role}) by {c.owner}, token {c.token}, "
                f"lease {c.lease_remaining_ms} ms"
                for c in self.live_claims
            ]
        out += ["", "## Artifacts"]
        out += [f"- {a.id} {a.kind}: {_inline(a.title)}" for a in self.artifacts] or ["- none"]
        out += ["", "## Effects made (journal idempotency keys)"]
        out += [f"- `{o.key}` {o.tool}: {o.status}" for o in self.operations] or ["- none"]
        out += ["", f"**Next action:** {_inline(self.next_action) or 'none recorded'}"]
        return "\n".join(out) + "\n"


def _inline(text: str) -> str:
    """``text`` on one line, its line breaks written as ``\\n`` (as ``status`` shows them)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _noted(f: FactItem) -> str:
    return f"- {_inline(f.text)} ({_inline(f.source)})"


def _feature_line(f: FeatureItem) -> str:
    evidence = ", ".join(e.artifact_id for e in f.evidence)
    return f"- {f.id} {_inline(f.description)} — check `{_inline(f.check)}`" + (
        f"; evidence {evidence}" if evidence else ""
    )


def criteria_version(goal: str, constraints: list[str], features: FeatureList | None) -> str:
    """A digest of what the job is held to: its goal, the user's constraints, the checks."""
    checks = [(f.id, f.description, f.check) for f in features.features] if features else []
    blob = json.dumps(
        {"goal": goal, "constraints": sorted(constraints), "features": checks}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build(state: State, job_id: str) -> HandoffPackage:
    """The package for ``job_id`` from its records as they are now."""
    job = state.jobs.get(job_id)
    store = state.artifacts(job_id)
    stored = store.stored_ms()
    refs = store.list()  # oldest first
    latest_features = next((r for r in reversed(refs) if r.kind == "features"), None)
    features = (
        FeatureList.model_validate_json(store.text(latest_features.id)) if latest_features else None
    )
    items = [
        FeatureItem(
            id=f.id,
            description=f.description,
            check=f.check,
            passes=f.passes,
            evidence=[Evidence(artifact_id=e, stored_ms=stored.get(e, 0)) for e in f.evidence],
        )
        for f in (features.features if features else [])
    ]
    tasks = state.tasks.list(job_id)
    confirmed: list[FactItem] = []
    assumptions: list[FactItem] = []
    decisions: list[FactItem] = []
    next_action = ""
    records = state.records(job_id)
    checkpoints = records.checkpoints([t.task_id for t in tasks])  # one read for them all
    for task in tasks:
        saved = checkpoints.get(task.task_id)
        if not saved:
            continue
        working = WorkingState.model_validate_json(saved)
        for said in working.said:
            confirmed.append(FactItem(text=said, source="the user", task_id=task.task_id))
        for fact in working.facts:
            where = f"noted by {task.task_id} at step {fact.step}, source {fact.source}"
            assumptions.append(FactItem(text=fact.text, source=where, task_id=task.task_id))
        for d in working.decisions:
            decisions.append(
                FactItem(text=d.text, source=f"{task.task_id} step {d.step}", task_id=task.task_id)
            )
        if task.task_id == job.root_task and working.next_action:
            next_action = working.next_action
    for f in items:
        if f.passes and f.evidence:
            source = f"check {f.check}, log {f.evidence[-1].artifact_id}"
            confirmed.append(FactItem(text=f"{f.id} passes: {f.description}", source=source))
    operations = sorted(
        (Operation(key=e.key, tool=e.tool, status=e.status.value, result=e.result[:200])
         for e in records.entries()),
        key=lambda o: o.key,
    )  # fmt: skip
    claims = [
        LiveClaim(
            task_id=t.task_id,
            role=t.role.value,
            owner=t.owner,
            token=t.token,
            lease_remaining_ms=remaining,
        )
        for t, remaining in state.tasks.claims([job_id])
    ]
    approvals = [
        Approval(
            task_id=t.task_id, role=t.role.value, question=t.question, approval_for=t.approval_for
        )
        for t in tasks
        if t.status is TaskStatus.BLOCKED
    ]
    remaining = [f for f in items if not (f.passes and f.evidence)]
    resumes = [r for r in refs if r.kind == "resume"]
    resumption = (
        [Resumption(**c) for c in json.loads(store.text(resumes[-1].id))["checks"]]
        if resumes
        else []
    )
    if not next_action:
        next_action = _next_action(job.status.value, remaining, approvals)
    return HandoffPackage(
        job_id=job_id,
        status=job.status.value,
        reason=job.reason,
        goal=job.goal,
        constraints=json.loads(job.constraints or "[]"),
        criteria_version=criteria_version(job.goal, json.loads(job.constraints or "[]"), features),
        built_ms=server_ms(state.client),
        completed=[f for f in items if f.passes and f.evidence],
        remaining=remaining,
        confirmed_facts=confirmed,
        assumptions=assumptions,
        decisions=decisions,
        artifacts=[ArtifactItem(id=r.id, kind=r.kind, title=r.title) for r in refs],
        operations=operations,
        live_claims=claims,
        approvals_needed=approvals,
        resumption=resumption,
        next_action=next_action,
    )


def _next_action(status: str, remaining: list[FeatureItem], approvals: list[Approval]) -> str:
    if approvals:
        return f"answer {approvals[0].task_id}: {approvals[0].question}"
    if status == "succeeded":
        return "none: every feature passes with evidence"
    if remaining:
        return f"make {remaining[0].id} pass: {remaining[0].description}"
    return "plan the features (no feature list was written)"


def write(state: State, job_id: str) -> str:
    """Store the ended agents job's package as its ``handoff`` artifact; its id ("" for a
    scripted behaviour's job, which has no features or working states to hand off).

    The artifact expires with the job's own records (its retention), whoever writes it.
    """
    job = state.jobs.get(job_id)
    if job.scenario is not Scenario.AGENTS:
        return ""
    package = build(state, job_id)
    # Written once the job ended: the store gives it the job's remaining retention.
    store = state.artifacts(job_id)
    ref = store.put(
        package.model_dump_json(indent=1),
        kind="handoff",
        title=f"handoff: {package.status}, {len(package.remaining)} feature(s) remaining",
        trust=Trust.TRUSTED,
    )
    return ref.id


def job_ended(state: State, job_id: str) -> bool:
    """The one hook every way a job ends goes through — its last task done, a task dead, a
    cancel from the CLI, the API or the demo, the reaper finding it ended after a crash:
    the tasks it left unfinished end, its keys start to expire, its episode and its
    handoff package are written. Idempotent; False while the job has not ended.
    """
    if not state.jobs.finalize(job_id):
        return False
    with contextlib.suppress(JobNotFound):  # an id whose records are gone: nothing to hand
        write(state, job_id)
    return True
