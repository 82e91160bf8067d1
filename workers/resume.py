"""Resuming a finished job: checks against the records first, then a new round.

Never "ask the model how far it got": the checks read the job's latest
feature list, the stored time of each piece of evidence, the workspace and
the criteria the job ran under, and give each feature a verdict:

    redo      it does not pass with evidence; or the goal changed; or a new
              constraint bears on it (names its id, or shares a word of four
              letters or more with its description)
    reverify  it passed, but its evidence is older than the limit, or was
              recorded before the criteria last changed (another criteria
              version), or a workspace file was written after it
    keep      it passed, with evidence that still holds

Each verdict is an event (``resume.checked``) and part of the ``resume``
artifact the resumed planner starts from; redo and reverify features are
failing again in the new feature list, so no stale verdict survives the
round. If everything keeps, nothing is started.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel

from shared_state import NotResumable, Scenario, State, Trust, keys
from shared_state.memory.items import age_text
from shared_state.scripts import server_ms

from .handoff import criteria_version
from .roles.features import FeatureList

Verdict = Literal["keep", "reverify", "redo"]
_WORD = re.compile(r"[a-z0-9]{4,}")


class FeatureCheck(BaseModel):
    feature_id: str
    verdict: Verdict
    why: str


class ResumePlan(BaseModel):
    job_id: str
    features_id: str  # the feature list the checks read (the new round's starts from it)
    goal: str
    constraints: list[str]
    criteria_version: str
    criteria_changed: bool
    checks: list[FeatureCheck]

    @property
    def needed(self) -> bool:
        return any(c.verdict != "keep" for c in self.checks)

    def lines(self) -> str:
        return "\n".join(f"{c.feature_id} {c.verdict}: {c.why}" for c in self.checks)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s" if ms < 60_000 else age_text(ms)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def plan(
    state: State,
    job_id: str,
    *,
    goal: str | None = None,
    constraints: list[str] | None = None,
    max_evidence_age_ms: int | None = None,
) -> ResumePlan:
    """The resumption checks for ``job_id``: what to keep, re-verify or redo, and why."""
    job = state.jobs.get(job_id)
    if not job.status.finished:
        raise NotResumable(job_id, f"it is {job.status.value}: only a finished job")
    if job.scenario is not Scenario.AGENTS:
        raise NotResumable(job_id, "only an agents job has features to resume")
    store = state.artifacts(job_id)
    stored = store.stored_ms()
    latest = store.latest("features")
    if latest is None:
        raise NotResumable(job_id, "it wrote no feature list (`redfleet retry` runs it again)")
    features = FeatureList.model_validate_json(store.text(latest.id))
    before = json.loads(job.constraints or "[]")
    new_goal = goal.strip() if goal and goal.strip() else job.goal
    new_constraints = [c.strip() for c in constraints] if constraints is not None else before
    goal_changed = new_goal != job.goal
    added = [c for c in new_constraints if c not in before]
    changed = goal_changed or set(new_constraints) != set(before)
    now = server_ms(state.client)
    files = {path: stored.get(a, 0) for path, a in state.records(job_id).files().items()}
    checks = []
    for f in features.features:
        evidence_ms = min((stored.get(e, 0) for e in f.evidence), default=0)
        bears = [c for c in added if f.id in c.split() or _words(c) & _words(f.description)]
        newer = sorted(p for p, at in files.items() if at > evidence_ms)
        if not (f.passes and f.evidence):
            verdict, why = "redo", "it does not pass with evidence"
        elif goal_changed:
            verdict, why = "redo", "the goal changed"
        elif bears:
            verdict, why = "redo", f"the new constraint {bears[0]!r} bears on it"
        elif max_evidence_age_ms is not None and now - evidence_ms > max_evidence_age_ms:
            verdict = "reverify"
            why = (
                f"its evidence is {_seconds(now - evidence_ms)} old "
                f"(limit {_seconds(max_evidence_age_ms)})"
            )
        elif changed or (job.criteria_ms and evidence_ms < job.criteria_ms):
            verdict, why = "reverify", "its evidence was recorded under other criteria"
        elif newer:
            verdict, why = "reverify", f"{newer[0]} was written after its evidence"
        else:
            verdict, why = "keep", "it passes with evidence that still holds"
        checks.append(FeatureCheck(feature_id=f.id, verdict=verdict, why=why))
    return ResumePlan(
        job_id=job_id,
        features_id=latest.id,
        goal=new_goal,
        constraints=new_constraints,
        criteria_version=criteria_version(new_goal, new_constraints, features),
        criteria_changed=changed,
        checks=checks,
    )


def start(state: State, plan: ResumePlan) -> str:
    """Start the new round the checks call for; the planner's stage ("" if nothing to do).

    The round's feature list and checks are stored first, named by the round
    (so they are new artifacts, never an earlier list of the same content),
    and the resume script records their ids on the job: the resumed planner
    reads those, never "the latest". If the job cannot be resumed after all
    (another resume got there first, it is running), both are deleted and
    nothing is recorded.
    """
    job_id = plan.job_id
    job = state.jobs.get(job_id)
    if not plan.needed:
        for check in plan.checks:
            state.events.append("resume.checked", check.model_dump(), job_id=job_id)
        return ""
    store = state.artifacts(job_id)
    features = FeatureList.model_validate_json(store.text(plan.features_id))
    verdicts = {c.feature_id: c.verdict for c in plan.checks}
    marked = features.model_copy(
        update={
            "goal": plan.goal,
            "features": [
                f
                if verdicts[f.id] == "keep"
                else f.model_copy(update={"passes": False, "evidence": []})
                for f in features.features
            ],
        }
    )
    round_ = job.resumes + 1
    listed = {**json.loads(marked.model_dump_json()), "resume_round": round_}
    features_ref = store.put(
        json.dumps(listed, indent=1),
        kind="features",
        title=f"feature list at resume {round_}: {len(marked.failing())} of "
        f"{len(marked.features)} open",
        trust=Trust.TRUSTED,
    )
    counts = ", ".join(
        f"{sum(c.verdict == v for c in plan.checks)} {v}" for v in ("keep", "reverify", "redo")
    )
    checks_ref = store.put(
        json.dumps({"round": round_, "checks": [c.model_dump() for c in plan.checks]}, indent=1),
        kind="resume",
        title=f"resumption checks {round_}: {counts}",
        trust=Trust.TRUSTED,
    )
    try:
        stage = state.jobs.resume(
            job_id,
            stage=f"r{round_}/resume",
            goal=plan.goal if plan.goal != job.goal else "",
            constraints=json.dumps(plan.constraints),
            criteria_version=plan.criteria_version,
            criteria_changed=plan.criteria_changed,
            features=features_ref.id,
            checks=checks_ref.id,
        )
    except NotResumable:
        with state.client.pipeline(transaction=False) as pipe:
            for ref in (features_ref, checks_ref):
                pipe.delete(keys.artifact(job_id, ref.id))
                pipe.zrem(keys.artifacts(job_id), ref.id)
            pipe.execute()
        raise
    for check in plan.checks:
        state.events.append("resume.checked", check.model_dump(), job_id=job_id)
    return stage
