"""The demo as a function: a real job through a real fleet over the shipped sample repository.

``run_demo`` is what `redfleet demo` does, without the printing: it lays out the
sample repository in ``$REDFLEET_HOME/demo/shop``, starts an embedded Redis of
its own there (never ``REDIS_URL``: no fleet of yours takes its tasks, nor it
yours), submits the job with the repository as its workspace, runs a fleet on
the ``scripted`` provider (the shipped ``sample`` scenario: no model is called)
until the job has finished or ``timeout_s`` has passed (then it is cancelled),
and returns the job's status document with what it made and its diff::

    from coordinator import Settings
    from coordinator.demo import run_demo

    result = run_demo(Settings(), timeout_s=180)
    print(result.doc["status"], [d.path for d in result.diffs])

The embedded server keeps running, so that `redfleet logs`, `diff`, `apply`
and `show` can look at the job (``result.url``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared_state import Scenario, State
from workers.llm import ProviderChoice, ProviderName

from . import sample_repo, views
from .api import Client
from .connection import Embedded, open_state
from .fleet import Fleet, FleetSpec, provider_env
from .patch import FileDiff
from .settings import Settings

GOAL = (
    "Fix total_units in shop/stock.py (tests/test_stock.py fails) and add "
    "restock(stock, name, units) in shop/restock.py, with tests"
)


@dataclass
class DemoRun:
    doc: dict[str, Any]  # `status JOB --json`'s document, its outcome, the fleet's report
    diffs: list[FileDiff]  # what the job changed (none unless it succeeded)
    is_repo: bool  # the sample was laid out as a git repository (`apply` can branch it)
    url: str  # the demo's own Redis


def run_demo(
    settings: Settings,
    *,
    timeout_s: float = 180,
    on_start: Callable[[str, str, ProviderChoice], object] | None = None,
) -> DemoRun:
    """Run the demo job to its end; ``on_start(job_id, redis_url, provider)`` once it is
    submitted, before the fleet starts."""
    choice = ProviderChoice(provider=ProviderName.SCRIPTED, script="sample")
    home = settings.home / "demo"
    url = Embedded(home).ensure()
    repo = home / "shop"
    is_repo = sample_repo.lay_out(repo)
    with open_state(settings, url, serving=True) as state:
        client = Client(state, settings=settings)
        workspace = client.import_workspace(repo)
        job_id = client.submit(GOAL, scenario=Scenario.AGENTS, workspace=workspace)
        if on_start is not None:
            on_start(job_id, url, choice)
        spec = FleetSpec(
            planners=1,
            coders=2,
            reviewers=1,
            lease_ms=settings.lease_ms,
            worker_env=provider_env(choice),
        )
        fleet = Fleet.from_settings(state, url, spec, settings)
        watcher = threading.Thread(
            target=_stop_when_finished, args=(state, job_id, fleet, timeout_s), daemon=True
        )
        watcher.start()
        report = fleet.run()
        doc = views.job_doc(state, state.jobs.get(job_id))
        doc["provider"] = choice.describe()
        doc["redis_url"] = url
        doc["redis_home"] = str(home)
        doc.update(views.outcome_doc(state, job_id))
        doc["events"] = len(state.events.read(job_id, last=10_000))
        doc["fleet"] = report.__dict__
        diffs = client.diff(job_id) if doc["status"] == "succeeded" else []
        doc["repo"] = str(repo)
        doc["diff"] = [dataclasses.asdict(d) for d in diffs]
    return DemoRun(doc, diffs, is_repo, url)


def _stop_when_finished(state: State, job_id: str, fleet: Fleet, timeout_s: float) -> None:
    """The demo's fleet serves until its own job has finished (others may share the Redis);
    past ``timeout_s`` the job is cancelled (through the job-finished hook, as any cancel)."""
    deadline = time.monotonic() + timeout_s
    try:
        while not fleet.stopping.is_set():
            if state.jobs.get(job_id).status.finished:
                return
            if time.monotonic() > deadline:
                Client(state).cancel(job_id, reason=f"demo timed out after {timeout_s:.0f} s")
                return
            fleet.stopping.wait(0.2)
    finally:
        fleet.request_stop()
