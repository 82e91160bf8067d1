"""The JSON documents the dashboard's pages poll, built from ``State`` at each request.

Text in them (goals, briefs, event fields, artifact content) is exactly as
stored: the page escapes it where it shows it. A job's document is what
``redfleet status JOB --json`` prints, plus what a page draws from it: the
task tree with live leases, the feature list with its verdicts, and the
artifacts. Times are Redis time (``now_ms``), the clock leases run on.
"""

from __future__ import annotations

from typing import Any

from shared_state import JobStatus, State, Task
from shared_state.scripts import server_ms
from workers.roles.features import FeatureList, VerdictList

from .. import views
from ..api import RENEWED, Client

INITIAL_EVENTS = 200  # a job page starts with the last events; later polls ask for the rest


def jobs(state: State, *, status: JobStatus | None, limit: int) -> dict[str, Any]:
    """The latest ``limit`` jobs (those with ``status`` among them), each with its progress."""
    client = Client(state)
    rows = []
    for job in state.jobs.list(limit):
        if status is not None and job.status is not status:
            continue
        progress = client.progress(job.job_id)
        rows.append(
            {
                "job_id": job.job_id,
                "status": job.status.value,
                "goal": job.goal,
                "scenario": job.scenario.value,
                "done": progress.done,
                "total": progress.total,
                "stage": progress.stage,
                "stage_next": progress.stage_next,
                "tokens": progress.tokens,
                "cost_usd": progress.cost_usd,
                "created_ms": job.created_ms,
                "finished_ms": job.finished_ms,
            }
        )
    return {
        "now_ms": server_ms(state.client),
        "jobs": rows,
        "active": len(state.jobs.active()),
        "queues": state.delivery.depths(),
    }


def kind_of(task: Task, by_id: dict[str, Task]) -> str:
    """The task's place in the tree: its role, or ``subagent``.

    Roles hand work to other roles (planner to coders and reviewer); a
    subagent is spawned on its parent's own role queue, so a task whose
    parent has its role is one.
    """
    parent = by_id.get(task.parent_id)
    return "subagent" if parent is not None and parent.role is task.role else task.role.value


def job(state: State, job_id: str) -> dict[str, Any]:
    """``status --json``'s document, its tasks with brief, kind and remaining lease."""
    record = state.jobs.get(job_id)
    doc = views.job_doc(state, record)  # with the providers below: what Client.status reads
    doc["providers"] = Client(state).providers(job_id)
    tasks = {t.task_id: t for t in state.tasks.list(job_id)}
    now = server_ms(state.client)
    for row in doc["tasks"]:
        task = tasks.get(row["task_id"])
        if task is None:  # expired between the two reads
            continue
        row["brief"] = task.brief
        row["kind"] = kind_of(task, tasks)
        row["lease_remaining_ms"] = task.lease_until - now if task.status == "claimed" else None
    doc.update(created_ms=record.created_ms, finished_ms=record.finished_ms, now_ms=now)
    doc["features"] = features(state, job_id)
    doc["artifacts"] = [ref.model_dump(mode="json") for ref in state.artifacts(job_id).list()]
    return doc


def features(state: State, job_id: str) -> list[dict[str, Any]]:
    """The latest feature list, each feature with the latest verdict's note on it."""
    store = state.artifacts(job_id)
    listed = store.latest("features")
    if listed is None:
        return []
    verdict = store.latest("verdict")
    notes = (
        {v.feature_id: v for v in VerdictList.model_validate_json(store.text(verdict.id)).verdicts}
        if verdict
        else {}
    )
    rows = []
    for feature in FeatureList.model_validate_json(store.text(listed.id)).features:
        row = feature.model_dump()
        judged = notes.get(feature.id)
        row["verdict"] = None if judged is None else ("passes" if judged.passes else "fails")
        row["note"] = judged.note if judged else ""
        rows.append(row)
    return rows


def events(state: State, job_id: str, after: str | None) -> dict[str, Any]:
    """The job's events after stream id ``after`` (None: the last ones), renewals left out.

    ``last`` is the id to ask after next time, renewals included, so that a
    poll never reads the same entries again.
    """
    state.jobs.get(job_id)  # an unknown job is a 404, not an empty stream
    if after is None:
        found = state.events.read(job_id, last=INITIAL_EVENTS, hide=frozenset({RENEWED}))
        tail = state.events.read(job_id, last=1)
        last = tail[-1].id if tail else "0-0"
    else:
        found, last = [], after
        while batch := state.events.read_after(job_id, last):
            last = batch[-1].id
            found += [e for e in batch if e.event != RENEWED]
    return {"events": [e.to_json_dict() for e in found], "last": last}


def artifact(state: State, job_id: str, artifact_id: str) -> dict[str, Any]:
    state.jobs.get(job_id)
    store = state.artifacts(job_id)
    ref = store.get(artifact_id)
    return {**ref.model_dump(mode="json"), "job_id": job_id, "content": store.text(artifact_id)}


def workers(state: State) -> dict[str, Any]:
    """Live heartbeats with every field they carry, live claims, and queue depths.

    The fields this version knows are typed as ``redfleet workers --json`` has
    them; a newer worker's others are passed on as the strings they are.
    """
    known = {w.worker_id: views.workers_doc([w])[0] for w in state.workers.list()}
    return {
        "workers": [{**rec, **known.get(rec["worker_id"], {})} for rec in state.workers.records()],
        "claims": views.claims_doc(state),
        "queues": state.delivery.depths(),
    }
