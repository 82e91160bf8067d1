"""Failover drill: a fleet on a Sentinel deployment, its primary killed again and again.

Everything runs on loopback ports, as ``tests/sentinel.py`` starts it: a
primary, a replica and three sentinels (``redis-server --sentinel``, down
after 1 s), and ``redfleet up`` (a planner, two coders and a reviewer, four
slots each) with ``REDIS_URL=redis+sentinel://...``. Each durability mode in
turn, in one run, on a fresh deployment:

1. **Cost.** ``--cost-jobs`` noop jobs (five tasks each) submitted at once
   with no fault: per task, the primary's CPU time (``INFO cpu``) and the
   commands it ran (``INFO commandstats``), WAITs among them — server
   counters, not wall clock, on this shared machine.
2. **Drill.** Jobs submitted at ``--rate`` a second (noop, one in four slow:
   ~3 s a task, one in ``--agents-every`` an agents job replaying the
   scripted demo: its coders' ``write_file`` calls are journaled effects),
   while the primary is SIGKILLed ``--kills`` times and once
   paused (SIGSTOP) past the sentinels' down-after, ``--every`` s apart; after
   each, the old primary comes back as the new one's replica, as a process
   supervisor would bring it back. Then the submitting stops and the fleet
   drains for up to ``--drain`` s.

Every task is accounted from outside Redis: the jobs this process was told
were submitted, and the workers' own log lines (``task.claimed``,
``task.settled``: what each was told it claimed and completed;
``journal.applied``: every journaled effect it was told it made, logged once
its write was acknowledged). **Lost**: a submitted job whose record is gone;
**doubled**: a completion a worker was told succeeded more than once for one
task, or a journaled effect a worker was told it made more than once; **two
owners**: a claim's write accepted after another worker had claimed the task;
**stuck**: a job still unfinished after the drain.

Goals, with ``replicated``: 0 lost, 0 doubled, 0 two owners, 0 stuck across
at least five failovers. Without it the figures are measured, not judged.

A measurement, not a test: exit 0 whatever it finds. ``--json`` prints one
document; ``--quick`` is a short run (two failovers) for the tests.

Run:  .venv/bin/python benchmarks/failover.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the drill's deployment and fleet live beside the tests

from shared_state import JobSpec, NotFound, Scenario, State, StateError  # noqa: E402
from tests.processes import Up  # noqa: E402
from tests.sentinel import Deployment, account  # noqa: E402

MODES = ("default", "replicated")
TASKS_PER_JOB = 5  # noop, fanout 3: the planner, three coders, the reviewer
GOALS = {"lost": 0, "doubled": 0, "two_owners": 0, "stuck": 0}
FLEET = ("--planners", "1", "--coders", "2", "--reviewers", "1", "--concurrency", "4",
         "--lease-ms", "4000")  # fmt: skip


def _counters(deployment: Deployment) -> tuple[int, int, float]:
    """The primary's commands run so far, its WAITs, and its CPU seconds."""
    primary = deployment.direct()
    stats, cpu = primary.info("commandstats"), primary.info("cpu")
    total = sum(v["calls"] for v in stats.values())
    waits = stats.get("cmdstat_wait", {}).get("calls", 0)
    return total, waits, cpu["used_cpu_sys"] + cpu["used_cpu_user"]


def _finished(state: State, job_ids: list[str]) -> bool:
    try:
        return all(state.jobs.get(j).status.finished for j in job_ids)
    except (NotFound, StateError):
        return False


def _wait(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def run_mode(mode: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    deployment = Deployment()
    up = Up(deployment.url, "--durability", mode, *FLEET)
    state = State.connect(deployment.url, replicas=1 if mode == "replicated" else 0)
    try:
        if not _wait(lambda: len(up.logged("worker.started")) >= 4, 60):
            raise SystemExit("the fleet did not start")
        # 1. What acknowledged writes cost, with no fault.
        commands, waits, cpu = _counters(deployment)
        cost_jobs = [state.jobs.submit(JobSpec(goal="cost")).job_id for _ in range(args.cost_jobs)]
        _wait(lambda: _finished(state, cost_jobs), 120)
        after, waits_after, cpu_after = _counters(deployment)
        tasks = args.cost_jobs * TASKS_PER_JOB
        cost = {
            "redis_cpu_ms_per_task": round(1000 * (cpu_after - cpu) / tasks, 3),
            "commands_per_task": round((after - commands) / tasks, 1),
            "waits_per_task": round((waits_after - waits) / tasks, 1),
        }

        # 2. The drill.
        submitted: list[str] = []
        unconfirmed = [0]
        stop = threading.Event()

        def submit() -> None:
            n = 0
            while not stop.is_set():
                if args.agents_every and n % args.agents_every == args.agents_every - 1:
                    scenario = Scenario.AGENTS
                else:
                    scenario = Scenario.SLOW if n % 4 == 0 else Scenario.NOOP
                spec = JobSpec(goal=f"drill {n}", fanout=2, scenario=scenario)
                try:
                    submitted.append(state.jobs.submit(spec).job_id)
                except StateError:
                    unconfirmed[0] += 1  # never told it was submitted: not counted as lost
                n += 1
                stop.wait(1 / args.rate)

        submitter = threading.Thread(target=submit, daemon=True)
        submitter.start()
        gone = []
        for i in range(args.kills + 1):
            time.sleep(args.every)
            pause = i == args.kills  # the last one: paused past down-after, not killed
            gone.append(round(deployment.fail_over(pause=pause), 2))
            console.print(f"{mode}: failover {i + 1} ({'pause' if pause else 'kill'}), "
                          f"primary gone {gone[-1]} s")  # fmt: skip
        time.sleep(args.every)
        stop.set()
        submitter.join(60)
        _wait(lambda: _finished(state, submitted), args.drain)

        lost = stuck = succeeded = failed = 0
        for job_id in submitted:
            try:
                status = state.jobs.get(job_id).status
            except NotFound:
                lost += 1
                continue
            if not status.finished:
                stuck += 1
            elif status == "succeeded":
                succeeded += 1
            else:
                failed += 1
        told = account(line for _, line in list(up.lines))
        return {
            "journaled_effects": len(told.effects),
            "failovers": len(gone),
            "primary_gone_s": gone,
            "jobs_submitted": len(submitted),
            "submits_unconfirmed": unconfirmed[0],
            "succeeded": succeeded,
            "failed": failed,
            "lost": lost,
            "doubled": told.doubled,
            "two_owners": told.two_owners,
            "stuck": stuck,
            "workers_started": len(up.logged("fleet.worker_started")),
            "cost": cost,
        }
    finally:
        up.stop()
        state.client.close()
        deployment.stop()


def print_table(doc: dict[str, Any], console: Console) -> None:
    t = Table(title=f"failover drill: {doc['params']['kills']} kills and 1 pause of the "
                    "primary, Sentinel, one replica", title_justify="left")  # fmt: skip
    for col in ("", *MODES, "goal (replicated)"):
        t.add_column(col)
    rows = [
        ("failovers", "failovers", ">= 5"),
        ("jobs submitted (unconfirmed submits)", "jobs_submitted", ""),
        ("jobs succeeded / failed", "succeeded", ""),
        ("lost", "lost", "0"),
        ("journaled effects made (agents jobs)", "journaled_effects", ""),
        ("doubled (a task completed, or an effect made, twice)", "doubled", "0"),
        ("two owners at once", "two_owners", "0"),
        ("stuck after the drain", "stuck", "0"),
        ("worker processes started (4: none restarted)", "workers_started", ""),
    ]
    for name, key, goal in rows:
        cells = []
        for mode in MODES:
            m = doc[mode]
            if key == "jobs_submitted":
                cells.append(f"{m[key]} ({m['submits_unconfirmed']})")
            elif key == "succeeded":
                cells.append(f"{m['succeeded']} / {m['failed']}")
            else:
                cells.append(str(m[key]))
        t.add_row(name, *cells, goal)
    for name, key in (("cost: the primary's CPU ms per task, no fault", "redis_cpu_ms_per_task"),
                      ("cost: commands per task", "commands_per_task"),
                      ("cost: WAITs per task", "waits_per_task")):  # fmt: skip
        t.add_row(name, *(str(doc[m]["cost"][key]) for m in MODES), "")
    console.print(t)
    held = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in doc["passed"].items())
    console.print(f"goals held (replicated): {held}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    parser.add_argument("--kills", type=int, default=5, help="primaries killed, then one paused")
    parser.add_argument("--every", type=float, default=6.0, help="seconds between failovers")
    parser.add_argument("--rate", type=float, default=2.0, help="jobs submitted a second")
    parser.add_argument("--cost-jobs", type=int, default=40)
    parser.add_argument(
        "--agents-every", type=int, default=6, help="one job in N is an agents job (0: none)"
    )
    parser.add_argument("--drain", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.kills, args.every, args.cost_jobs, args.drain = 1, 4.0, 10, 90.0
    console = Console(stderr=args.json)
    doc: dict[str, Any] = {"params": vars(args), "goals": GOALS}
    for mode in MODES:
        doc[mode] = run_mode(mode, args, console)
    r = doc["replicated"]
    doc["passed"] = {
        **{k: r[k] == v for k, v in GOALS.items()},
        "failovers": r["failovers"] >= 5,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, console)


if __name__ == "__main__":
    main()
