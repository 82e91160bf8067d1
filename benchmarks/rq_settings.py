"""RQ's settings one at a time: what each costs an envelope in commands, round trips and CPU.

The fleet keeps RQ as its queue (users' ``rq`` tools see it) but takes only
the bookkeeping it needs. This benchmark shows what each choice buys, from
RQ's defaults to the fleet's envelope, one step a row:

  rq defaults            ``SimpleWorker``; ``enqueue_call(f)`` (result kept 500 s,
                         a 180 s job timeout)
  result_ttl=0           results not kept: RQ deletes the job as it ends (shown
                         beside the next row, not built on: why the fleet keeps 10 s)
  result_ttl=10          the fleet's: a finished envelope is kept 10 s, then expires
  + the fleet's enqueue  no job timeout (the lease decides), a failure kept 1 h,
                         a description `rq info` shows
  slot, RQ's own paths   ``workers.slots.SlotWorker`` with each of its changes
                         undone: RQ's behaviour, the fleet's class (a check)
  + heartbeat throttled  RQ's extra worker heartbeats at most every 30 s, in one
                         round trip
  + state written once   "busy" and "idle" written once a job, not twice
  + suspension by tick   ``rq suspend`` looked for by the process's heartbeat, not
                         an EXISTS every turn of each slot's loop
  + start, end batched, no result
                         a job's start in one pipeline and its end in one MULTI,
                         without what an envelope has no use for: its result (a
                         stream of None), a second status write and job
                         heartbeat, its dependents' expiries (the fleet's
                         ``SlotWorker``: its envelope)
  + end with the next dequeue
                         the slot's own client (``Client``) sends the end MULTI in
                         the round trip of its next command; in the fleet the start
                         goes in the task's claim's (a no-op job makes no claim:
                         here it goes as the job ends, in a round trip of its own)

Each row enqueues N no-op jobs one by one and runs them through one
in-process worker in burst mode, on a private redis-server on a free port
(FLUSHALL before each run). Commands and round trips are the server's own
counters (``total_commands_processed``, ``total_reads_processed``) less the
harness's reads; Redis CPU is ``used_cpu_user + used_cpu_sys``; the worker's
CPU is its thread's (``time.thread_time``). A worker's fixed cost (its
registration, RQ's registry maintenance at start, its death) is measured by
a run with no jobs and taken off, so every number is per envelope. Each row
runs ``--repeat`` times; the medians are shown.

Run:  .venv/bin/python benchmarks/rq_settings.py [--json] [--jobs N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer
from rq.worker import BaseWorker

from shared_state import RedisServer
from shared_state.delivery import FAILURE_TTL_S, RESULT_TTL_S
from workers import slots

QUEUE = "bench.settings"
NOOP = f"{Path(__file__).stem}.noop"  # importable by the in-process worker


def noop() -> None:
    """The job: does nothing."""


@dataclass(frozen=True)
class Row:
    name: str
    holds: str  # what the change gives up, or why it is safe
    worker: Callable[[redis.Redis, Queue], BaseWorker]
    enqueue: dict[str, Any] = field(default_factory=dict)
    builds_on: bool = True  # measured against the row before it


def _simple(client: redis.Redis, queue: Queue) -> BaseWorker:
    return SimpleWorker([queue], connection=client, serializer=JSONSerializer)


# SlotWorker with its changes undone one by one, newest last: each class puts one back.
class _RQPaths(slots.SlotWorker):
    heartbeat = SimpleWorker.heartbeat
    set_state = SimpleWorker.set_state
    prepare_execution = SimpleWorker.prepare_execution
    prepare_job_execution = SimpleWorker.prepare_job_execution
    handle_execution_ended = SimpleWorker.handle_execution_ended
    handle_job_success = SimpleWorker.handle_job_success


class _Throttled(_RQPaths):
    heartbeat = slots.SlotWorker.heartbeat


class _StateOnce(_Throttled):
    set_state = slots.SlotWorker.set_state


def _slot(
    cls: type[slots.SlotWorker], *, tick: bool, carrying: bool = False
) -> Callable[..., BaseWorker]:
    def make(client: redis.Redis, queue: Queue) -> BaseWorker:
        return cls(
            [queue],
            # A slot's own client, as the fleet's (``Client``: it carries the end writes).
            connection=slots.slot_client(client, "bench-slot") if carrying else client,
            serializer=JSONSerializer,
            worker_ttl=slots.RQ_WORKER_TTL_S,
            stop=threading.Event(),
            waiting=threading.Event(),
            commands=False,
            # Set while `rq suspend` holds: the process's heartbeat looks (never, here).
            suspended=threading.Event() if tick else None,
        )

    return make


FLEET_ENQUEUE = {
    "result_ttl": RESULT_TTL_S,
    "timeout": -1,
    "failure_ttl": FAILURE_TTL_S,
    "description": "redfleet coder task t-1",
}
ROWS = (
    Row("rq defaults", "RQ as a user runs it", _simple),
    Row(
        "result_ttl=0",
        "not kept: `rq info` never shows it finished; RQ deletes it, walking every registry",
        _simple,
        {"result_ttl": 0},
        builds_on=False,
    ),
    Row(
        "result_ttl=10",
        "kept 10 s for `rq info`, then expires; the outcome is in the task's own hash",
        _simple,
        {"result_ttl": RESULT_TTL_S},
    ),
    Row(
        "+ the fleet's enqueue",
        "no SIGALRM (a slot thread cannot arm it): the lease decides when work is lost",
        _simple,
        FLEET_ENQUEUE,
    ),
    Row(
        "slot, RQ's own paths",
        "the fleet's class with its changes undone (a check: as the row above)",
        _slot(_RQPaths, tick=False),
        FLEET_ENQUEUE,
    ),
    Row(
        "+ heartbeat throttled",
        "every turn of the loop heartbeats anyway; the key lives worker_ttl + 60 s",
        _slot(_Throttled, tick=False),
        FLEET_ENQUEUE,
    ),
    Row(
        "+ state written once",
        "none: the value written twice was the same",
        _slot(_StateOnce, tick=False),
        FLEET_ENQUEUE,
    ),
    Row(
        "+ suspension by tick",
        "`rq suspend` seen within a heartbeat tick, not at the slot's next turn",
        _slot(_StateOnce, tick=True),
        FLEET_ENQUEUE,
    ),
    Row(
        "+ start, end batched, no result",
        "envelopes return None and have no callbacks or dependents: nothing they need",
        _slot(slots.SlotWorker, tick=True),
        FLEET_ENQUEUE,
    ),
    Row(
        "+ end with the next dequeue",
        "none: the end MULTI goes in the round trip of the slot's next command, before it "
        "(in the fleet the start goes in the task's claim's too; a no-op job has none)",
        _slot(slots.SlotWorker, tick=True, carrying=True),
        FLEET_ENQUEUE,
    ),
)


class Counters:
    """The server's counters, less the reads that take them (each INFO is one command)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.taken = 0

    def take(self) -> dict[str, float]:
        stats, cpu = self.client.info("stats"), self.client.info("cpu")
        self.taken += 2
        return {
            "commands": stats["total_commands_processed"] - self.taken,
            "round_trips": stats["total_reads_processed"] - self.taken,
            "redis_s": cpu["used_cpu_user"] + cpu["used_cpu_sys"],
        }


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


def run_once(client: redis.Redis, row: Row, jobs: int) -> dict[str, dict[str, float]]:
    """One row with ``jobs`` jobs: the enqueue's and the worker's costs (totals)."""
    client.flushall()
    counters = Counters(client)
    queue = Queue(QUEUE, connection=client, serializer=JSONSerializer)
    c0 = counters.take()
    for _ in range(jobs):
        queue.enqueue_call(NOOP, **row.enqueue)
    t1, c1 = time.thread_time(), counters.take()
    worker = row.worker(client, queue)
    worker.work(burst=True, logging_level="WARNING", with_scheduler=False)
    t2, c2 = time.thread_time(), counters.take()
    if worker.connection is not client:  # a slot's own client (``_slot``'s carrying rows)
        worker.connection.close()
    ran = int(client.hget(worker.key, "successful_job_count") or 0)
    if ran != jobs:
        raise RuntimeError(f"{row.name}: {ran} of {jobs} jobs ran")
    return {
        "enqueue": _delta(c1, c0),
        "work": {**_delta(c2, c1), "client_s": t2 - t1},
    }


def measure(client: redis.Redis, row: Row, jobs: int) -> dict[str, float]:
    """Per envelope: the run with ``jobs`` jobs less the worker's fixed cost (no jobs)."""
    fixed, full = run_once(client, row, 0), run_once(client, row, jobs)
    per = {}
    for part in ("enqueue", "work"):
        for k, v in full[part].items():
            per[f"{part}_{k}"] = (v - fixed[part][k]) / jobs
    return {
        "enqueue_commands": per["enqueue_commands"],
        "enqueue_round_trips": per["enqueue_round_trips"],
        "worker_commands": per["work_commands"],
        "worker_round_trips": per["work_round_trips"],
        "redis_us": 1e6 * (per["enqueue_redis_s"] + per["work_redis_s"]),
        "worker_cpu_us": 1e6 * per["work_client_s"],
    }


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so that NOOP imports
    rows = []
    with RedisServer() as server, redis.Redis.from_url(server.url) as client:
        version = client.info("server")["redis_version"]
        runs: dict[str, list[dict[str, float]]] = {row.name: [] for row in ROWS}
        for i in range(args.repeat):  # rows in turn, so that a slow spell hits every row
            for row in ROWS:
                console.print(f"run {i + 1}/{args.repeat}: {row.name}", style="dim")
                runs[row.name].append(measure(client, row, args.jobs))
    before: float | None = None  # the commands of the row the next one builds on
    for row in ROWS:
        median = {k: statistics.median(r[k] for r in runs[row.name]) for k in runs[row.name][0]}
        commands = median["enqueue_commands"] + median["worker_commands"]
        rows.append(
            {
                "row": row.name,
                "holds": row.holds,
                **{k: round(v, 2) for k, v in median.items()},
                "commands": round(commands, 2),
                "commands_change": None if before is None else round(commands - before, 2),
                "runs": runs[row.name],
            }
        )
        if row.builds_on:
            before = commands
    return {
        "benchmark": "rq_settings",
        "redis": {"version": version},
        "params": {"jobs": args.jobs, "repeat": args.repeat},
        "rows": rows,
    }


def print_table(doc: dict[str, Any], console: Console) -> None:
    p = doc["params"]
    table = Table(
        title=f"An envelope's cost, per RQ setting ({p['jobs']} no-op jobs, one worker, "
        f"median of {p['repeat']}; Redis {doc['redis']['version']})"
    )
    table.add_column("setting")
    for name in ("cmds", "Δ cmds", "enqueue cmds / trips", "worker cmds / trips", "Redis µs",
                 "worker µs"):  # fmt: skip
        table.add_column(name, justify="right")
    for r in doc["rows"]:
        change = r["commands_change"]
        table.add_row(
            r["row"],
            f"{r['commands']:.1f}",
            "" if change is None else f"{change:+.1f}",
            f"{r['enqueue_commands']:.1f} / {r['enqueue_round_trips']:.1f}",
            f"{r['worker_commands']:.1f} / {r['worker_round_trips']:.1f}",
            f"{r['redis_us']:.0f}",
            f"{r['worker_cpu_us']:.0f}",
        )
    console.print(table)
    console.print("Δ cmds: against the row above it (result_ttl=0: against RQ's defaults).")
    console.print("What each holds or gives up:")
    for r in doc["rows"]:
        console.print(f"  {r['row']}: {r['holds']}", markup=False, highlight=False)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="What each RQ setting costs an envelope: commands, round trips, CPU."
    )
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--jobs", type=int, default=500, help="jobs per run (default 500)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (default 3)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        parser.error("--jobs and --repeat: expected at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    console = Console(stderr=args.json)
    doc = run(args, console)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, console)


if __name__ == "__main__":
    main()
