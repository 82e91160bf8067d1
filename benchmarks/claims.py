"""Claim benchmarks: redfleet's Lua claims against the alternatives, side by side in one run.

Everything runs on a private redis-server started on a free port (never the
machine's own Redis), stopped at the end. Measured:

1. Contention. N real queued tasks (children spawned by a real root task); P
   processes race over all of them in the same order (``--order shuffled``:
   each in its own order, which lowers contention), and for each task try to
   claim it and, if they won, complete it. Once with redfleet's
   Lua scripts (``State.tasks.claim`` / ``complete``), once with the optimistic
   WATCH/MULTI transactions of ``WatchTasks`` below, on fresh tasks. Rates are
   claim+complete cycles (= N) and claim attempts (= P x N) per second of wall
   time, from a shared start barrier to the last process done.
   ``lua_vs_watch`` = Lua cycles/s / WATCH cycles/s (goal >= 3).
2. Ceiling. P processes call EVALSHA of ``return 1`` C times each; P
   processes claim C fresh tasks each (a disjoint share per process) with
   ``State.tasks.claim``. ``claims_vs_evalsha`` = claims/s / EVALSHA calls/s
   (goal >= 0.5).
3. End to end. A ``Fleet`` of W worker processes runs K noop jobs (fanout 3:
   7 task executions each — 3 planner, 3 coder, 1 reviewer — counted from the
   ``task.claimed`` events), its roles split like that work (3 planners, 3
   coders, 1 reviewer, as a user would size it); W plain ``rq.SimpleWorker``
   processes on one queue run as many no-op RQ jobs. Both clocks start after every worker has
   registered (start-up is not counted) and stop at the last finish time
   recorded in Redis. ``fleet_vs_rq`` = fleet tasks/s / RQ jobs/s (goal >= 0.8).
4. Opening a run in a large job. A job's journal is one hash for all its
   tasks. In a job whose journal holds S entries (S tasks each claimed and
   journaled once, through ``ownerWrite``), M fresh tasks are claimed with
   their runs opened: the server's time in ``claimTask`` a claim
   (``commandstats``), when each task's entries are read by their names (a
   range of the journal's names), and, side by side, once one entry was
   written without its name (as a writer older than the names wrote them: the
   claim scans the job's journal, as every claim that opened a run did
   before). ``scan_vs_names`` = the second / the first.

For each phase the Redis command count and server CPU are recorded (and, end
to end, the workers' CPU from /proc) to show where the time goes per task.

Every phase runs ``--repeat`` times (default 3), in order; each ratio is taken
within a run, side by side, and the medians over the runs are reported (the
JSON keeps every run). On a small shared machine a single run can swing a
ratio by a fifth.

Run:  .venv/bin/python benchmarks/claims.py [--json] [--quick] [--repeat R]
          [--tasks N] [--calls C] [--jobs K] [--procs P]
          [--journal-sizes S,S] [--claims-opened M]

Goals are reported, never enforced: the exit code does not depend on them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue as queue_mod
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table
from rq import Queue, SimpleWorker, Worker
from rq.job import Job as RQJob
from rq.registry import FailedJobRegistry, FinishedJobRegistry
from rq.serializers import JSONSerializer

from coordinator import logs
from coordinator.fleet import Fleet, FleetSpec
from shared_state import (
    Child,
    EffectStatus,
    JobSpec,
    JournalEntry,
    RedisServer,
    Role,
    State,
    TaskNotFound,
    keys,
)

TOP = 8  # Redis commands listed per phase, most called first
GOALS = {"lua_vs_watch": 3.0, "claims_vs_evalsha": 0.5, "fleet_vs_rq": 0.8}
RQ_QUEUE = "bench.noop"
NOOP = f"{Path(__file__).stem}.noop"  # importable by the --rq-worker processes
LEASE_MS = 600_000
FLEET = FleetSpec(planners=3, coders=3, reviewers=1, lease_ms=10_000, burst=False)
FINISHED = {b"succeeded", b"failed", b"cancelled"}


def noop() -> None:
    """The plain RQ job: does nothing."""


# -- the WATCH/MULTI alternative ---------------------------------------------------


class WatchTasks:
    """Claim and complete as optimistic transactions: WATCH, read, MULTI ... EXEC.

    The same work as the Lua scripts' main paths, so that the two compare like
    for like: the claim checks the job's status and the lease on Redis time and
    writes status, token, owner, lease, both indexes and an event; the
    completion checks the token and the job, writes the task and an event, and
    does the fan-in — decrements the parent's pending counter and re-queues
    the parent at zero. (The rarely taken branches — an expired-lease takeover,
    a fenced write's event — are left out, in WATCH's favour.) Any write to a
    watched key between the reads and EXEC aborts the transaction: it is
    retried, and counted.
    """

    def __init__(self, client: redis.Redis, job_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self.job_key = keys.job(job_id)
        self.events = keys.job_events(job_id)
        self.retries = 0

    @staticmethod
    def _now(pipe: redis.client.Pipeline) -> int:
        sec, usec = pipe.time()
        return sec * 1000 + usec // 1000

    def claim(self, task_id: str, worker: str, lease_ms: int) -> int | None:
        """The new fencing token, or None when the task is not claimable."""
        key = keys.task(self.job_id, task_id)
        with self.client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key, self.job_key)
                    status, token, lease = pipe.hmget(key, "status", "token", "lease_until")
                    if status is None:
                        raise TaskNotFound(task_id)
                    if pipe.hget(self.job_key, "status") in FINISHED:
                        return None
                    now = self._now(pipe)
                    if status != b"queued" and not (status == b"claimed" and int(lease) <= now):
                        return None
                    pipe.multi()
                    pipe.hset(
                        key,
                        mapping={
                            "status": "claimed",
                            "owner": worker,
                            "lease_until": now + lease_ms,
                            "claimed_ms": now,
                            "token": int(token) + 1,
                        },
                    )
                    pipe.zadd(keys.leases(self.job_id), {task_id: now + lease_ms})
                    pipe.zrem(keys.queued(self.job_id), task_id)
                    pipe.xadd(
                        self.events,
                        {
                            "event": "task.claimed",
                            "task_id": task_id,
                            "worker": worker,
                            "token": int(token) + 1,
                        },
                        maxlen=10_000,
                        approximate=True,
                    )
                    pipe.execute()
                    return int(token) + 1
                except redis.WatchError:
                    self.retries += 1

    def complete(self, task_id: str, token: int, worker: str) -> bool:
        """False when fenced (the task is no longer claimed with ``token``)."""
        key = keys.task(self.job_id, task_id)
        with self.client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key, self.job_key)
                    status, current, parent_id = pipe.hmget(key, "status", "token", "parent_id")
                    if status != b"claimed" or int(current or 0) != token:
                        return False
                    if pipe.hget(self.job_key, "status") in FINISHED:
                        return False
                    parent_key = keys.task(self.job_id, parent_id.decode())
                    pipe.watch(parent_key)
                    pending, parent_status = pipe.hmget(parent_key, "pending", "status")
                    now = self._now(pipe)
                    pipe.multi()
                    pipe.hset(
                        key, mapping={"status": "succeeded", "lease_until": 0, "finished_ms": now}
                    )
                    pipe.zrem(keys.leases(self.job_id), task_id)
                    pipe.xadd(
                        self.events,
                        {"event": "task.succeeded", "task_id": task_id, "worker": worker},
                        maxlen=10_000,
                        approximate=True,
                    )
                    left = int(pending) - 1
                    pipe.hset(parent_key, "pending", left)
                    if left == 0 and parent_status == b"waiting":
                        pipe.hset(parent_key, mapping={"status": "queued", "queued_ms": now})
                        pipe.zadd(keys.queued(self.job_id), {parent_id.decode(): now})
                    pipe.execute()
                    return True
                except redis.WatchError:
                    self.retries += 1


# -- racing processes -------------------------------------------------------------


def _race_lua(url: str, job_id: str, task_ids: list[str]) -> Callable[[], dict[str, int]]:
    state = State.connect(url)
    worker = f"lua-{os.getpid()}"

    def work() -> dict[str, int]:
        won = 0
        for task_id in task_ids:
            claimed = state.tasks.claim(job_id, task_id, worker, LEASE_MS)
            if claimed is not None:
                state.tasks.complete(claimed.claim, claimed.task.parent_id, "ok")
                won += 1
        return {"won": won, "attempts": len(task_ids), "retries": 0}

    return work


def _race_watch(url: str, job_id: str, task_ids: list[str]) -> Callable[[], dict[str, int]]:
    store = WatchTasks(redis.Redis.from_url(url), job_id)
    worker = f"watch-{os.getpid()}"

    def work() -> dict[str, int]:
        won = 0
        for task_id in task_ids:
            token = store.claim(task_id, worker, LEASE_MS)
            if token is not None and store.complete(task_id, token, worker):
                won += 1
        return {"won": won, "attempts": len(task_ids), "retries": store.retries}

    return work


def _claim_only(url: str, job_id: str, task_ids: list[str]) -> Callable[[], dict[str, int]]:
    state = State.connect(url)
    worker = f"claim-{os.getpid()}"

    def work() -> dict[str, int]:
        won = sum(state.tasks.claim(job_id, t, worker, LEASE_MS) is not None for t in task_ids)
        return {"won": won, "attempts": len(task_ids), "retries": 0}

    return work


def _evalsha(url: str, sha: str, calls: int) -> Callable[[], dict[str, int]]:
    client = redis.Redis.from_url(url)

    def work() -> dict[str, int]:
        for _ in range(calls):
            client.evalsha(sha, 0)
        return {"won": calls, "attempts": calls, "retries": 0}

    return work


def _child(make: Callable[..., Any], args: tuple, barrier: Any, out: Any) -> None:
    """Set up, wait for every process at the barrier, work, report the times."""
    try:
        work = make(*args)
        barrier.wait(timeout=60)
        start = time.monotonic()  # system-wide on Linux: comparable across processes
        counts = work()
        out.put({**counts, "start": start, "end": time.monotonic()})
    except Exception as exc:
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def _race(make: Callable[..., Any], per_proc: list[tuple], timeout_s: float = 120) -> dict:
    """Run one process per argument tuple; totals and wall time (barrier to last done)."""
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    barrier, out = ctx.Barrier(len(per_proc)), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(make, a, barrier, out)) for a in per_proc]
    results: list[dict] = []
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        while len(results) < len(procs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{make.__name__}: processes did not finish in {timeout_s}s")
            try:
                results.append(out.get(timeout=0.5))
            except queue_mod.Empty:
                continue
            if "error" in results[-1]:
                raise RuntimeError(f"{make.__name__} process failed: {results[-1]['error']}")
        for p in procs:
            p.join(timeout=10)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    totals = {k: sum(r[k] for r in results) for k in ("won", "attempts", "retries")}
    return {**totals, "wall_s": wall}


# -- measuring Redis and processes ---------------------------------------------------


class Probe:
    """Redis commands and CPU (server, and given pids from /proc) between start and stop.

    Command counts include the commands that scripts run (commandstats counts both).
    """

    def __init__(self, client: redis.Redis, pids: list[int] | None = None) -> None:
        self.client = client
        self.pids = pids or []

    def _cpu(self) -> tuple[float, float]:
        info = self.client.info("cpu")
        server = info["used_cpu_sys"] + info["used_cpu_user"]
        return server, sum(_proc_cpu_s(pid) for pid in self.pids)

    def start(self) -> Probe:
        self.client.config_resetstat()
        self._cpu0 = self._cpu()
        return self

    def stop(self) -> dict[str, Any]:
        server, workers = self._cpu()
        stats = self.client.info("commandstats")
        calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
        top = sorted(calls.items(), key=lambda kv: -kv[1])[:TOP]
        doc = {
            "redis_cmds": sum(calls.values()),
            "redis_cpu_s": round(server - self._cpu0[0], 3),
            "top_cmds": dict(top),
        }
        if self.pids:
            doc["worker_cpu_s"] = round(workers - self._cpu0[1], 3)
        return doc


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc); 0 when unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for(
    condition: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.02
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")


def _redis_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return sec * 1000 + usec // 1000


# -- the phases ------------------------------------------------------------------------


def fresh_tasks(state: State, n: int) -> tuple[str, list[str]]:
    """A job whose claimed root spawned ``n`` queued coder tasks; (job id, task ids)."""
    job = state.jobs.submit(JobSpec(goal="benchmark: claims", fanout=1))
    root = state.tasks.claim(job.job_id, job.root_task, "bench-setup", LEASE_MS)
    if root is None:
        raise RuntimeError(f"could not claim the root task of {job.job_id}")
    children = [Child(Role.CODER, f"bench {i}") for i in range(n)]
    ids = state.tasks.spawn(root.claim, "bench", children)
    state.client.delete(*(q.key for q in state.delivery.queues.values()))  # no envelopes
    return job.job_id, ids


def bench_contention(state: State, url: str, args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for name, make in (("lua", _race_lua), ("watch", _race_watch)):
        job_id, ids = fresh_tasks(state, args.tasks)
        if args.order == "same":
            orders = [ids] * args.procs
        else:
            orders = [random.Random(args.seed + i).sample(ids, len(ids)) for i in range(args.procs)]
        probe = Probe(state.client).start()
        res = _race(make, [(url, job_id, order) for order in orders])
        res["redis"] = probe.stop()
        if res["won"] != args.tasks:
            res["warning"] = f"{res['won']} of {args.tasks} tasks completed"
        out[name] = res
    return out


def bench_ceiling(state: State, url: str, args: argparse.Namespace) -> dict[str, Any]:
    sha = state.client.script_load("return 1")
    probe = Probe(state.client).start()
    evalsha = _race(_evalsha, [(url, sha, args.calls)] * args.procs)
    evalsha["redis"] = probe.stop()
    job_id, ids = fresh_tasks(state, args.calls * args.procs)  # as many calls as EVALSHA's
    probe = Probe(state.client).start()
    claims = _race(_claim_only, [(url, job_id, ids[i :: args.procs]) for i in range(args.procs)])
    claims["redis"] = probe.stop()
    return {"evalsha": evalsha, "claim": claims}


def bench_fleet(state: State, url: str, args: argparse.Namespace) -> dict[str, Any]:
    state.client.flushdb()
    workers = len(FLEET.roles())
    fleet = Fleet(State.connect(url), url, FLEET, drain_timeout_s=10)
    thread = threading.Thread(target=fleet.run, name="bench-fleet", daemon=True)
    thread.start()
    try:
        _wait_for(
            lambda: (
                len(state.workers.list()) >= workers
                and len(Worker.all(connection=state.client)) >= workers
            ),
            60,
            "the fleet's workers to register",
        )
        slots = [(s.role.value, s.process.pid) for s in fleet.slots if s.process]
        probe = Probe(state.client, [pid for _, pid in slots]).start()
        cpu0 = [_proc_cpu_s(pid) for _, pid in slots]
        start_ms = _redis_ms(state.client)
        spec = JobSpec(goal="benchmark: noop job", fanout=args.fanout)
        job_ids = [state.jobs.submit(spec).job_id for _ in range(args.jobs)]

        pending, done, polled = set(job_ids), {}, 0

        def all_finished() -> bool:
            # Only unfinished jobs are read, rarely: the clock stops at Redis' finished_ms.
            nonlocal polled
            ids = sorted(pending)
            pipe = state.client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hmget(keys.job(job_id), "status", "finished_ms")
            polled += len(ids)
            for job_id, row in zip(ids, pipe.execute(), strict=True):
                if row[0] in FINISHED:
                    done[job_id] = row
                    pending.discard(job_id)
            return not pending

        _wait_for(all_finished, 90, "the fleet to finish every job", every_s=0.2)
        redis_doc = probe.stop()
        by_role: dict[str, float] = {}
        for (role, pid), before in zip(slots, cpu0, strict=True):
            by_role[role] = round(by_role.get(role, 0) + _proc_cpu_s(pid) - before, 3)
    finally:
        fleet.request_stop()
        thread.join(timeout=30)
    redis_doc["redis_cmds"] -= polled
    redis_doc["bench_poll_cmds"] = polled
    wall = (max(int(r[1]) for r in done.values()) - start_ms) / 1000
    events = [e for j in job_ids for e in state.events.read(j, last=100_000)]
    claimed = [e for e in events if e.event == "task.claimed"]
    executions = len(claimed)
    roles = [(e.worker or "").split("-", 1)[0] for e in claimed]  # worker ids start with a role
    per_role = {r.value: roles.count(r.value) for r in Role}
    failed = sum(r[0] != b"succeeded" for r in done.values())
    return {
        "jobs": args.jobs,
        "failed_jobs": failed,
        "tasks": executions,
        "tasks_by_role": per_role,
        "fenced_events": sum(e.event == "task.fenced" for e in events),
        "worker_cpu_s_by_role": by_role,
        "wall_s": wall,
        "workers": workers,
        "redis": redis_doc,
    }


def bench_rq(state: State, url: str, args: argparse.Namespace, n_jobs: int) -> dict[str, Any]:
    state.client.flushdb()
    command = [sys.executable, str(Path(__file__).resolve()), "--rq-worker", "--url", url]
    workers = len(FLEET.roles())
    procs = [subprocess.Popen(command, stdin=subprocess.DEVNULL) for _ in range(workers)]
    try:
        _wait_for(
            lambda: len(Worker.all(connection=state.client)) >= workers,
            60,
            "the RQ workers to register",
        )
        rq_queue = Queue(RQ_QUEUE, connection=state.client, serializer=JSONSerializer)
        finished = FinishedJobRegistry(queue=rq_queue)
        failed = FailedJobRegistry(queue=rq_queue)
        probe = Probe(state.client, [p.pid for p in procs]).start()
        start_ms = _redis_ms(state.client)
        datas = [
            Queue.prepare_data(NOOP, timeout=-1, result_ttl=600, failure_ttl=3600)
            for _ in range(n_jobs)
        ]
        jobs = rq_queue.enqueue_many(datas)
        _wait_for(
            lambda: finished.count + failed.count >= n_jobs,
            90,
            "the RQ workers to finish",
            every_s=0.2,
        )
        redis_doc = probe.stop()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    ended = [
        j.ended_at
        for j in RQJob.fetch_many([j.id for j in jobs], state.client, JSONSerializer)
        if j and j.ended_at
    ]
    wall = (max(e.timestamp() for e in ended) * 1000 - start_ms) / 1000
    return {
        "jobs": n_jobs,
        "failed_jobs": failed.count,
        "wall_s": wall,
        "workers": workers,
        "redis": redis_doc,
    }


def rq_worker(url: str) -> None:
    """Body of a ``--rq-worker`` process: a plain SimpleWorker on the benchmark queue."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so that NOOP imports
    client = redis.Redis.from_url(url)
    rq_queue = Queue(RQ_QUEUE, connection=client, serializer=JSONSerializer)
    worker = SimpleWorker([rq_queue], connection=client, serializer=JSONSerializer)
    worker.work(logging_level="WARNING", with_scheduler=False)


# -- the report --------------------------------------------------------------------


def _rate(count: float, wall_s: float) -> float:
    return round(count / wall_s, 1) if wall_s > 0 else 0.0


def _per(doc: dict[str, Any], n: int) -> dict[str, float]:
    red = doc["redis"]
    per = {"redis_cmds": red["redis_cmds"] / n, "redis_cpu_ms": red["redis_cpu_s"] * 1000 / n}
    if "worker_cpu_s" in red:
        per["worker_cpu_ms"] = red["worker_cpu_s"] * 1000 / n
    return {k: round(v, 3) for k, v in per.items()}


def summarize_run(res: dict[str, Any]) -> dict[str, Any]:
    """One run's rates and ratios, each ratio from measurements taken side by side."""
    lua, watch = res["contention"]["lua"], res["contention"]["watch"]
    evalsha, claim = res["ceiling"]["evalsha"], res["ceiling"]["claim"]
    fleet, rq = res["fleet"], res["rq"]
    rates = {
        "lua_cycles_per_s": _rate(lua["won"], lua["wall_s"]),
        "lua_attempts_per_s": _rate(lua["attempts"], lua["wall_s"]),
        "watch_cycles_per_s": _rate(watch["won"], watch["wall_s"]),
        "watch_attempts_per_s": _rate(watch["attempts"], watch["wall_s"]),
        "watch_retries": watch["retries"],
        "evalsha_calls_per_s": _rate(evalsha["won"], evalsha["wall_s"]),
        "claims_per_s": _rate(claim["won"], claim["wall_s"]),
        "fleet_tasks_per_s": _rate(fleet["tasks"], fleet["wall_s"]),
        "fleet_jobs_per_s": _rate(fleet["jobs"], fleet["wall_s"]),
        "rq_jobs_per_s": _rate(rq["jobs"], rq["wall_s"]),
    }

    def ratio(a: str, b: str) -> float:
        return round(rates[a] / rates[b], 3) if rates[b] else 0.0

    per_unit = {
        "lua_per_attempt": _per(lua, lua["attempts"]),
        "watch_per_attempt": _per(watch, watch["attempts"]),
        "evalsha_per_call": _per(evalsha, evalsha["won"]),
        "claim_per_claim": _per(claim, claim["won"]),
        "fleet_per_task": _per(fleet, max(fleet["tasks"], 1)),
        "rq_per_job": _per(rq, rq["jobs"]),
    }
    return {
        "journal": res["journal"],
        "lua_vs_watch": ratio("lua_cycles_per_s", "watch_cycles_per_s"),
        "claims_vs_evalsha": ratio("claims_per_s", "evalsha_calls_per_s"),
        "fleet_vs_rq": ratio("fleet_tasks_per_s", "rq_jobs_per_s"),
        "rates": rates,
        "per_unit": per_unit,
        "raw": res,
    }


def summarize(runs: list[dict[str, Any]], params: dict[str, Any], version: str) -> dict[str, Any]:
    """The medians over the runs: of each ratio, each rate and each per-unit figure."""

    def median_of(pick: Callable[[dict[str, Any]], float]) -> float:
        return round(statistics.median(pick(r) for r in runs), 3)

    first = runs[0]
    return {
        **{name: median_of(lambda r, n=name: r[n]) for name in GOALS},
        "rates": {k: median_of(lambda r, k=k: r["rates"][k]) for k in first["rates"]},
        "per_unit": {
            unit: {k: median_of(lambda r, u=unit, k=k: r["per_unit"][u][k]) for k in fields}
            for unit, fields in first["per_unit"].items()
        },
        "journal": {
            size: {k: median_of(lambda r, s=size, k=k: r["journal"][s][k]) for k in fields}
            for size, fields in first["journal"].items()
        },
        "params": params,
        "redis_version": version,
        "goals": GOALS,
        "runs": runs,
    }


def print_table(doc: dict[str, Any], console: Console) -> None:
    r, p = doc["rates"], doc["params"]
    runs = f"median of {p['repeat']} run(s)"
    table = Table(title=f"redfleet claims benchmark (redis {doc['redis_version']}, {runs})")
    for col in ("measurement", "ops/s", "detail"):
        table.add_column(col, justify="right" if col == "ops/s" else "left")
    procs, w = p["procs"], p["workers"]
    rows = [
        (f"Lua claim+complete, {procs} procs", "lua_cycles_per_s",
         f"{r['lua_attempts_per_s']:,.0f} attempts/s, {p['tasks']} tasks"),
        (f"WATCH/MULTI claim+complete, {procs} procs", "watch_cycles_per_s",
         f"{r['watch_attempts_per_s']:,.0f} attempts/s, {r['watch_retries']} retries"),
        (f"EVALSHA 'return 1', {procs} procs", "evalsha_calls_per_s", f"{p['calls']} calls/proc"),
        (f"Lua claim only, {procs} procs", "claims_per_s",
         f"{p['calls']} tasks/proc, each claimed once"),
        (f"fleet noop tasks, {w} workers", "fleet_tasks_per_s",
         f"{p['jobs']} jobs = {doc['runs'][0]['raw']['fleet']['tasks']} task executions"),
        (f"plain RQ no-op jobs, {w} workers", "rq_jobs_per_s", "SimpleWorker, one queue"),
    ]  # fmt: skip
    for name, key, detail in rows:
        table.add_row(name, f"{r[key]:,.0f}", detail)
    table.add_section()
    for name, goal in doc["goals"].items():
        value = doc[name]
        verdict = "[green]PASS[/]" if value >= goal else "[red]MISS[/]"
        each = " ".join(f"{run[name]:.2f}" for run in doc["runs"])
        table.add_row(name, f"{value:.2f}", f"goal >= {goal}  {verdict}  runs: {each}")
    console.print(table)
    per = Table(title="per unit (Redis commands, Redis CPU ms, worker CPU ms)")
    for col in ("unit", "redis cmds", "redis cpu ms", "worker cpu ms"):
        per.add_column(col)
    for unit, v in doc["per_unit"].items():
        worker = v.get("worker_cpu_ms")
        per.add_row(
            unit,
            f"{v['redis_cmds']:.2f}",
            f"{v['redis_cpu_ms']:.3f}",
            "-" if worker is None else f"{worker:.2f}",
        )
    console.print(per)
    opened = Table(title=f"opening a run in a large job ({p['claims_opened']} claims each)")
    for col in ("journal entries", "by names µs/claim", "scanning µs/claim", "scan / names"):
        opened.add_column(col, justify="right")
    for size, v in doc["journal"].items():
        opened.add_row(f"{int(size):,}", f"{v['names_us']:.1f}", f"{v['scan_us']:.1f}",
                       f"{v['scan_vs_names']:.2f}")  # fmt: skip
    console.print(opened)


def _sizes(text: str) -> list[int]:
    try:
        return [_positive(part) for part in text.split(",")]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"expected sizes like 100,1000: {exc}") from None


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    parser.add_argument("--tasks", type=_positive, help="tasks per contention run (default 2000)")
    parser.add_argument("--procs", type=_positive, default=8, help="racing processes (default 8)")
    parser.add_argument(
        "--calls", type=_positive, help="EVALSHA calls, and claims, per process (default 1000)"
    )
    parser.add_argument("--jobs", type=_positive, help="fleet jobs (default 100)")
    parser.add_argument("--fanout", type=_positive, default=3, help="coders per fleet job")
    parser.add_argument(
        "--order",
        choices=("same", "shuffled"),
        default="same",
        help="task order of the racing processes (default: same, the most contention)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the shuffled orders")
    parser.add_argument(
        "--repeat", type=_positive, help="runs of every phase; medians are reported (default 3)"
    )
    parser.add_argument(
        "--journal-sizes",
        type=_sizes,
        help="journal entries of the large jobs runs are opened in (default 100,1000,5000)",
    )
    parser.add_argument(
        "--claims-opened", type=_positive, help="claims measured per large job (default 200)"
    )
    parser.add_argument("--rq-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = (
        (300, 250, 10, 1, [100, 1000], 50)
        if args.quick
        else (2000, 1000, 100, 3, [100, 1000, 5000], 200)
    )
    names = ("tasks", "calls", "jobs", "repeat", "journal_sizes", "claims_opened")
    for name, default in zip(names, defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


def _claim_us(state: State, job_id: str, task_ids: list[str]) -> float:
    """The server's µs inside ``claimTask`` per claim, claiming ``task_ids`` with their runs
    opened (``commandstats``: the scripts' own time, not the round trips')."""
    state.client.config_resetstat()
    for task_id in task_ids:
        if state.tasks.claim(job_id, task_id, "bench", LEASE_MS, open_run=_no_reads) is None:
            raise RuntimeError(f"could not claim {task_id}")
    stats = state.client.info("commandstats")["cmdstat_evalsha"]
    return round(stats["usec"] / stats["calls"], 1)


def _no_reads(job: object) -> Callable[[object], None]:
    return lambda pipe: None  # the run is opened; nothing read outside the job


def bench_journal(state: State, args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    fresh = args.claims_opened
    for size in args.journal_sizes:
        state.client.flushdb()
        job_id, ids = fresh_tasks(state, size + 2 * fresh)
        records = state.records(job_id)
        for task_id in ids[:size]:
            got = state.tasks.claim(job_id, task_id, "bench-setup", LEASE_MS)
            if got is None:
                raise RuntimeError(f"could not claim {task_id}")
            entry = JournalEntry(key=f"{task_id}:bench#0:start", task_id=task_id, tool="bench",
                                 status=EffectStatus.DONE)  # fmt: skip
            records.write(got.claim, journal=[entry])
        names = _claim_us(state, job_id, ids[size : size + fresh])
        older = JournalEntry(key=f"{ids[0]}:bench#1:start", task_id=ids[0], tool="bench",
                             status=EffectStatus.DONE)  # fmt: skip
        state.client.hset(keys.journal(job_id), older.key, older.model_dump_json())
        scan = _claim_us(state, job_id, ids[size + fresh :])
        out[str(size)] = {"names_us": names, "scan_us": scan,
                          "scan_vs_names": round(scan / names, 2) if names else 0.0}  # fmt: skip
    return out


def run_once(
    state: State, url: str, args: argparse.Namespace, console: Console, run: int
) -> dict[str, Any]:
    """Every phase once, in order; the ratios of one run compare phases minutes apart at most."""
    res: dict[str, Any] = {}
    with console.status(f"run {run}/{args.repeat}: contention, Lua vs WATCH/MULTI"):
        res["contention"] = bench_contention(state, url, args)
    with console.status(f"run {run}/{args.repeat}: ceiling, EVALSHA and single claims"):
        res["ceiling"] = bench_ceiling(state, url, args)
    with console.status(f"run {run}/{args.repeat}: end to end, fleet"):
        res["fleet"] = bench_fleet(state, url, args)
    with console.status(f"run {run}/{args.repeat}: end to end, plain RQ"):
        res["rq"] = bench_rq(state, url, args, res["fleet"]["tasks"])
    with console.status(f"run {run}/{args.repeat}: opening runs in large jobs"):
        res["journal"] = bench_journal(state, args)
    state.client.flushdb()
    return res


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.rq_worker:
        rq_worker(args.url)
        return
    os.environ.setdefault("REDFLEET_LOG_LEVEL", "warning")  # inherited by fleet workers
    logs.configure(os.environ["REDFLEET_LOG_LEVEL"])
    console = Console(stderr=args.json)
    runs = []
    with RedisServer() as server:
        state = State.connect(server.url)
        version = state.client.info("server")["redis_version"]
        for i in range(1, args.repeat + 1):
            runs.append(summarize_run(run_once(state, server.url, args, console, i)))
        state.client.close()
    params = {k: v for k, v in vars(args).items() if k not in ("json", "rq_worker", "url")}
    params["workers"] = len(FLEET.roles())
    params["fleet"] = {"planners": FLEET.planners, "coders": FLEET.coders,
                       "reviewers": FLEET.reviewers, "lease_ms": FLEET.lease_ms}  # fmt: skip
    doc = summarize(runs, params, version)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, console)


if __name__ == "__main__":
    main()
