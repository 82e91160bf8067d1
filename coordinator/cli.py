"""The ``redfleet`` command line.

Connection: ``REDIS_URL`` when set; otherwise an embedded redis-server that the
CLI starts on first use (see ``redfleet server --help``). Every command that
prints a result takes ``--json``. Bad input to a command (an unknown job, a
blank goal, an unreachable server) is one line on stderr and exit code 2, as
are option errors, which also show the usage line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Annotated

import pydantic
import typer

from shared_state import JobFinished, JobSpec, RedisServer, Role, Scenario, StateError

from . import logs, views
from .connection import Embedded, open_state, redis_url
from .errors import CoordinatorError
from .fleet import Fleet, FleetSpec
from .reaper import Reaper
from .settings import Settings

app = typer.Typer(
    help=(
        "redfleet: fleets of planner, coder and reviewer workers over one Redis.\n\n"
        "Start a fleet with `redfleet up`, submit a goal with `redfleet submit`, watch it\n"
        "with `redfleet status`, `claims`, `workers` and `logs -f`. `redfleet demo` runs\n"
        "all of it on a private embedded Redis. Set REDIS_URL to share one Redis between\n"
        "machines; without it the CLI starts an embedded redis-server of its own."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
server_app = typer.Typer(
    help="The embedded redis-server used when REDIS_URL is not set.", no_args_is_help=True
)
app.add_typer(server_app, name="server")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
LeaseOpt = Annotated[
    int | None,
    typer.Option(
        min=200,
        help="Claim lease in ms; a lost worker's task is reclaimed after it "
        "(default: REDFLEET_LEASE_MS, else 10000).",
    ),
]


def _log_level() -> str:
    return os.environ.get("REDFLEET_LOG_LEVEL", "info")


@app.command()
def up(
    planners: Annotated[int, typer.Option(min=0, help="Planner worker processes.")] = 1,
    coders: Annotated[int, typer.Option(min=0, help="Coder worker processes.")] = 2,
    reviewers: Annotated[int, typer.Option(min=0, help="Reviewer worker processes.")] = 1,
    lease_ms: LeaseOpt = None,
    burst: Annotated[
        bool, typer.Option("--burst", help="Exit 0 once no job is queued, claimed or waiting.")
    ] = False,
    reaper: Annotated[
        bool, typer.Option(help="Run the reaper in this fleet (safe on several machines).")
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Run a supervised fleet: one OS process per worker, plus the reaper.

    A worker that dies is replaced. Ctrl-C or SIGTERM drains: running tasks
    finish, then the fleet exits. Run `redfleet up` on several machines with
    the same REDIS_URL to grow one fleet; logs are JSON lines on stderr.
    """
    settings = Settings()
    logs.configure(_log_level())
    url = redis_url(settings)
    spec = FleetSpec(
        planners=planners,
        coders=coders,
        reviewers=reviewers,
        lease_ms=lease_ms or settings.lease_ms,
        burst=burst,
        reaper=reaper,
    )
    with open_state(settings, url) as state:
        report = Fleet.from_settings(state, url, spec, settings).run()
    if as_json:
        views.print_json(report.__dict__)


@app.command()
def worker(
    role: Annotated[Role, typer.Option(help="The role queue this worker serves.")],
    lease_ms: LeaseOpt = None,
    burst: Annotated[bool, typer.Option("--burst", help="Exit once the queue is empty.")] = False,
) -> None:
    """Run one worker process on one role queue (what `redfleet up` starts)."""
    from workers import run_worker

    settings = Settings()
    logs.configure(_log_level())
    with open_state(settings) as state:
        run_worker(state, role=role, lease_ms=lease_ms or settings.lease_ms, burst=burst)


@app.command("reaper")
def reaper_cmd(
    once: Annotated[bool, typer.Option("--once", help="Run one pass and exit.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the reaper alone: reclaim expired leases, redeliver lost envelopes."""
    settings = Settings()
    logs.configure(_log_level())
    stop = threading.Event()
    with open_state(settings) as state:
        reaper = Reaper(state, redeliver_after_ms=settings.redeliver_after_ms)
        while True:
            report = reaper.tick()
            if once:
                if as_json:
                    views.print_json(report.__dict__)
                return
            stop.wait(settings.reap_interval_ms / 1000)


@app.command()
def submit(
    goal: Annotated[str, typer.Argument(metavar="GOAL", help="What the job should achieve.")],
    scenario: Annotated[Scenario, typer.Option(help="Scripted task behaviour.")] = Scenario.NOOP,
    fanout: Annotated[
        int, typer.Option(min=1, max=100, help="Coder tasks the planner spawns.")
    ] = 3,
    max_attempts: Annotated[
        int | None,
        typer.Option(
            min=1, help="Attempts before a task is dead (default: REDFLEET_MAX_ATTEMPTS, else 3)."
        ),
    ] = None,
    token_budget: Annotated[
        int,
        typer.Option(min=0, help="Tokens all model calls of the job may use (0: no limit)."),
    ] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job to the planner queue; prints its job id."""
    settings = Settings()
    spec = JobSpec(
        goal=goal,
        scenario=scenario,
        fanout=fanout,
        max_attempts=settings.max_attempts if max_attempts is None else max_attempts,
        token_budget=token_budget,
    )
    with open_state(settings) as state:
        job = state.jobs.submit(spec)
    if as_json:
        views.print_json({"job_id": job.job_id})
    else:
        print(job.job_id)


@app.command()
def status(
    job_id: Annotated[
        str | None,
        typer.Argument(metavar="[JOB_ID]", help="A job id; without it, all recent jobs."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Jobs to list without JOB_ID.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """A job with its tasks, or recent jobs and queue depths."""
    with open_state(Settings()) as state:
        doc = (
            views.job_doc(state, state.jobs.get(job_id))
            if job_id
            else views.overview_doc(state, limit)
        )
    if as_json:
        views.print_json(doc)
    elif job_id:
        views.console.print(f"job {doc['job_id']}: [bold]{doc['status']}[/] — {doc['goal']}")
        if doc["reason"]:
            views.console.print(f"reason: {doc['reason']}")
        views.table("tasks", doc["tasks"], views.TASK_COLUMNS)
    else:
        views.table("jobs", doc["jobs"], ["job_id", "status", "scenario", "created", "goal"])
        queues = ", ".join(f"{role}={n}" for role, n in doc["queues"].items())
        views.console.print(f"active jobs: {doc['active']}; queued envelopes: {queues}")


@app.command()
def claims(as_json: JsonOpt = False) -> None:
    """Live claims: who owns which task, with which fencing token, for how long."""
    with open_state(Settings()) as state:
        doc = views.claims_doc(state)
    if as_json:
        views.print_json(doc)
    else:
        views.table(
            "claims", doc, ["task_id", "job_id", "role", "owner", "token", "lease_remaining_ms"]
        )


@app.command("workers")
def workers_cmd(as_json: JsonOpt = False) -> None:
    """Live workers from their heartbeats in Redis."""
    with open_state(Settings()) as state:
        doc = views.workers_doc(state.workers.list())
    if as_json:
        views.print_json(doc)
    else:
        views.table(
            "workers",
            doc,
            ["worker_id", "pid", "role", "host", "state", "task_id", "heartbeat_age_ms"],
        )


@app.command("logs")
def logs_cmd(
    job_id: Annotated[
        str | None,
        typer.Argument(metavar="[JOB_ID]", help="A job id; without it, every job."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events until Ctrl-C.")
    ] = False,
    last: Annotated[int, typer.Option(min=0, help="How many past events to print first.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Events from Redis Streams, oldest first (one JSON object a line with --json).

    Without JOB_ID the global stream is read; it mirrors every job's events
    with up to a second of delay.
    """

    def show(event: views.Event) -> None:
        line = json.dumps(event.to_json_dict()) if as_json else views.event_line(event)
        print(line, flush=True)

    with open_state(Settings()) as state:
        if job_id:
            state.jobs.get(job_id)  # an unknown id is an error, not an empty log
        past = state.events.read(job_id, last=last) if last else []
        for event in past:
            show(event)
        if follow:
            after = past[-1].id if past else "$"
            for event in state.events.follow(job_id, after=after):
                show(event)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="The job to cancel.")],
    as_json: JsonOpt = False,
) -> None:
    """Cancel a job: its workers stop at their next renewal or write.

    Cancelling a job that is already cancelled succeeds; one that already
    succeeded or failed is an error.
    """
    with open_state(Settings()) as state:
        try:
            state.jobs.cancel(job_id)
            already = False
        except JobFinished as exc:
            if exc.status != "cancelled":
                raise
            already = True
    if as_json:
        views.print_json({"job_id": job_id, "status": "cancelled", "already": already})
    else:
        print(f"{job_id} was already cancelled" if already else f"{job_id} cancelled")


@app.command()
def demo(
    fanout: Annotated[int, typer.Option(min=1, max=20, help="Coder tasks.")] = 3,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=1, help="Give up after this many seconds.")
    ] = 120,
    as_json: JsonOpt = False,
) -> None:
    """Run a job through a real fleet on a private embedded Redis, then summarize.

    The tasks are scripted (scenario `noop`; no model is called). Exits 0 when
    the job succeeded, 1 otherwise.
    """
    settings = Settings()
    os.environ.setdefault("REDFLEET_LOG_LEVEL", "warning")  # inherited by the workers
    logs.configure(_log_level())
    with RedisServer() as server, open_state(settings, server.url) as state:
        job = state.jobs.submit(
            JobSpec(goal="demo: plan, code and review a greeting module", fanout=fanout)
        )
        if not as_json:
            views.console.print(
                f"redfleet demo — job {job.job_id}, scenario noop (scripted: no model is "
                f"called), embedded Redis at {server.url}"
            )
        spec = FleetSpec(
            planners=1, coders=fanout, reviewers=1, lease_ms=settings.lease_ms, burst=True
        )
        fleet = Fleet.from_settings(state, server.url, spec, settings)
        timer = threading.Timer(timeout_s, fleet.request_stop)
        timer.start()
        try:
            report = fleet.run()
        finally:
            timer.cancel()
        doc = views.job_doc(state, state.jobs.get(job.job_id))
        doc["events"] = len(state.events.read(job.job_id, last=10_000))
        doc["fleet"] = report.__dict__
    if as_json:
        views.print_json(doc)
    else:
        views.table(f"job {job.job_id}: {doc['status']}", doc["tasks"], views.TASK_COLUMNS)
        views.console.print(
            f"{doc['events']} events recorded. With a fleet of your own: "
            "`redfleet up`, `redfleet submit GOAL`, `redfleet logs -f`."
        )
    if doc["status"] != "succeeded":
        print(f"redfleet: demo job ended {doc['status']}", file=sys.stderr)
        raise typer.Exit(1)


@server_app.command("status")
def server_status(as_json: JsonOpt = False) -> None:
    """Is the embedded redis-server running, and where."""
    info = Embedded(Settings().home).status()
    doc = {"running": True, **info} if info else {"running": False}
    if as_json:
        views.print_json(doc)
    else:
        print(f"running at {doc['url']} (pid {doc['pid']})" if info else "not running")


@server_app.command("stop")
def server_stop(as_json: JsonOpt = False) -> None:
    """Stop the embedded redis-server (its data stays in REDFLEET_HOME)."""
    stopped = Embedded(Settings().home).stop()
    if as_json:
        views.print_json({"stopped": stopped})
    else:
        print("stopped" if stopped else "not running")


def _validation_message(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def main() -> None:
    """Entry point: option errors are the CLI framework's; ours are one line, exit 2."""
    try:
        app(prog_name="redfleet")
        return
    except (StateError, CoordinatorError) as exc:
        message = str(exc)
    except pydantic.ValidationError as exc:
        message = _validation_message(exc)
    print(f"redfleet: error: {message}", file=sys.stderr)
    sys.exit(2)
