"""The ``redfleet`` command line.

Connection: ``REDIS_URL`` when set; otherwise an embedded redis-server that the
CLI starts on first use (see ``redfleet server --help``). Every command that
prints a result takes ``--json``. Bad input to a command (an unknown job, a
blank goal, an unreachable server, a bad setting) is one line on stderr and
exit code 2, as are option errors, which also show the usage line. Error lines
are redacted (no Redis password or API key is printed), and text from users
and models is printed terminal-safe (see ``text``); ``--json`` keeps it exact.
"""

# No ``from __future__ import annotations`` in the CLI's modules: typer reads every
# command's options on each run, and a string annotation costs it an eval (~30 ms of CPU
# a run across the CLI). Names imported only for type checking are quoted instead.

import dataclasses
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shared_state.kinds import Role, Scenario
from shared_state.names import check_name
from shared_state.redact import redact
from workers.llm.names import ProviderName

from . import collector
from .durability import Durability
from .errors import CoordinatorError
from .export import VERDICTS_DIR
from .limits_cli import limits_app
from .memory_cli import memory_app
from .text import markup_safe, multi_line, one_line

if TYPE_CHECKING:
    import pydantic

    from workers.llm.choice import ProviderChoice

    from .api import Client
    from .patch import FileDiff
    from .settings import Settings

# Each command imports what it runs in its own body (``redfleet --version`` loads neither
# pydantic nor the Redis client, ``claims`` no RQ, ``status`` no fleet supervisor): only
# what defines the options is here, and the options name plain enums.

app = typer.Typer(
    help=(
        "redfleet: fleets of planner, coder and reviewer workers over one Redis.\n\n"
        "Start a fleet with `redfleet up`, submit a goal with `redfleet submit`, watch it\n"
        "with `redfleet status`, `claims`, `workers` and `logs -f`, and read what it made\n"
        "with `redfleet artifacts` and `redfleet show`. `redfleet demo` runs all of it on a\n"
        "private embedded Redis. Set REDIS_URL to share one Redis between machines;\n"
        "without it the CLI starts an embedded redis-server of its own."
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
app.add_typer(memory_app, name="memory")
app.add_typer(limits_app, name="limits")


def _print_version(value: bool) -> None:
    if value:
        import importlib.metadata

        try:
            version = importlib.metadata.version("redfleet")
        except importlib.metadata.PackageNotFoundError:  # run from a tree never installed
            version = "unknown (not installed)"
        print(f"redfleet {version}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            metavar="TENANT",
            help="Read and act for one tenant only: another's jobs are not found, and "
            "listings hold this tenant's (default: REDFLEET_TENANT, else every tenant). "
            "A fleet (`up`, `worker`) serves every tenant whatever this says.",
        ),
    ] = None,
) -> None:
    """The options before a command."""
    if tenant is not None:
        # Every command reads its Settings from the environment: this is where they look.
        os.environ["REDFLEET_TENANT"] = tenant


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
LeaseOpt = Annotated[
    int | None,
    typer.Option(
        min=200,
        help="Claim lease in ms; a lost worker's task is reclaimed after it "
        "(default: REDFLEET_LEASE_MS, else 10000).",
    ),
]


ProviderOpt = Annotated[
    ProviderName | None,
    typer.Option(
        help="The model the workers call (default: REDFLEET_PROVIDER, else scripted: a "
        "replay of a shipped scenario, no model is called)."
    ),
]
ModelOpt = Annotated[
    str | None, typer.Option(help="Model name, e.g. gpt-4.1-mini (default: REDFLEET_MODEL).")
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        help="OpenAI-compatible or Anthropic endpoint, e.g. http://localhost:11434/v1 for "
        "Ollama (default: REDFLEET_BASE_URL, else the provider's own)."
    ),
]
ScriptOpt = Annotated[
    str | None,
    typer.Option(
        help="The scripted provider's scenario: a shipped name or a .json file "
        "(default: REDFLEET_SCRIPT, else demo)."
    ),
]
ConcurrencyOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=1000,
        metavar="N",
        help="Tasks each worker process runs at once, one per slot; an agent task mostly "
        "waits on its model, so slots are cheap (default: REDFLEET_CONCURRENCY, else 4).",
    ),
]

SummaryModelOpt = Annotated[
    str | None,
    typer.Option(
        help="A cheaper model of the provider for summaries, recorded as compaction usage "
        "(default: REDFLEET_SUMMARY_MODEL, else none: no model is called for them)."
    ),
]


def _settings() -> "Settings":
    """The settings from the environment. pydantic-settings loads here, when a command
    reads them: ``--version`` and ``--help`` never do."""
    from .settings import Settings

    return Settings()


def _check_job_id(job_id: str | None, name: str = "JOB_ID") -> None:
    """A blank job id is an error: ``status ''`` must not mean every job."""
    if job_id is not None and not job_id.strip():
        raise CoordinatorError(f"{name}: must not be empty")


def _provider_env(
    settings: "Settings",
    provider: ProviderName | None,
    model: str | None,
    base_url: str | None,
    script: str | None,
    summary_model: str | None = None,
    fallback: list[str] | None = None,
) -> tuple["ProviderChoice", tuple[tuple[str, str], ...]]:
    """The provider the options choose, checked now, and the workers' environment for it."""
    from workers.llm.choice import Fallback, ProviderChoice
    from workers.llm.scripted import load_scenario

    from .fleet import provider_env

    given = {
        "provider": provider or settings.provider,
        "model": settings.model if model is None else model,
        "base_url": settings.base_url if base_url is None else base_url,
        "script": script or settings.script,
        "summary_model": settings.summary_model if summary_model is None else summary_model,
        "fallback_after_s": settings.fallback_after_s,
        "wait_s": settings.provider_wait_s,
    }
    texts = fallback if fallback else [f for f in settings.fallback.split(",") if f.strip()]
    try:
        given["fallbacks"] = tuple(Fallback.parse(f) for f in texts)
    except ValueError as exc:
        raise CoordinatorError(f"--fallback: {exc}") from exc
    if given["provider"] != ProviderName.SCRIPTED and not given.get("model"):
        raise CoordinatorError(
            f"--model: the {given['provider']} provider needs a model name, "
            "e.g. --model gpt-4.1-mini (or set REDFLEET_MODEL)"
        )
    choice = ProviderChoice.model_validate(given)
    if choice.provider is ProviderName.SCRIPTED:
        try:
            load_scenario(choice.script)
        except ValueError as exc:
            raise CoordinatorError(f"--script: {exc}") from exc
    return choice, provider_env(choice)


@app.command()
def up(
    planners: Annotated[int, typer.Option(min=0, help="Planner worker processes.")] = 1,
    coders: Annotated[int, typer.Option(min=0, help="Coder worker processes.")] = 2,
    reviewers: Annotated[int, typer.Option(min=0, help="Reviewer worker processes.")] = 1,
    concurrency: ConcurrencyOpt = None,
    lease_ms: LeaseOpt = None,
    burst: Annotated[
        bool, typer.Option("--burst", help="Exit 0 once no job is queued, claimed or waiting.")
    ] = False,
    reaper: Annotated[
        bool, typer.Option(help="Run the reaper in this fleet (safe on several machines).")
    ] = True,
    provider: ProviderOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    script: ScriptOpt = None,
    summary_model: SummaryModelOpt = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            metavar="PORT",
            help="Serve Prometheus metrics of the whole fleet on http://HOST:PORT/metrics.",
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option("--metrics-host", metavar="HOST", help="Where --metrics-port listens.")
    ] = "127.0.0.1",
    fallback: Annotated[
        list[str] | None,
        typer.Option(
            "--fallback",
            metavar="[ROLE=]PROVIDER:MODEL[@URL]",
            help="A route to fall back to when the model's route cools (429s, overload, an "
            "outage) past REDFLEET_FALLBACK_AFTER_S (20 s); repeat for an ordered list, "
            "e.g. --fallback coder=openai:gpt-4.1-mini (default: REDFLEET_FALLBACK).",
        ),
    ] = None,
    limits: Annotated[
        Path | None,
        typer.Option(
            "--limits",
            metavar="FILE",
            help='Model routes\' shared limits, a JSON file: {"openai:MODEL@HOST/v1": '
            '{"rpm": 500, "tpm": 200000, "concurrency": 50}} (see `redfleet limits`).',
        ),
    ] = None,
    durability: Annotated[
        Durability | None,
        typer.Option(
            "--durability",
            help="replicated: every claim, completion, spawn and journal entry waits for "
            "a replica's acknowledgement, so a Redis failover loses none of them "
            "(default: REDFLEET_DURABILITY, else default).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a supervised fleet: one OS process per worker, plus the reaper.

    A worker that dies is replaced, and one that stops answering (a hung
    process) is killed and replaced. Ctrl-C, SIGTERM or SIGHUP (closing the
    terminal) drains: running tasks finish, then the fleet exits; its workers
    die with it even if it is killed outright. Run `redfleet up` on several machines with
    the same REDIS_URL to grow one fleet; logs are JSON lines on stderr.

    The workers call the model chosen with --provider: `scripted` (the
    default) replays a scenario and calls no model; `openai` speaks the
    OpenAI chat-completions API (OpenAI, vLLM, Ollama, llama.cpp, LM Studio;
    key in OPENAI_API_KEY); `anthropic` the Messages API (ANTHROPIC_API_KEY).

    --concurrency N gives each worker process N task slots: N tasks at once,
    each with its own claim, lease and fencing token, sharing one process's
    memory. Size a fleet as processes x slots (see the README, "Concurrency").

    Every model call is admitted by its route's shared limits (--limits
    FILE, or `redfleet limits set` while it runs); a provider's 429 or outage
    cools the route for the whole fleet and costs no task an attempt.

    --metrics-port serves the fleet's metrics for Prometheus (claims, renewals,
    fenced writes, reaps, tokens, cost, cache-hit ratio, step latency, queue
    depths, workers): counted in Redis from every worker's events, so one
    `up` serving them covers the fleet on every machine.

    It starts by saying on stderr what runs and on which Redis (REDIS_URL, or
    the embedded server it started, with its password masked). When it stops
    it prints one line: attempts reaped and redelivered, workers restarted
    and hung (--json: the counts as JSON).
    """
    from . import logs, metrics, views
    from .connection import open_state, redis_url
    from .fleet import Fleet, FleetSpec
    from .limits_cli import load_limits

    settings = _settings()
    if durability is not None:
        settings = settings.model_copy(update={"durability": durability})
    logs.configure(settings.log_level)
    choice, worker_env = _provider_env(
        settings, provider, model, base_url, script, summary_model, fallback
    )
    worker_env = (*worker_env, ("REDFLEET_DURABILITY", settings.durability.value))
    route_limits = load_limits(limits) if limits is not None else {}
    url = redis_url(settings)
    spec = FleetSpec(
        planners=planners,
        coders=coders,
        reviewers=reviewers,
        lease_ms=lease_ms or settings.lease_ms,
        concurrency=concurrency or settings.concurrency,
        burst=burst,
        reaper=reaper,
        worker_env=worker_env,
    )
    # Reach Redis as a command a person waits for does (a one-line error within seconds),
    # before announcing a fleet; once it serves, the fleet rides out outages.
    with open_state(settings, url) as state:
        for route, set_to in route_limits.items():
            state.routes.set_limits(route, set_to)
        if settings.durability is Durability.REPLICATED:
            replicas = state.client.info("replication").get("connected_slaves", 0)
            if not replicas:  # every write would wait for an acknowledgement that never comes
                raise CoordinatorError(
                    "--durability replicated needs a replica: the primary has none connected "
                    "(run Redis with a replica, e.g. under Sentinel: see the README)"
                )
    if not as_json:
        described = one_line(redact(choice.describe()))
        fleet_of = views.count(len(spec.roles()), "worker")
        if spec.concurrency > 1 and spec.roles():
            fleet_of += f" x {views.count(spec.concurrency, 'slot')}"
        if not spec.roles():  # a node for the reaper and the metrics, or a mistake
            fleet_of += " (no task runs here: " + ("the reaper only)" if reaper else "nothing)")
        print(f"redfleet: fleet of {fleet_of}, provider {described}", file=sys.stderr)
        source = "REDIS_URL" if settings.redis_url else f"embedded server in {settings.home}"
        where = one_line(redact(f"{url} ({source})"))
        replicated = settings.durability is Durability.REPLICATED
        acked = ", writes acknowledged by a replica" if replicated else ""
        print(f"redfleet: Redis {where}{acked}", file=sys.stderr)
    with open_state(settings, url, serving=True) as state:
        if metrics_port is not None:
            metrics.serve(state, metrics_port, metrics_host)
            if not as_json:
                where = f"http://{metrics_host}:{metrics_port}/metrics"
                print(f"redfleet: metrics on {one_line(where)}", file=sys.stderr)
        report = Fleet.from_settings(state, url, spec, settings).run()
    if as_json:
        views.print_json(report.__dict__)
    else:
        views.write_line(views.fleet_line(report))


@app.command()
def worker(
    role: Annotated[Role, typer.Option(help="The role queue this worker serves.")],
    concurrency: ConcurrencyOpt = None,
    lease_ms: LeaseOpt = None,
    burst: Annotated[bool, typer.Option("--burst", help="Exit once the queue is empty.")] = False,
    summary_model: SummaryModelOpt = None,
) -> None:
    """Run one worker process on one role queue (what `redfleet up` starts)."""
    # One BLAS thread, set before numpy loads: a worker's parallelism is its slots, and
    # OpenBLAS's threads (one a core) spin while they wait, so the embedder spent a third
    # more CPU for the same vectors (196 against 132 ms for a 256-token text on 2 cores).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from workers import run_worker

    from . import logs
    from .connection import open_state

    settings = _settings()
    logs.configure(settings.log_level)
    choice = settings.provider_choice()
    if summary_model is not None:
        choice = choice.model_copy(update={"summary_model": summary_model})
    with open_state(settings, serving=True) as state:
        run_worker(
            state,
            role=role,
            lease_ms=lease_ms or settings.lease_ms,
            burst=burst,
            provider=choice,
            concurrency=concurrency or settings.concurrency,
            stuck_after_s=settings.slot_stuck_s,
        )


@app.command("reaper")
def reaper_cmd(
    once: Annotated[bool, typer.Option("--once", help="Run one pass and exit.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the reaper alone: reclaim expired leases, redeliver lost envelopes.

    --once runs one pass and prints one line: attempts ended (requeued or
    dead), tasks redelivered, finished jobs retired, stale envelopes discarded
    and index entries pruned (--json: the ids and counts as JSON).
    """
    import redis
    import structlog

    from shared_state.errors import StateError

    from . import logs, views
    from .connection import open_state
    from .reaper import Reaper

    settings = _settings()
    logs.configure(settings.log_level)
    stop = threading.Event()
    # The reaper keeps the whole fleet: a --tenant does not narrow what it reaps.
    with open_state(settings.model_copy(update={"tenant": None}), serving=not once) as state:
        reaper = Reaper(state, redeliver_after_ms=settings.redeliver_after_ms)
        while True:
            try:
                report = reaper.tick()
            except (redis.RedisError, StateError) as exc:
                if once:
                    raise
                # Redis restarting or failing over: the next tick tries again.
                structlog.get_logger("redfleet.reaper").warning(
                    "reaper.tick_failed", error=str(exc)
                )
                stop.wait(settings.reap_interval_ms / 1000)
                continue
            if once:
                if as_json:
                    views.print_json(report.__dict__)
                else:
                    views.write_line(views.reap_line(report))
                return
            stop.wait(settings.reap_interval_ms / 1000)


WaitTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=0.1,
        metavar="SECONDS",
        help="With --wait: give up after this long, exit 1 (the job goes on).",
    ),
]


@app.command()
def submit(
    goal: Annotated[str, typer.Argument(metavar="GOAL", help="What the job should achieve.")],
    scenario: Annotated[
        Scenario,
        typer.Option(
            help="agents: the planner, coder and reviewer roles with the fleet's model. "
            "noop, slow, crash: scripted task behaviours without a model, for trying the "
            "fleet itself."
        ),
    ] = Scenario.AGENTS,
    fanout: Annotated[
        int,
        typer.Option(
            min=1,
            max=100,
            help="Coder tasks of a scripted behaviour (agents: the planner decides).",
        ),
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
    budget_usd: Annotated[
        float,
        typer.Option(
            "--budget-usd",
            min=0,
            help="USD all model calls of the job may cost, at their routes' prices (0: no "
            "limit); a call that would overrun it is not made, and the job fails saying so.",
        ),
    ] = 0.0,
    priority: Annotated[
        int,
        typer.Option(
            min=0,
            max=9,
            help="Its model calls' place while a route is busy: 9 first, 0 (the default) "
            "last; tenants share by weight within a priority (`redfleet limits tenant`).",
        ),
    ] = 0,
    tenant: Annotated[
        str | None,
        typer.Option(
            help="Whose job it is: whose memory and workspaces it reads and writes, and who "
            "may read it when reads are scoped (default: `redfleet --tenant`, "
            "REDFLEET_TENANT, else default)."
        ),
    ] = None,
    user: Annotated[
        str, typer.Option(help="The user the job runs for: its user: memory scope.")
    ] = "default",
    memory_file: Annotated[
        Path | None,
        typer.Option(
            "--memory-file",
            metavar="FILE",
            help="A project memory document (AGENTS.md): stored as the tenant's "
            "/memories/project/AGENTS.md, which every job of the tenant reads at start.",
        ),
    ] = None,
    approve: Annotated[
        str | None,
        typer.Option(
            "--approve",
            metavar="TOOL[,TOOL]",
            help="Ask before acting: every call of these tools (e.g. write_file,run_checks) "
            "waits, its task blocked with the call as its question, until `redfleet approve` "
            "(or reject). `redfleet status JOB` shows the question.",
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            metavar="KEY",
            help="Submit at most once per KEY (and tenant): a repeat prints the first job's id.",
        ),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            metavar="PATH",
            help="The files the job works on: a folder (its .gitignore rules honoured), or a "
            "git repository (its files as committed at HEAD; the commit is recorded). Stored "
            "once per tenant by content: a repeat sends only what changed.",
        ),
    ] = None,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            metavar="GLOB",
            help="With --workspace: import only paths matching a GLOB (gitignore-style, "
            "e.g. 'src/**/*.py'; repeatable).",
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="GLOB",
            help="With --workspace: leave out paths matching a GLOB (repeatable).",
        ),
    ] = None,
    check: Annotated[
        str,
        typer.Option(
            "--check",
            metavar="CMD",
            help="With --workspace: the workspace's own check (e.g. 'pytest -q', 'python "
            "validate.py'), run by the reviewer over the job's files; a feature whose check "
            "is 'workspace' passes only on a passing run of it.",
        ),
    ] = "",
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Show its progress until it ends; exit 0 if it succeeded, 1 if it failed or "
            "was cancelled.",
        ),
    ] = False,
    timeout_s: WaitTimeoutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job to the planner queue; prints its job id.

    Any fleet on the same Redis picks it up (`redfleet up`). Follow it with
    `redfleet logs JOB_ID -f` and `redfleet status JOB_ID`. An agents job on a
    fleet started without --provider is a replay: the scripted provider calls
    no model (a note on stderr says so; stdout is the job id alone).

    --wait shows the job's progress (tasks done of all, the planner's stage,
    running tasks, tokens, cost) until it ends: a live line on a terminal, a
    line per change otherwise; it exits 0 if the job succeeded, 1 if it failed
    or was cancelled, and 1 after --timeout, without cancelling the job. With
    --json it prints the final job document of `status --json` instead.

    --workspace PATH gives the job your files (a folder, or a git repository at
    HEAD), stored once per tenant: a repeat sends only what changed. The job
    changes nothing of yours: `redfleet diff JOB_ID` shows its changes and
    `redfleet apply JOB_ID --repo PATH` makes them a branch.
    """
    from . import views
    from .api import Client, acting_tenant, job_spec
    from .connection import open_state

    if timeout_s is not None and not wait:
        raise CoordinatorError("--timeout: only with --wait")
    given = [name for name, value in (("--include", include), ("--exclude", exclude),
                                      ("--check", check)) if value]  # fmt: skip
    if given and workspace is None:
        raise CoordinatorError(f"{'/'.join(given)}: only with --workspace")
    settings = _settings()
    try:
        document = memory_file.read_text(encoding="utf-8") if memory_file else None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CoordinatorError(f"--memory-file: cannot read {memory_file}: {why}") from exc
    asked = {
        "scenario": scenario,
        "fanout": fanout,
        "max_attempts": max_attempts,
        "token_budget": token_budget,
        "user": user,
        "idempotency_key": idempotency_key or "",
        "check": check,
        "approve": tuple(n.strip() for n in (approve or "").split(",") if n.strip()),
        "priority": priority,
        "budget_usd": budget_usd,
    }
    # Checked before connecting: a usage error starts no server and writes nothing.
    job_spec(goal, settings=settings, tenant=acting_tenant(tenant, settings.tenant), **asked)
    with open_state(settings) as state:
        client = Client(state, settings=settings)
        if document is not None:
            client.set_project_memory(document, tenant=tenant)
        imported = None
        if workspace is not None:
            with views.progress_bar("importing the workspace", after_s=1.0) as advance:
                imported = client.import_workspace(
                    workspace,
                    tenant=tenant,
                    include=tuple(include or ()),
                    exclude=tuple(exclude or ()),
                    progress=advance,
                )
            print(f"redfleet: {one_line(imported.line())}", file=sys.stderr)
        job_id = client.submit(goal, tenant=tenant, workspace=imported, **asked)
        if not wait:
            if as_json:
                doc: dict[str, object] = {"job_id": job_id}
                if imported is not None:
                    doc["workspace"] = dataclasses.asdict(imported)
                views.print_json(doc)
                return
            views.write_line(job_id)
            if scenario is Scenario.AGENTS and settings.provider is ProviderName.SCRIPTED:
                print(
                    "redfleet: note: a fleet started with plain `redfleet up` replays the "
                    "scripted provider and calls no model; run a real one with "
                    "`redfleet up --provider openai --model …`",
                    file=sys.stderr,
                )
            return
        if not as_json:
            views.write_line(job_id)
        _wait_for(client, job_id, timeout_s, as_json)


def _wait_for(client: "Client", job_id: str, timeout_s: float | None, as_json: bool) -> None:
    """``submit --wait``: progress until the job ends; exit 0 if it succeeded, else 1."""
    from . import views
    from .api import Progress, WaitTimeout

    live = None if as_json or not sys.stdout.isatty() else views.console.status("waiting")

    def show(progress: Progress) -> None:
        if live is not None:
            live.update(markup_safe(progress.line()))
        elif not as_json:
            views.write_line(one_line(progress.line()))

    timed_out = None
    if live is not None:
        live.start()
    try:
        client.wait(job_id, timeout_s, show)
    except WaitTimeout as exc:
        timed_out = exc
    finally:
        if live is not None:
            live.stop()
    doc = client.status(job_id)
    if as_json:
        views.print_json(doc)
    else:
        if live is not None:
            line = markup_safe(client.progress(job_id).line())
            views.console.print(line, soft_wrap=True, highlight=False)
        views.print_job_head(doc)
    if timed_out is not None:
        print(f"redfleet: {one_line(str(timed_out))}", file=sys.stderr)
        raise typer.Exit(1)
    if doc["status"] != "succeeded":
        raise typer.Exit(1)


@app.command()
def status(
    job_id: Annotated[
        str | None,
        typer.Argument(metavar="JOB_ID", help="A job id; without it, all recent jobs."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Jobs to list without JOB_ID.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """A job with its tasks, or recent jobs and queue depths.

    With JOB_ID: the job, the provider its model calls went to (scripted: a
    replay, no model was called), and its tasks with their attempts and lease
    renewals (counted in each task's record, over all its attempts; `logs
    --all` lists them). --json adds usage and `providers` ({"provider model":
    calls}, from the job's model.called events).
    """
    from . import views
    from .api import Client
    from .connection import demo_url, open_state
    from .settings import Settings

    _check_job_id(job_id)
    with open_state() as state:
        doc = Client(state).status(job_id) if job_id else views.overview_doc(state, limit)
    if as_json:
        views.print_json(doc)
    elif job_id:
        views.print_job_head(doc)
        views.table("tasks", views.task_rows(doc["tasks"]), views.TASK_COLUMNS)
    else:
        views.table("jobs", doc["jobs"], ["job_id", "status", "scenario", "created", "goal"])
        queues = ", ".join(f"{role}={n}" for role, n in doc["queues"].items())
        views.console.print(f"active jobs: {doc['active']}; queued envelopes: {queues}")
        if not doc["jobs"] and (url := demo_url(Settings())):
            views.write_line(f"the demo's jobs are on its own Redis: REDIS_URL={url} redfleet")


@app.command()
def claims(as_json: JsonOpt = False) -> None:
    """Live claims: who owns which task, with which fencing token, for how long."""
    from . import views
    from .connection import open_state

    with open_state() as state:
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
    from . import views
    from .connection import open_state

    with open_state() as state:
        doc = views.workers_doc(views.visible_workers(state))
    if as_json:
        views.print_json(doc)
    else:
        rows = [{**w, "tasks": " ".join(w["tasks"])} for w in doc]
        columns = ["worker_id", "pid", "role", "host", "state", "busy", "slots", "tasks"]
        views.table("workers", rows, [*columns, "heartbeat_age_ms"])


@app.command("logs")
def logs_cmd(
    job_id: Annotated[
        str | None,
        typer.Argument(metavar="JOB_ID", help="A job id; without it, every job."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing new events: a job's until it ends, every job's until Ctrl-C.",
        ),
    ] = False,
    last: Annotated[int, typer.Option(min=0, help="How many past events to print first.")] = 100,
    all_events: Annotated[
        bool,
        typer.Option(
            "--all", help="Also list lease renewals (task.renewed; `status JOB` counts them)."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Events from Redis Streams, oldest first (one JSON object a line with --json).

    Without JOB_ID the global stream is read: it mirrors every job's events
    up to a heartbeat (a third of the lease) late, so the past events shown are
    the most recent by their time, in time order, and followed ones are shown
    as they reach it, which can be a little out of order between jobs. Lease
    renewals are hidden (and not counted in --last) unless --all: `status JOB`
    shows a count per task. With -f and JOB_ID the command ends once the job
    has ended, after its final events; without JOB_ID it runs until Ctrl-C.
    """
    from . import views
    from .api import RENEWED, Client
    from .connection import open_state

    def show(event: views.Event) -> None:
        line = json.dumps(event.to_json_dict()) if as_json else views.event_line(event)
        views.write_line(line)

    _check_job_id(job_id)
    hide = frozenset() if all_events else frozenset({RENEWED})
    with open_state() as state:
        if job_id:
            state.jobs.get(job_id)  # an unknown id is an error, not an empty log
        keep = None if job_id else state.visible_events()  # --tenant: its jobs' only
        past: list[views.Event] = []
        after = "$"
        if job_id and last:
            past = state.events.read(job_id, last=last, hide=hide)
            after = past[-1].id if past else "$"
        elif last:  # mirrored in batches: the most recent by time, not by stream order
            past, after = state.events.latest(last, hide=hide, keep=keep)
        gap = views.log_gap(state, job_id, past, last)
        if gap:
            print(f"redfleet: {gap}", file=sys.stderr)
        for event in past:
            show(event)
        if not follow:
            return
        if job_id:
            events = Client(state).follow(job_id, after=after, hide=hide)
        else:
            events = (
                e
                for e in state.events.follow(after=after)
                if e.event not in hide and (keep is None or keep(e))
            )
        for event in events:
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
    from shared_state.errors import JobFinished

    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    with open_state() as state:
        try:
            Client(state).cancel(job_id)
            already = False
        except JobFinished as exc:
            if exc.status != "cancelled":
                raise
            already = True
    if as_json:
        views.print_json({"job_id": job_id, "status": "cancelled", "already": already})
    else:
        print(f"{job_id} was already cancelled" if already else f"{job_id} cancelled")


_DURATION = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration_ms(text: str, option: str) -> int:
    """``90s``, ``30m``, ``24h``, ``7d`` in milliseconds; CoordinatorError naming the option."""
    number, unit = text[:-1], text[-1:].lower()
    if unit not in _DURATION or not re.fullmatch(r"[0-9]+", number) or int(number) <= 0:
        raise CoordinatorError(
            f"{option}: expected a duration like 90s, 30m, 24h or 7d, not {text!r}"
        )
    return int(number) * _DURATION[unit] * 1000


@app.command("resume")
def resume_cmd(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="A finished agents job.")],
    goal: Annotated[
        str | None, typer.Option("--goal", help="A new goal: every feature is redone.")
    ] = None,
    constraint: Annotated[
        list[str] | None,
        typer.Option(
            "--constraint",
            metavar="TEXT",
            help="The job's constraints from now on (repeat it; replaces the earlier ones). A "
            "feature a new one bears on is redone.",
        ),
    ] = None,
    max_evidence_age: Annotated[
        str | None,
        typer.Option(
            "--max-evidence-age",
            metavar="AGE",
            help="Re-verify a passing feature whose evidence is older, e.g. 24h.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the checks' verdicts; start nothing.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Show the new round's progress until it ends.")
    ] = False,
    timeout_s: WaitTimeoutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a new round of a finished job, from its records, after resumption checks.

    Each feature gets a verdict: redo (it does not pass, the goal changed, or
    a new constraint bears on it), reverify (its evidence is older than
    --max-evidence-age, was recorded under other criteria, or a workspace file
    was written after it) or keep. Redo and reverify features are failing
    again; the planner starts from these findings (not from a transcript) and
    dispatches fixes or the reviewer. Nothing is started when every feature
    keeps its evidence.
    """
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    if timeout_s is not None and not wait:
        raise CoordinatorError("--timeout: only with --wait")
    age_ms = _duration_ms(max_evidence_age, "--max-evidence-age") if max_evidence_age else None
    settings = _settings()
    with open_state(settings) as state:
        client = Client(state, settings=settings)
        found, stage = client.resume(
            job_id, goal=goal, constraints=constraint, max_evidence_age_ms=age_ms, dry_run=dry_run
        )
        doc = {**found.model_dump(mode="json"), "started": bool(stage), "stage": stage or None}
        if as_json and not (wait and stage):
            views.print_json(doc)
            return
        if not as_json:
            for check in found.checks:
                views.write_line(one_line(f"{check.feature_id} {check.verdict}: {check.why}"))
            if not stage:
                views.write_line(
                    "nothing started (--dry-run)" if dry_run
                    else "nothing to do: every feature keeps its evidence"
                )  # fmt: skip
                return
            views.write_line(f"{job_id}: a new round started at {stage}")
        if wait:
            _wait_for(client, job_id, timeout_s, as_json)


@app.command("handoff")
def handoff_cmd(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID")],
    markdown: Annotated[
        bool, typer.Option("--markdown", help="A page to read (the default without --json).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """What the next person or agent continues JOB_ID from, built from its records now.

    Goal and criteria version; features done, each with its evidence, and
    remaining; facts the user said or a check proved, apart from what an
    agent only assumed; decisions; tasks waiting for approval; live claims;
    artifacts; the journal's effects (idempotency keys); the next action. No
    model is asked. A job also stores one as an artifact when it ends.
    """
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    if markdown and as_json:
        raise CoordinatorError("--markdown and --json: choose one")
    with open_state() as state:
        package = Client(state).handoff(job_id)
    if as_json:
        views.print_json(package.model_dump(mode="json"))
    else:
        sys.stdout.write(multi_line(package.markdown()))


@app.command()
def retry(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="A failed job.")],
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Show its progress until it ends, as `submit --wait` does."),
    ] = False,
    timeout_s: WaitTimeoutOpt = None,
    token_budget: Annotated[
        int | None,
        typer.Option(
            "--token-budget", min=0, help="The job's token budget from now on (0: no limit)."
        ),
    ] = None,
    budget_usd: Annotated[
        float | None,
        typer.Option("--budget-usd", min=0, help="Its money budget from now on (0: no limit)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a failed job again from where it stopped, with the same job id.

    Its dead tasks (and those cancelled when it failed) get fresh attempts;
    tasks that succeeded are not run again, and a planner waiting on its
    coders goes on once they complete. Fix the cause first (a provider that
    was unreachable): a retry runs the same tasks. A job its budget stopped
    goes on with a raised one: --token-budget N, --budget-usd X.
    """
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    if timeout_s is not None and not wait:
        raise CoordinatorError("--timeout: only with --wait")
    settings = _settings()
    with open_state(settings) as state:
        client = Client(state, settings=settings)
        requeued = client.retry(job_id, token_budget=token_budget, budget_usd=budget_usd)
        if as_json and not wait:
            views.print_json({"job_id": job_id, "requeued": requeued})
            return
        if not as_json:
            views.write_line(
                f"{job_id}: {views.count(len(requeued), 'task')} given a fresh attempt"
            )
        if wait:
            _wait_for(client, job_id, timeout_s, as_json)


NoteOpt = Annotated[
    str | None, typer.Option("--note", metavar="TEXT", help="Reaches the task as a user turn.")
]


AskedOpt = Annotated[
    str,
    typer.Option(
        "--asked",
        metavar="DIGEST",
        help="Decide only if the task still asks the question with this digest "
        "(`status JOB --json`: the task's approval_for); it may have moved on to another.",
    ),
]


@app.command()
def approve(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID")],
    task_id: Annotated[str, typer.Argument(metavar="TASK_ID", help="The blocked task.")],
    note: NoteOpt = None,
    asked: AskedOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Let a blocked task go on (see its question in `redfleet status JOB_ID`).

    The approval is for the call the task asked about (a call of a tool the job
    gates with `submit --approve`, or an effect an earlier attempt left
    unsettled): that call is made. A different call asks again.
    """
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    with open_state() as state:
        Client(state).approve(job_id, task_id, note=note or "", asked=asked)
    if as_json:
        views.print_json({"job_id": job_id, "task_id": task_id, "decision": "approved"})
    else:
        views.write_line(f"{task_id} approved; it resumes on the next free worker")


@app.command()
def reject(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID")],
    task_id: Annotated[str, typer.Argument(metavar="TASK_ID", help="The blocked task.")],
    note: Annotated[
        str, typer.Option("--note", metavar="TEXT", help="Why (recorded as the task's error).")
    ],
    asked: AskedOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """End a blocked task: it is dead with your note, and its job fails (`retry` runs it again)."""
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    with open_state() as state:
        Client(state).reject(job_id, task_id, note=note, asked=asked)
    if as_json:
        views.print_json({"job_id": job_id, "task_id": task_id, "decision": "rejected"})
    else:
        views.write_line(f"{task_id} rejected; job {job_id} failed")


@app.command("export")
def export_cmd(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="The job whose files to write.")],
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="Where to write them (created if missing).")
    ],
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that exist.")] = False,
    verdicts: Annotated[
        bool,
        typer.Option("--verdicts", help=f"Also write the reviewer's verdicts to {VERDICTS_DIR}/."),
    ] = False,
    patch: Annotated[
        bool,
        typer.Option(
            "--patch",
            help="Write the job's changes as one unified diff, DIR/JOB_ID.patch "
            "(`git apply` reads it), instead of the files.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write a job's files to DIR: the workspace it was submitted with (if any) and what
    its coders changed.

    Paths came from a model: each is checked to land inside DIR (no `..`, no
    absolute path, no way out through a symlink) before anything is written,
    and no file is overwritten without --force.
    """
    from . import views
    from .connection import open_state
    from .export import export_job

    _check_job_id(job_id)
    with open_state() as state:
        done = export_job(state, job_id, directory, force=force, verdicts=verdicts, patch=patch)
    if as_json:
        views.print_json({"job_id": job_id, "dir": str(directory), "files": done.files})
        return
    for rel in done.files:
        views.write_line(one_line(f"wrote {directory / rel}"))
    views.write_line(
        f"{views.count(len(done.files), 'file')} written to {one_line(str(directory))}"
    )


@app.command("diff")
def diff_cmd(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="The job whose changes to show.")],
    stat: Annotated[
        bool, typer.Option("--stat", help="One line per changed file: kind, path, +/- lines.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """What a job changed against the workspace it was submitted with: a unified diff.

    Files added, modified and deleted, with `a/` and `b/` prefixes (`git apply`
    and `patch -p1` read it); a binary file is named, never shown. Without a
    workspace, every file the coders wrote shows as added. Nothing is written
    anywhere: `redfleet export JOB DIR --patch` saves it.
    """
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    with open_state() as state:
        diffs = Client(state).diff(job_id)
    if as_json:
        views.print_json({"job_id": job_id, "files": [dataclasses.asdict(d) for d in diffs]})
        return
    if stat or not diffs:
        for d in diffs:
            views.write_line(one_line(d.stat()))
        added, removed = sum(d.added for d in diffs), sum(d.removed for d in diffs)
        views.write_line(f"{views.count(len(diffs), 'file')} changed, +{added} -{removed}")
        return
    for d in diffs:  # the diff itself: the files' own text, escaped for the terminal
        sys.stdout.write(multi_line(d.text))


@app.command("apply")
def apply_cmd(
    job_id: Annotated[
        str, typer.Argument(metavar="JOB_ID", help="The job whose changes to apply.")
    ],
    repo: Annotated[
        Path,
        typer.Option(
            "--repo", metavar="PATH", help="The git repository the job's workspace came from."
        ),
    ],
    branch: Annotated[
        str,
        typer.Option("--branch", metavar="NAME", help="The new branch (default redfleet/JOB_ID)."),
    ] = "",
    three_way: Annotated[
        bool,
        typer.Option(
            "--three-way",
            help="If HEAD moved since the job's base, commit onto HEAD with a three-way merge.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Make a job's changes a new branch of PATH: one commit per passing feature.

    The branch starts at the commit the job's workspace was read at; each
    commit names its feature, the feature's check and the evidence the
    reviewer cited; changes no passing feature accounts for come last, in a
    commit that says so. Only the new branch is written: the working tree,
    the index and every other branch stay as they are. Review it with
    `git log -p BRANCH`, merge it as you would any branch.
    """
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    with open_state() as state:
        done = Client(state).apply(job_id, repo, branch=branch, three_way=three_way)
    if as_json:
        views.print_json(dataclasses.asdict(done))
        return
    for commit in done.commits:
        views.write_line(one_line(f"{commit.sha[:12]} {commit.message.splitlines()[0]}"))
    views.write_line(
        one_line(
            f"branch {done.branch}: {views.count(len(done.commits), 'commit')} on "
            f"{done.base[:12]}; `git -C {repo} log -p {done.branch}` shows them"
        )
    )


@app.command()
def artifacts(
    job_id: Annotated[
        str, typer.Argument(metavar="JOB_ID", help="The job whose artifacts to list.")
    ],
    as_json: JsonOpt = False,
) -> None:
    """A job's artifacts: what its tasks stored and passed around by id.

    Read one with `redfleet show ARTIFACT_ID`.
    """
    from . import views
    from .api import Client
    from .connection import open_state

    _check_job_id(job_id)
    with open_state() as state:
        refs = Client(state).artifacts(job_id)
    doc = [r.model_dump(mode="json") for r in refs]
    if as_json:
        views.print_json(doc)
    else:
        views.table(f"artifacts of {job_id}", doc, views.ARTIFACT_COLUMNS)


@app.command()
def show(
    artifact_id: Annotated[
        str, typer.Argument(metavar="ARTIFACT_ID", help="An artifact id, a-...")
    ],
    job: Annotated[
        str | None, typer.Option("--job", help="The job it belongs to (default: search all).")
    ] = None,
    lines: Annotated[
        str | None, typer.Option("--lines", metavar="A:B", help="Only lines A to B (1-based).")
    ] = None,
    raw: Annotated[
        bool,
        typer.Option("--raw", help="Print the content exactly, control characters included."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print an artifact's content (a file, a log, a summary, a report).

    Content comes from workers and models, so escape sequences (colours,
    cursor moves, window titles) are removed and other control characters
    but newline and tab are shown as escapes (\\x07), piped or not: it cannot
    drive your terminal. --raw prints it exactly; so does --json, as a string.
    """
    from . import views
    from .connection import open_state

    _check_job_id(job, "--job")
    span = views.parse_lines(lines) if lines else None
    with open_state() as state:
        job_id = job or state.locate_artifact(artifact_id)
        store = state.artifacts(job_id)
        ref, text = store.get(artifact_id), store.text(artifact_id)
    if span:
        text = "\n".join(text.splitlines()[span[0] - 1 : span[1]])
    if as_json:
        views.print_json({**ref.model_dump(mode="json"), "job_id": job_id, "content": text})
    else:
        text = text if raw else multi_line(text)
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


@app.command()
def dashboard(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Where it listens.")] = 8765,
    host: Annotated[
        str,
        typer.Option(
            metavar="HOST",
            help="The address to listen on; anything but loopback needs --token.",
        ),
    ] = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN",
            help="A token that reads every tenant, required with every request (default: "
            "REDFLEET_DASHBOARD_TOKEN, which other users cannot read in `ps`, as they can an "
            "option).",
        ),
    ] = None,
    tenant_tokens: Annotated[
        list[str] | None,
        typer.Option(
            "--tenant-token",
            metavar="TENANT=TOKEN",
            help="A token that reads one tenant's jobs only; repeat for more tenants "
            "(default: REDFLEET_DASHBOARD_TENANT_TOKENS, TENANT=TOKEN pairs comma-separated).",
        ),
    ] = None,
) -> None:
    """Serve a read-only live web page of the fleet on http://HOST:PORT/.

    Pages: jobs (status, tasks done of all, tokens, cost, age; filter by
    status); a job (its task tree with owners, fencing tokens and live lease
    countdowns, events as they come, features with verdicts and evidence,
    artifacts, usage, and plots of every model call's tokens, the context
    high-water, cache hits, cost over time and latency by role); workers
    (heartbeats, tasks, queues, claims). /metrics serves the Prometheus
    metrics of `up --metrics-port`; /api/... the JSON the pages poll each second.

    On a loopback address (the default) anyone on this machine may read it.
    Elsewhere a token is required: send it as `Authorization: Bearer TOKEN`,
    or open http://HOST:PORT/?token=TOKEN once, which keeps it in a cookie.
    A tenant's token shows that tenant's jobs only (another's is not found);
    `redfleet --tenant T dashboard` serves one tenant whatever the token.
    Nothing is fetched from the internet; Ctrl-C stops it.
    """
    from . import dashboard as web  # Starlette and uvicorn load for this command only
    from . import logs
    from .connection import open_state

    settings = _settings()
    logs.configure(settings.log_level)
    if token is None and settings.dashboard_token is not None:
        token = settings.dashboard_token.get_secret_value() or None
    if not tenant_tokens and settings.dashboard_tenant_tokens is not None:
        given = settings.dashboard_tenant_tokens.get_secret_value()
        tenant_tokens = [pair for pair in given.split(",") if pair.strip()]
    tokens = _dashboard_tokens(token, tenant_tokens or [])
    web.require_token(host, tokens)
    sock = web.bind(host, port)
    # Interactive retries: a request waits under 2 s for Redis; the page's next poll retries.
    with open_state(settings.model_copy(update={"tenant": None})) as state:
        where = f"http://{host}:{port}/" if ":" not in host else f"http://[{host}]:{port}/"
        print(f"redfleet: dashboard on {where} (Ctrl-C stops it)", file=sys.stderr)
        app_ = web.create_app(state, tokens=tokens, tenant=settings.tenant)
        web.server(app_, log_level=settings.log_level).run(sockets=[sock])


def _dashboard_tokens(token: str | None, pairs: list[str]) -> dict[str, str | None]:
    """Each token with the tenant it reads (None: every tenant); the tokens never appear
    in an error."""
    tokens: dict[str, str | None] = {token: None} if token else {}
    for n, pair in enumerate(pairs, start=1):
        tenant, sep, secret = pair.strip().partition("=")
        if not sep or not secret:
            raise CoordinatorError(f"--tenant-token #{n}: expected TENANT=TOKEN")
        try:
            check_name(tenant, "tenant")
        except ValueError as exc:
            raise CoordinatorError(f"--tenant-token #{n}: {exc}") from None
        if secret in tokens:
            raise CoordinatorError(
                f"--tenant-token #{n} ({tenant}): that token is already given to "
                f"{tokens[secret] or '--token'}: every token reads one scope"
            )
        tokens[secret] = tenant
    return tokens


@app.command()
def demo(
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=1, help="Give up after this many seconds.")
    ] = 180,
    as_json: JsonOpt = False,
) -> None:
    """Run a real job through a real fleet over a sample repository: a failing test fixed,
    a function added, and the result as a diff and a branch.

    The sample (a small shop's stock, shipped with redfleet) is laid out fresh
    as a git repository in $REDFLEET_HOME/demo/shop and imported as the job's
    workspace. The planner writes a feature list checked by the repository's
    own tests and dispatches two coders (one edits a file in place, the other
    asks a subagent for edge cases); the reviewer materializes the files and
    really runs the tests. The model is the `scripted` provider: it replays
    the shipped `sample` scenario and no model is called (`redfleet up
    --provider openai ...` runs a real one). It ends by printing the job's
    diff and the `redfleet apply` command that makes it a branch of that
    repository. It runs on an embedded Redis of its own in $REDFLEET_HOME/demo
    (never REDIS_URL), which keeps running so that `redfleet logs`, `diff`,
    `apply` and `show` can look at the job; it prints the REDIS_URL for that.
    Exits 0 when the job succeeded, 1 otherwise; --json prints the final status.
    """
    from . import logs, views
    from .demo import run_demo

    os.environ.setdefault("REDFLEET_LOG_LEVEL", "warning")  # inherited by the workers
    settings = _settings()
    logs.configure(settings.log_level)

    def started(job_id: str, url: str, choice: "ProviderChoice") -> None:
        if not as_json:
            described = markup_safe(redact(choice.describe()))
            views.console.print(
                f"redfleet demo: job {job_id} on {markup_safe(url)}\nprovider: {described}"
            )

    result = run_demo(settings, timeout_s=timeout_s, on_start=started)
    doc = result.doc
    if as_json:
        views.print_json(doc)
    else:
        views.print_outcome(doc)
        if result.diffs:
            _print_demo_diff(doc, result.diffs, result.is_repo)
    if doc["status"] != "succeeded":
        reason = one_line(redact(doc["reason"] or ""))
        print(f"redfleet: demo job ended {doc['status']}: {reason}", file=sys.stderr)
        raise typer.Exit(1)


def _print_demo_diff(doc: dict[str, object], diffs: list["FileDiff"], is_repo: bool) -> None:
    """The demo's ending: what the job changed, and how to take it into the repository."""
    from . import views

    env, rf = markup_safe(f"REDIS_URL={doc['redis_url']}"), markup_safe(views.program())
    views.console.print(f"\nthe job's changes to {markup_safe(str(doc['repo']))}:", highlight=False)
    for d in diffs:
        sys.stdout.write(multi_line(d.text))
    sys.stdout.flush()
    repo, job_id = markup_safe(str(doc["repo"])), doc["job_id"]
    if is_repo:
        views.console.print(
            f"Make them a branch of that repository, one commit per passing feature:\n"
            f"  {env} {rf} apply {job_id} --repo {repo}",
            highlight=False,
        )
    else:
        views.console.print(
            f"git is not installed: save them as a patch instead:\n"
            f"  {env} {rf} export {job_id} DIR --patch",
            highlight=False,
        )


@server_app.command("status")
def server_status(as_json: JsonOpt = False) -> None:
    """Is the embedded redis-server running, and where."""
    from . import views
    from .connection import Embedded

    info = Embedded(_settings().home).status()
    doc = {"running": True, **info} if info else {"running": False}
    if as_json:
        views.print_json(doc)
    else:
        print(f"running at {doc['url']} (pid {doc['pid']})" if info else "not running")


@server_app.command("stop")
def server_stop(
    force: Annotated[
        bool, typer.Option("--force", help="Stop it even while workers or clients are connected.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Stop the embedded redis-server (its data stays in REDFLEET_HOME).

    Refuses while workers or other clients are connected: a fleet keeps retrying
    the server's URL. The next start takes the same port again when it is free.
    """
    from . import views
    from .connection import Embedded

    stopped = Embedded(_settings().home).stop(force=force)
    if as_json:
        views.print_json({"stopped": stopped})
    else:
        print("stopped" if stopped else "not running")


def _validation_message(exc: "pydantic.ValidationError") -> str:
    """Each problem as ``where: what``; a setting's ``where`` is its environment variable."""
    from .settings import Settings

    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "input"
        if exc.title == Settings.__name__:
            where = Settings.env_var(where)
        parts.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _os_error_message(exc: OSError) -> str:
    """``path: reason``; a path in the home also names REDFLEET_HOME."""
    if not isinstance(exc.filename, str):
        return str(exc)
    home = _settings().home  # valid: every command has read its settings before any file
    if Path(exc.filename).is_relative_to(home):
        return f"REDFLEET_HOME={home}: cannot use {exc.filename}: {exc.strerror}"
    return f"{exc.filename}: {exc.strerror}"


def main() -> None:
    """Entry point: option errors are the CLI framework's; ours are one line, exit 2.

    The line is redacted and made one line: an error may quote a Redis URL
    with its password, or text from a model or a server.
    """
    collector.hold()  # until the command's state is open (``collector``)
    try:
        try:
            app(prog_name="redfleet")
        finally:
            collector.end()
            sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return
    except BrokenPipeError:
        # `redfleet status | head -1`: the reader has what it wanted; not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    except Exception as exc:
        message = _error_message(exc)
        if message is None:
            raise  # a bug: its traceback is the report
    print(f"redfleet: error: {one_line(redact(message))}", file=sys.stderr)
    sys.exit(2)


def _error_message(exc: Exception) -> str | None:
    """What a command that failed says, or None for an error that is not the user's to fix.

    A library's errors are looked for only where the library is loaded: an error cannot
    be of a class never imported, and a command that needs neither pydantic nor the Redis
    client (``--version``, ``--help``) loads neither.
    """
    from shared_state.errors import StateError

    pydantic_core = sys.modules.get("pydantic_core")
    redis = sys.modules.get("redis")
    if isinstance(exc, StateError | CoordinatorError):
        return str(exc)
    if pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError):
        return _validation_message(exc)
    if redis is not None and isinstance(exc, redis.RedisError):
        return f"Redis: {exc}"  # the server went away, or refused, mid-command
    if isinstance(exc, OSError):  # an unusable REDFLEET_HOME, an unreadable file
        return _os_error_message(exc)
    return None
