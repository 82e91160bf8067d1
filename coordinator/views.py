"""What the CLI shows: JSON documents for scripts, rich tables for people.

Text from users, models and workers is printed through ``text``: one line,
no escape sequences, rich markup escaped. JSON documents keep it exact.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from shared_state import Event, Job, State, Task, WorkerInfo
from shared_state.scripts import server_ms

from .errors import CoordinatorError
from .text import cut, markup_safe, one_line

if TYPE_CHECKING:
    from rich.progress import Progress

# Piped output is not cut to 80 columns: ids stay whole for grep and copy.


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """`redfleet status | head -1`: the reader has what it wanted, so exit 0 (rich: 1)."""
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)


console = _Console(width=None if sys.stdout.isatty() else 200)


@contextmanager
def progress_bar(what: str, *, after_s: float) -> Iterator[Callable[[int, int], None]]:
    """An ``advance(done, total)`` that shows a bar on stderr once ``after_s`` has passed
    (a quick step shows nothing), and only on a terminal; the bar is gone when done."""
    started = time.monotonic()
    bar: Progress | None = None
    task = None

    def advance(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None:
            if not sys.stderr.isatty() or time.monotonic() - started < after_s:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            bar = Progress(
                f"{what}:",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            bar.start()
            task = bar.add_task(what, total=total)
        assert task is not None
        bar.update(task, completed=done, total=total)

    try:
        yield advance
    finally:
        if bar is not None:
            bar.stop()


def _iso(ms: int) -> str | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat() if ms else None


def when(ms: int) -> str:
    """A Redis-time instant as UTC, to the second."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


TASK_COLUMNS = [
    "task_id", "role", "status", "attempts", "renewals", "owner", "token", "parent_id", "stage"
]  # fmt: skip


def task_doc(task: Task, now_ms: int) -> dict[str, Any]:
    """A task for `status` (``now_ms``: Redis time, for a retry's wait)."""
    waits = task.not_before - now_ms if task.status == "queued" else 0
    return {
        "task_id": task.task_id,
        "role": task.role.value,
        "status": task.status.value,
        # A retry waiting out its backoff (shared_state.backoff): when it is sent again.
        "retry_in_ms": max(0, waits),
        "attempts": task.attempt,
        "renewals": task.renewals,  # leases renewed, over all attempts
        "owner": task.owner or None,
        "token": task.token,
        "parent_id": task.parent_id or None,
        "stage": task.stage or None,
        "error": task.error or None,
        "question": task.question or None,  # blocked: what the person is asked
        # ...and the digest a decision on that question names (`approve --asked`).
        "approval_for": (task.approval_for or None) if task.status == "blocked" else None,
    }


def task_rows(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``task_doc``s for a table: a retry waiting out its backoff says when it goes."""
    return [
        {**t, "status": f"queued, retry in {-(-t['retry_in_ms'] // 1000)} s"}
        if t["retry_in_ms"]
        else t
        for t in tasks
    ]


def job_doc(state: State, job: Job, *, with_tasks: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "job_id": job.job_id,
        "status": job.status.value,
        "goal": job.goal,
        "scenario": job.scenario.value,
        "reason": job.reason or None,
        "result": job.result or None,
        "created": _iso(job.created_ms),
        "finished": _iso(job.finished_ms),
    }
    if job.workspace:
        doc["workspace"] = {
            "tree": job.workspace,
            "commit": job.workspace_commit or None,
            "check": job.check or None,
        }
    if job.approve:
        doc["approve"] = job.approve.split(",")
    if job.priority:
        doc["priority"] = job.priority
    if job.budget_usd:
        spent, limit = state.budget(job.job_id).spent_usd()
        doc["budget_usd"] = {"limit": limit, "spent": round(spent, 6)}
    items = item_counts(state, job.job_id)
    if items:
        doc["items"] = items
    if with_tasks:
        now_ms = server_ms(state.client)
        doc["tasks"] = [task_doc(t, now_ms) for t in state.tasks.list(job.job_id)]
        usage = state.usage(job.job_id).get()
        doc["usage"] = {**usage.model_dump(), "cache_hit_ratio": round(usage.cache_hit_ratio, 4)}
    return doc


def item_counts(state: State, job_id: str) -> dict[str, Any]:
    """A job over many items: its counts and the item list's id ({} for other jobs)."""
    raw = state.records(job_id).progress()
    if not raw:
        return {}
    counts: dict[str, Any] = {k: int(v) for k, v in raw.items() if k != "items"}
    return {**counts, "list": raw.get("items", "")}


ARTIFACT_COLUMNS = ["id", "kind", "bytes", "trust", "source", "title"]


def outcome_doc(state: State, job_id: str) -> dict[str, Any]:
    """What an agents job produced: its report, subagent summaries and artifacts."""
    store = state.artifacts(job_id)
    refs = {r.id: r for r in store.list()}
    job = state.jobs.get(job_id)
    doc: dict[str, Any] = {"report": None, "subagents": []}
    if job.result in refs and refs[job.result].kind == "report":
        doc["report"] = json.loads(store.text(job.result))
    for task in state.tasks.list(job_id):
        ref = refs.get(task.result)
        if ref is None or ref.kind != "summary":
            continue
        summary = json.loads(store.text(ref.id))
        if summary["kind"] == "subagent":
            doc["subagents"].append(
                {
                    "task_id": task.task_id,
                    "parent_id": task.parent_id,
                    "name": summary["name"],
                    "summary": ref.id,
                    "tokens": summary["tokens"],
                    "cap": summary["cap"],
                }
            )
    doc["artifacts"] = [
        {k: r.model_dump(mode="json")[k] for k in ARTIFACT_COLUMNS} for r in refs.values()
    ]
    recalled = dict.fromkeys(
        item
        for event in state.events.scan(job_id, "memory.recalled")
        for item in (event.model_extra or {}).get("items", "").split()
    )
    doc["recalled"] = list(recalled)  # memory items of earlier jobs its tasks were shown
    return doc


def program() -> str:
    """The command as the user can type it again: ``redfleet`` when that is what PATH finds,
    else the path this run was started by (``.venv/bin/redfleet`` in a venv not activated)."""
    invoked = sys.argv[0]
    if os.path.basename(invoked) != "redfleet":  # `python -m coordinator`
        return "redfleet"
    found = shutil.which("redfleet")
    try:
        same = found is not None and os.path.samefile(found, invoked)
    except OSError:  # the path it was started by is gone
        same = False
    return "redfleet" if same else shlex.quote(invoked)


def print_outcome(doc: dict[str, Any]) -> None:
    """The demo's summary for people."""
    table(f"job {doc['job_id']}: {doc['status']}", doc["tasks"], TASK_COLUMNS)
    usage, provider = doc["usage"], markup_safe(doc["provider"])
    console.print(
        f"model calls: {usage['calls']}, by {provider}; tokens in {usage['input_tokens']}, "
        f"cached {usage['cached_tokens']}, out {usage['output_tokens']}; "
        f"priced at ${usage['cost_usd']:.4f} had a model been paid"
    )
    report = doc.get("report")
    if report:
        rows = [
            {"feature": f["id"], "passes": "yes" if f["passes"] else "no", "check": f["check"],
             "evidence": " ".join(f["evidence"])}
            for f in report["features"]
        ]  # fmt: skip
        table("reviewer's verdict", rows, ["feature", "passes", "check", "evidence"])
        files = ", ".join(f"{p} ({a})" for p, a in report["workspace"].items())
        console.print(f"workspace: {markup_safe(files)}")
    for sub in doc["subagents"]:
        console.print(
            f"subagent {markup_safe(sub['name'])} ({sub['task_id']}): summary {sub['summary']}, "
            f"{sub['tokens']} of {sub['cap']} tokens"
        )
    recalled = doc.get("recalled") or []
    if recalled:
        shown = " ".join(recalled[:4]) + (" ..." if len(recalled) > 4 else "")
        console.print(
            f"memory: its tasks were shown {count(len(recalled), 'item')} that earlier jobs "
            f"left ({shown}): `redfleet memory list` shows them with their provenance"
        )
    # Per command, not exported: a later `redfleet up` in the shell must not join the demo.
    env, rf = markup_safe(f"REDIS_URL={doc['redis_url']}"), markup_safe(program())
    console.print(
        f"{len(doc['artifacts'])} artifacts, {doc['events']} events. Look further, on the "
        f"demo's own Redis:\n"
        f"  {env} {rf} logs {doc['job_id']}\n"
        f"  {env} {rf} artifacts {doc['job_id']}\n"
        f"  {env} {rf} show {doc['result'] or 'ARTIFACT_ID'}   # the final report\n"
        f"  {env} {rf} show ARTIFACT_ID --lines 1:20\n"
        f"It keeps running for that; stop it with "
        f"`REDFLEET_HOME={markup_safe(doc['redis_home'])} {rf} server stop`.",
        soft_wrap=True,
    )


def parse_lines(span: str) -> tuple[int, int]:
    """``A:B`` as 1-based inclusive line numbers; CoordinatorError naming the problem."""
    start, sep, end = span.partition(":")
    if sep and start.isdigit() and end.isdigit() and 1 <= int(start) <= int(end):
        return int(start), int(end)
    raise CoordinatorError(f"--lines: expected A:B with 1 <= A <= B, got {span!r}")


def overview_doc(state: State, limit: int) -> dict[str, Any]:
    jobs = state.jobs.list(limit)
    return {
        "jobs": [job_doc(state, j, with_tasks=False) for j in jobs],
        "active": len(state.jobs.active()),
        "queues": state.delivery.depths(),
    }


def claims_doc(state: State) -> list[dict[str, Any]]:
    return [
        {
            "task_id": t.task_id,
            "job_id": t.job_id,
            "role": t.role.value,
            "owner": t.owner,
            "token": t.token,
            "lease_remaining_ms": remaining,
        }
        for t, remaining in state.tasks.claims(state.jobs.active())
    ]


def visible_workers(state: State) -> list[WorkerInfo]:
    """Live workers, each listing only the tasks of jobs ``state`` may read (a tenant's
    reader does not learn another tenant's job and task ids from the fleet's view)."""
    workers = state.workers.list()
    if state.tenant is None:
        return workers
    keep = {}
    for w in workers:
        for held in w.tasks.split():
            job_id = held.partition("/")[0]
            if job_id not in keep:
                keep[job_id] = state.sees(job_id)
    return [
        w.model_copy(
            update={"tasks": " ".join(t for t in w.tasks.split() if keep[t.partition("/")[0]])}
        )
        for w in workers
    ]


def workers_doc(workers: Iterable[WorkerInfo]) -> list[dict[str, Any]]:
    return [
        {
            "worker_id": w.worker_id,
            "pid": w.pid,
            "role": w.role.value,
            "host": w.host,
            "state": w.state,
            "slots": w.slots,
            "busy": w.busy,
            "tasks": w.tasks.split(),  # "job_id/task_id" each
            "heartbeat_age_ms": w.heartbeat_age_ms,
        }
        for w in workers
    ]


def count(n: int, noun: str, plural: str = "") -> str:
    """``1 worker``, ``2 workers``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def reap_line(report: Any) -> str:
    """A reaper pass (a ``ReapReport``) for people, one line."""
    ended = len(report.requeued) + len(report.dead)
    return (
        f"reaper: ended {count(ended, 'expired attempt')} ({len(report.requeued)} requeued, "
        f"{len(report.dead)} dead), sent {count(len(report.due), 'due retry', 'due retries')}, "
        f"redelivered {count(len(report.redelivered), 'lost task')}, "
        f"retired {count(len(report.retired), 'finished job')}, discarded "
        f"{count(len(report.discarded), 'stale envelope')}; pruned "
        f"{count(report.pruned_jobs, 'expired job id')}, "
        f"{count(report.pruned_workers, 'stale worker')}"
    )


def fleet_line(report: Any) -> str:
    """What a fleet did while it ran (a ``FleetReport``), one line."""
    return (
        f"fleet stopped: reaped {count(report.reaped, 'expired attempt')} ({report.dead} dead), "
        f"redelivered {count(report.redelivered, 'lost task')}; "
        f"{count(report.restarts, 'worker restart')}, {count(report.hung, 'hung worker')} killed"
    )


SCRIPTED_NOTE = (
    "a replay: no model was called; run a real one with `redfleet up --provider openai --model …`"
)


def provider_line(providers: dict[str, int]) -> str | None:
    """Which providers a job's model calls went to (None: it made none), markup-safe."""
    if not providers:
        return None
    if all(name.split(" ", 1)[0] == "scripted" for name in providers):
        return f"provider: scripted ({SCRIPTED_NOTE})"
    calls = ", ".join(f"{markup_safe(name)} ({count(n, 'call')})" for name, n in providers.items())
    return f"provider: {calls}"


def print_job_head(doc: dict[str, Any]) -> None:
    """A job's status line, its reason, and the provider its calls went to."""
    goal = markup_safe(doc["goal"])
    console.print(f"job {doc['job_id']}: [bold]{doc['status']}[/] — {goal}", soft_wrap=True)
    if doc["reason"]:
        console.print(f"reason: {markup_safe(doc['reason'])}", soft_wrap=True)
    line = provider_line(doc.get("providers") or {})
    if line:
        console.print(line, soft_wrap=True, highlight=False)
    ws = doc.get("workspace")
    if ws:
        at = f" at commit {ws['commit'][:12]}" if ws["commit"] else ""
        check = f"; check: {markup_safe(ws['check'])}" if ws["check"] else ""
        console.print(
            f"workspace {ws['tree']}{at}{check} (`redfleet diff {doc['job_id']}`)",
            soft_wrap=True,
            highlight=False,
        )
    i = doc.get("items")
    if i:
        console.print(
            f"items: {i['done'] + i['validated']} of {i['total']} done ({i['validated']} "
            f"validated, {i['failed']} failed, {i['pending']} pending); list {i['list']}",
            highlight=False,
        )
    if doc.get("approve"):
        console.print(f"asks before: {', '.join(doc['approve'])}", highlight=False)
    if doc.get("budget_usd"):
        b = doc["budget_usd"]
        console.print(f"budget: ${b['spent']:.4f} spent of ${b['limit']:.2f}", highlight=False)
    for task in doc.get("tasks", []):
        if task["status"] == "blocked" and task["question"]:
            console.print(
                f"{task['task_id']} asks: {markup_safe(task['question'])}\n"
                f"  `redfleet approve {doc['job_id']} {task['task_id']}` or "
                f"`redfleet reject {doc['job_id']} {task['task_id']} --note WHY`",
                soft_wrap=True,
                highlight=False,
            )


def print_json(doc: Any) -> None:
    write_line(json.dumps(doc, indent=2))


def write_line(text: str) -> None:
    """Print one line now; a reader that closed the pipe ends the command with exit 0."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        console.on_broken_pipe()


def log_gap(state: State, job_id: str | None, shown: list[Event], last: int) -> str:
    """What `logs` does not show before its first line, said ("" when it starts at the
    beginning): events left out by --last, and a job's first events trimmed from its
    capped stream."""
    first = state.events.first(job_id)
    if first is None:
        return ""
    notes = []
    if len(shown) == last and (not shown or shown[0].id != first.id):
        notes.append("earlier events are not shown (--last N shows more)")
    if job_id and first.event != "job.submitted":
        notes.append(
            f"the job's first events are gone: its stream keeps the last "
            f"REDFLEET_JOB_STREAM_MAXLEN entries, from {first.ts:%H:%M:%S} on"
        )
    return "; ".join(notes)


CELL_CHARS = 160


def table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """A rich table; title and cells are printed as text, never read as markup.

    A cell holds at most ``CELL_CHARS`` characters (a goal may hold 2,000; --json
    has it whole). Without rows, one line says so (``workers: none``), not an
    empty frame.
    """
    if not rows:
        write_line(one_line(f"{title}: none"))
        return
    t = Table(title=markup_safe(cut(title, CELL_CHARS)), title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(
            *(
                "" if row.get(c) is None else markup_safe(cut(str(row.get(c)), CELL_CHARS))
                for c in columns
            )
        )
    console.print(t)


_EVENT_KEYS = ("id", "event", "ts", "job_id", "task_id", "worker", "token")


def event_line(event: Event) -> str:
    """One readable line: time, event, ids, then the event's own fields (``one_line``)."""
    doc = event.to_json_dict()
    head = [event.ts.strftime("%H:%M:%S.%f")[:-3], f"{event.event:<15}"]
    head += [str(doc[k]) for k in ("job_id", "task_id") if k in doc]
    if "worker" in doc:
        head.append(f"by {doc['worker']}")
    if "token" in doc:
        head.append(f"token={doc['token']}")
    head += [f"{k}={v}" for k, v in doc.items() if k not in _EVENT_KEYS]
    return one_line(" ".join(head))
