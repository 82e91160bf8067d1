"""The JSON documents the dashboard's pages poll, built from ``State`` at each request.

Text in them (goals, briefs, event fields, artifact content) is exactly as
stored: the page escapes it where it shows it. A job's document is what
``redfleet status JOB --json`` prints, plus what a page draws from it: the
task tree with live leases, the feature list with its verdicts, and the
artifacts. Times are Redis time (``now_ms``), the clock leases run on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from shared_state import ArtifactNotFound, JobStatus, State, Task
from shared_state.scripts import server_ms
from workers.roles.features import FeatureList, VerdictList

from .. import views
from ..api import RENEWED, Client
from ..limits_cli import COLUMNS, route_row

INITIAL_EVENTS = 200  # a job page starts with the last events; later polls ask for the rest
EVENTS_PER_ANSWER = 1_000  # a poll's events at most: ``more`` says the next poll has others
ARTIFACTS_LISTED = 500  # a job's newest artifacts, listed with its document
CONTENT_CHARS = 200_000  # an artifact's content per answer (``offset`` pages through it)


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
                "unsucceeded": progress.unsucceeded,
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
    try:
        doc["features"], doc["features_error"] = features(state, job_id), None
    except (ValidationError, ArtifactNotFound, UnicodeDecodeError) as exc:
        # Shown as what it is, on the page, rather than a failed poll every second.
        doc["features"], doc["features_error"] = [], f"unreadable: {_first_line(exc)}"
    refs = state.artifacts(job_id).list()
    doc["artifacts"] = [ref.model_dump(mode="json") for ref in refs[-ARTIFACTS_LISTED:]]
    doc["artifacts_total"] = len(refs)
    return doc


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def features(state: State, job_id: str) -> list[dict[str, Any]]:
    """The latest feature list, each feature with the latest verdict's note on it.

    A list or verdict that does not validate raises (``job`` shows the error).
    """
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
    """The job's events after stream id ``after`` (None: the last ones), renewals left out,
    at most ``EVENTS_PER_ANSWER`` read.

    ``last`` is the id to ask after next time, renewals included, so that a
    poll never reads the same entries again; ``more`` says entries after it
    were already there (the next poll gets them).
    """
    state.jobs.get(job_id)  # an unknown job is a 404, not an empty stream
    more = False
    if after is None:
        found = state.events.read(job_id, last=INITIAL_EVENTS, hide=frozenset({RENEWED}))
        tail = state.events.read(job_id, last=1)
        last = tail[-1].id if tail else "0-0"
    else:
        found, last, read = [], after, 0
        while batch := state.events.read_after(job_id, last):
            last, read = batch[-1].id, read + len(batch)
            found += [e for e in batch if e.event != RENEWED]
            if read >= EVENTS_PER_ANSWER:
                more = True
                break
    return {"events": [e.to_json_dict() for e in found], "last": last, "more": more}


def artifact(state: State, job_id: str, artifact_id: str, offset: int = 0) -> dict[str, Any]:
    """An artifact's handle and up to ``CONTENT_CHARS`` characters of its content from
    ``offset``: ``length`` is all of it, ``next`` the offset to ask for the rest (None: no
    more). Content that is not UTF-8 is shown with replacement characters, and said so."""
    store = state.artifacts(job_id)
    ref = store.get(artifact_id)
    raw = store.content(artifact_id)
    text = raw.decode(errors="replace")
    part = text[offset : offset + CONTENT_CHARS]
    end = offset + len(part)
    return {
        **ref.model_dump(mode="json"),
        "job_id": job_id,
        "content": part,
        "offset": offset,
        "length": len(text),
        "next": end if end < len(text) else None,
        "unreadable": None if text.encode() == raw else "not UTF-8: shown with \ufffd",
    }


def workers(state: State) -> dict[str, Any]:
    """Live heartbeats with every field they carry, live claims, queue depths, and the
    model routes as ``limits show`` has them (a tenant's reader sees its own calls).

    The fields this version knows are typed as ``redfleet workers --json`` has
    them; a newer worker's others are passed on as the strings they are (not to
    a tenant's reader, who sees the typed fields and its own jobs' tasks).
    """
    known = {w.worker_id: views.workers_doc([w])[0] for w in views.visible_workers(state)}
    records = state.workers.records()
    if state.tenant is not None:  # a tenant's view: the typed fields, its own tasks only
        records = [{"worker_id": r["worker_id"]} for r in records if r["worker_id"] in known]
    routes = state.routes.show()
    if state.tenant is not None:  # other tenants' calls are theirs to see
        routes = [
            replace(r, by_tenant={t: n for t, n in r.by_tenant.items() if t == state.tenant})
            for r in routes
        ]
    return {
        "workers": [{**rec, **known.get(rec["worker_id"], {})} for rec in records],
        "claims": views.claims_doc(state),
        "queues": state.delivery.depths(),
        "routes": {"columns": COLUMNS, "rows": [route_row(r) for r in routes]},
    }
