"""The ``redfleet`` command line.

Connection: ``REDIS_URL`` when set; otherwise an embedded redis-server that the
CLI starts on first use (see ``redfleet server --help``). Every command that
prints something takes ``--json``. Errors are one line on stderr, exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import click
import pydantic
import typer

from shared_state import JobSpec, RedisServer, Role, Scenario, StateError

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
server_app = typer.Typer(help="The embedded redis-server used when REDIS_URL is not set.")
app.add_typer(server_app, name="server")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _settings() -> Settings:
    return Settings()


@app.command()
def up(
    planners: Annotated[int, typer.Option(min=0, help="Planner worker processes.")] = 1,
    coders: Annotated[int, typer.Option(min=0, help="Coder worker processes.")] = 2,
    reviewers: Annotated[int, typer.Option(min=0, help="Reviewer worker processes.")] = 1,
    lease_ms: Annotated[
        int | None,
        typer.Option(
            min=200,
            help="Claim lease in ms; a lost worker's task is reclaimed after it "
            "(default: REDFLEET_LEASE_MS, else 10000).",
        ),
    ] = None,
    burst: Annotated[
        bool, typer.Option(help="Exit 0 once no job is queued, claimed or waiting.")
    ] = False,
    reaper: Annotated[
        bool, typer.Option(help="Run the reaper in this fleet (safe on several machines).")
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Run a supervised fleet: one OS process per worker, plus the reaper.

    A worker that dies is replaced. Ctrl-C or SIGTERM drains: running tasks
    finish, then the fleet exits. Run `redfleet up` on several machines with
    the same REDIS_URL to grow one fleet.
    """
    settings = _settings()
    logs.configure(os.environ.get("REDFLEET_LOG_LEVEL", "info"))
    url = redis_url(settings)
    state = open_state(settings, url)
    spec = FleetSpec(
        planners=planners,
        coders=coders,
        reviewers=reviewers,
        lease_ms=lease_ms or settings.lease_ms,
        burst=burst,
        reaper=reaper,
    )
    fleet = Fleet(
        state,
        url,
        spec,
        reap_interval_ms=settings.reap_interval_ms,
        redeliver_after_ms=settings.redeliver_after_ms,
        drain_timeout_s=settings.drain_timeout_s,
    )
    report = fleet.run()
    if as_json:
        views.print_json(report.__dict__)


@app.command(hidden=False)
def worker(
    role: Annotated[Role, typer.Option(help="The role queue this worker serves.")],
    lease_ms: Annotated[int | None, typer.Option(min=200, help="Claim lease in ms.")] = None,
    burst: Annotated[bool, typer.Option(help="Exit once the queue is empty.")] = False,
) -> None:
    """Run one worker process on one role queue (what `redfleet up` starts)."""
    from workers import run_worker

    settings = _settings()
    logs.configure(os.environ.get("REDFLEET_LOG_LEVEL", "info"))
    state = open_state(settings)
    run_worker(state, role=role, lease_ms=lease_ms or settings.lease_ms, burst=burst)


@app.command("reaper")
def reaper_cmd(
    once: Annotated[bool, typer.Option(help="Run one pass and exit.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the reaper alone: reclaim expired leases, redeliver lost envelopes."""
    import time

    settings = _settings()
    logs.configure(os.environ.get("REDFLEET_LOG_LEVEL", "info"))
    state = open_state(settings)
    reaper = Reaper(state, redeliver_after_ms=settings.redeliver_after_ms)
    while True:
        report = reaper.tick()
        if once:
            if as_json:
                views.print_json(report.__dict__)
            return
        time.sleep(settings.reap_interval_ms / 1000)


@app.command()
def submit(
    goal: Annotated[str, typer.Argument(help="What the job should achieve.")],
    scenario: Annotated[Scenario, typer.Option(help="Scripted task behaviour.")] = Scenario.NOOP,
    fanout: Annotated[int, typer.Option(help="Coder tasks the planner spawns.")] = 3,
    max_attempts: Annotated[
        int | None, typer.Option(help="Attempts before a task is dead.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job to the planner queue; prints its job id."""
    settings = _settings()
    spec = JobSpec(
        goal=goal,
        scenario=scenario,
        fanout=fanout,
        max_attempts=max_attempts or settings.max_attempts,
    )
    job = open_state(settings).jobs.submit(spec)
    if as_json:
        views.print_json({"job_id": job.job_id})
    else:
        print(job.job_id)


@app.command()
def status(
    job_id: Annotated[
        str | None, typer.Argument(help="A job id; without it, all recent jobs.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Jobs to list without JOB_ID.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """A job with its tasks, or recent jobs and queue depths."""
    state = open_state(_settings())
    if job_id:
        doc = views.job_doc(state, state.jobs.get(job_id))
        if as_json:
            views.print_json(doc)
            return
        views.console.print(f"job {doc['job_id']}: [bold]{doc['status']}[/] — {doc['goal']}")
        if doc["reason"]:
            views.console.print(f"reason: {doc['reason']}")
        views.table(
            "tasks",
            doc["tasks"],
            ["task_id", "role", "status", "attempts", "owner", "token", "parent_id", "stage"],
        )
        return
    doc = views.overview_doc(state, limit)
    if as_json:
        views.print_json(doc)
        return
    views.table("jobs", doc["jobs"], ["job_id", "status", "scenario", "created", "goal"])
    queues = ", ".join(f"{role}={n}" for role, n in doc["queues"].items())
    views.console.print(f"active jobs: {doc['active']}; queued envelopes: {queues}")


@app.command()
def claims(as_json: JsonOpt = False) -> None:
    """Live claims: who owns which task, with which fencing token, for how long."""
    doc = views.claims_doc(open_state(_settings()))
    if as_json:
        views.print_json(doc)
    else:
        views.table(
            "claims",
            doc,
            ["task_id", "job_id", "role", "owner", "token", "lease_remaining_ms"],
        )


@app.command("workers")
def workers_cmd(as_json: JsonOpt = False) -> None:
    """Live workers from their heartbeats in Redis."""
    doc = views.workers_doc(open_state(_settings()).workers.list())
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
    job_id: Annotated[str | None, typer.Argument(help="A job id; without it, every job.")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events.")
    ] = False,
    last: Annotated[int, typer.Option(min=0, help="How many past events to print first.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Events from Redis Streams, oldest first (one JSON object a line with --json)."""
    state = open_state(_settings())
    if job_id:
        state.jobs.get(job_id)  # an unknown id is an error, not an empty log

    def show(event: views.Event) -> None:
        line = json.dumps(event.to_json_dict()) if as_json else views.event_line(event)
        print(line, flush=True)

    past = state.events.read(job_id, last=last) if last else []
    for event in past:
        show(event)
    if follow:
        after = past[-1].id if past else "$"
        for event in state.events.follow(job_id, after=after):
            show(event)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="The job to cancel.")],
    as_json: JsonOpt = False,
) -> None:
    """Cancel a job: its workers stop at their next renewal or write."""
    state = open_state(_settings())
    state.jobs.cancel(job_id)
    if as_json:
        views.print_json({"job_id": job_id, "status": "cancelled"})
    else:
        print(f"{job_id} cancelled")


@app.command()
def demo(
    fanout: Annotated[int, typer.Option(min=1, max=20, help="Coder tasks.")] = 3,
    as_json: JsonOpt = False,
) -> None:
    """Run a job through a real fleet on a private embedded Redis, then summarize.

    The tasks are scripted (scenario `noop`; no model is called). Exits 0 when
    the job succeeded.
    """
    settings = _settings()
    os.environ.setdefault("REDFLEET_LOG_LEVEL", "warning")
    logs.configure(os.environ["REDFLEET_LOG_LEVEL"])
    with RedisServer() as server:
        state = open_state(settings, server.url)
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
        report = Fleet(state, server.url, spec, reap_interval_ms=settings.reap_interval_ms).run()
        doc = views.job_doc(state, state.jobs.get(job.job_id))
        doc["events"] = len(state.events.read(job.job_id, last=10_000))
        doc["fleet"] = report.__dict__
        if as_json:
            views.print_json(doc)
        else:
            views.table(
                f"job {job.job_id}: {doc['status']}",
                doc["tasks"],
                ["task_id", "role", "status", "attempts", "owner", "token", "parent_id"],
            )
            views.console.print(
                f"{doc['events']} events recorded. With a fleet of your own: "
                "`redfleet up`, `redfleet submit GOAL`, `redfleet logs -f`."
            )
    if doc["status"] != "succeeded":
        raise typer.Exit(1)


@server_app.command("status")
def server_status(as_json: JsonOpt = False) -> None:
    """Is the embedded redis-server running, and where."""
    info = Embedded(_settings().home).status()
    if as_json:
        views.print_json(info or {"running": False})
    else:
        print(f"running at {info['url']} (pid {info['pid']})" if info else "not running")


@server_app.command("stop")
def server_stop() -> None:
    """Stop the embedded redis-server (its data stays in REDFLEET_HOME)."""
    print("stopped" if Embedded(_settings().home).stop() else "not running")


def _fail(message: str) -> None:
    print(f"redfleet: error: {message}", file=sys.stderr)
    sys.exit(2)


def _validation_message(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def main() -> None:
    try:
        app(standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except (StateError, CoordinatorError) as exc:
        _fail(str(exc))
    except pydantic.ValidationError as exc:
        _fail(_validation_message(exc))
    except KeyboardInterrupt:
        sys.exit(130)
