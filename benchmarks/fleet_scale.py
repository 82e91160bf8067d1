"""Fleet scale: how many LLM-bound agent tasks a fleet runs at once, and what each one costs.

Agents jobs run against a slow loopback model — ``slow_openai.py``, an
OpenAI-compatible server in its own process that answers every call after
``--delay-s`` (default 2 s) with the next step of a scripted scenario — side
by side in one run, at increasing load, through two fleets:

  (a) the one-task-per-process fleet: ``redfleet up --concurrency 1``
      (loads of 25, 50, 100 processes: one process per agent);
  (b) the concurrent fleet: ``redfleet up --concurrency N``, worker processes
      with N task slots each (loads of 12 processes x 5, 20, 50 slots: 1
      planner, 10 coders and 1 reviewer, so the top load has 500 coder
      slots).

Each load gets a fresh keyspace (FLUSHALL) on one private redis-server on a
free port, a fresh ``redfleet up`` (one planner and one reviewer process per
ten processes, at least one each, the rest coders;
provider ``openai`` pointed at the loopback), and a closed loop of jobs:
``ceil(slots / (fanout x subagents))`` jobs in flight (enough for every slot
at the job's widest), each one replaced as it ends, until ``--rounds`` times
that many have ended. Every job has a unique goal (the loopback keys its
replay per job and task). What each job does, from the scenario written to
a temporary .json file: the planner writes one feature and dispatches
``--fanout`` coders (2 calls); each coder spawns ``--subagents`` subagents
(1 call; each subagent saves a note and answers, 2 calls), then, resumed
with their summaries, writes a module and its test with ``write_file`` and
answers (3 calls); the planner dispatches the reviewer (1 call); the
reviewer runs the feature's check — one pytest subprocess over the coders'
test files, ~1 s of CPU, which is why the fan-out is wide: one check per
8 x 6 subagents keeps it from dominating — and submits its verdict (2
calls); the planner reports (1 call).

Measured per fleet and load (the harness's own Redis commands are counted
on its clients and left out; the fleet's supervisor and the loopback are
not workers):

- running tasks: claimed tasks, sampled at 10 Hz as the summed ZCARD of every
  live job's lease index (``rf:{job}:leases``): the peak and the mean; the same
  from the job streams (``task.claimed`` to the run's end event, Redis time)
  as a cross-check, with runs (claims) and their mean duration;
- memory: the sum of PSS (``memory_full_info().pss``) of the worker
  processes, swept every ~0.5 s; the sweep taken at the highest running
  count is reported, divided by that count (per running agent) and by the
  slots, beside the load's highest sweep over the peak count (a peak reached
  while workers are still cold, before their first task loaded what a task
  loads, would flatter them); the goal is judged on the larger; the baseline
  is ~98 MB per agent;
- CPU per model call: the worker processes' user+system CPU delta over the
  load, divided by the calls the loopback answered in it (pytest children
  reported beside it, not in it); every process of the run reads the
  project's modules from Python's bytecode cache, compiled before the first
  load, as an installed package does (``cache_bytecode``);
- throughput: tasks/s and jobs/s over the load (first submit to last end),
  against the latency bound: ideal tasks/s = mean tasks in flight / (model
  calls per task x delay) (Little's law: a task can take no less than its
  calls' delay); also the slots' utilization (mean running / slots);
- Redis commands per task: the ``total_commands_processed`` delta, less the
  harness's sampling, divided by the tasks that ended (submits included).

The goals of issue 13: ≥ 500 concurrently running agent tasks, ≤ 20 MB per
agent (PSS), throughput within 10 % of the latency-bound ideal; each is
reported met or not from the measured numbers. A load that would exhaust
memory (an estimate before it, the machine's available memory during it)
is stopped early and says so. No process is left behind (checked).

A measurement, not a test: the exit code is 0 whatever it finds (2 for a
usage error). Progress goes to stderr; ``--json`` prints one JSON document.

Run:  .venv/bin/python benchmarks/fleet_scale.py [--json] [--quick] [--delay-s S]
          [--loads-a 25,50,100] [--loads-b 12x5,12x20,12x50] [--fanout K]
          [--subagents M] [--rounds R]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import importlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psutil
import redis
from fleet_procs import still_running, workers_of
from rich.console import Console
from rich.table import Table
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from shared_state import JobSpec, RedisServer, Scenario, State, keys

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = Path(__file__).resolve().parent / "slow_openai.py"
CONCURRENCY_FLAG = "--concurrency"  # the concurrent fleet's option of `redfleet up`
FINISHED = ("succeeded", "failed", "cancelled")
RUN_ENDS = {"task.succeeded", "task.waiting", "task.failed", "task.requeued", "task.dead",
            "task.blocked"}  # fmt: skip
GOALS = {"running_tasks": 500, "mb_per_agent": 20.0, "throughput_share": 0.9,
         "worker_ms_per_call": 3.0, "redis_ms_per_call": 0.5,
         "round_trips_per_task": 25.0}  # fmt: skip
BASELINE_MB_PER_AGENT = 98.0
SAMPLE_S = 0.1
IDLE_S = 3.0
TABLE_WIDTH = 200  # the tables' columns unwrapped, also when stdout is not a terminal
PSS_EVERY_S = 0.5
FIRST_GUESS_MB = 130.0  # per worker process, before one was measured


# -- the scenario -----------------------------------------------------------------------


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def scenario(fanout: int, subagents: int) -> dict[str, Any]:
    """planner → ``fanout`` coders (each: ``subagents`` subagents of 2 calls, then two files,
    3 calls) → reviewer (one pytest run) → report."""
    coders = [f"c{i:02d}" for i in range(1, fanout + 1)]
    roles: dict[str, list[dict[str, Any]]] = {
        "planner": [
            _call("write_features", features=[{
                "id": "F1", "description": "every part module returns its own name",
                "check": "-k test_part"}]),
            _call("dispatch_coders", tasks=[
                {"name": c, "brief": f"Write part_{c}.py with name() and its test."}
                for c in coders]),
        ],
        "planner/review": [_call("dispatch_reviewer", brief="Run F1's check; one verdict.")],
        "reviewer.review": [
            _call("run_checks", feature_ids=["F1"]),
            _call("submit_verdicts", verdicts=[
                {"feature_id": "F1", "passes": True, "note": "the part tests pass"}]),
        ],
        "planner/report": [{"text": f"{fanout} part modules written; F1's check passes."}],
    }  # fmt: skip
    for c in coders:
        research = [f"{c}-research-{k}" for k in range(1, subagents + 1)]
        for r in research:
            roles[f"subagent.{r}"] = [
                _call("save_note", title=f"{r} findings", content=f"What {r} found: nothing new."),
                {"text": f"{r}: nothing blocks the part module; details in the saved note."},
            ]
        module = f'"""Part {c}."""\n\n\ndef name() -> str:\n    return "{c}"\n'
        test = (
            f"from part_{c} import name\n\n\n"
            f'def test_part_{c}() -> None:\n    assert name() == "{c}"\n'
        )
        writes = [
            _call("write_file", path=f"part_{c}.py", content=module),
            _call("write_file", path=f"test_part_{c}.py", content=test),
            {"text": f"Wrote part_{c}.py and test_part_{c}.py for F1."},
        ]
        if research:
            spawn = _call("spawn_subagents", agents=[
                {"name": r, "brief": f"Research what part_{c}.py must not break."}
                for r in research], summary_cap=300)  # fmt: skip
            roles[f"coder.{c}"] = [spawn]
            roles[f"coder.{c}/resume"] = writes
        else:
            roles[f"coder.{c}"] = writes
    each = f"{subagents} subagents, then 2 files" if subagents else "2 files"
    return {
        "name": "fleet-scale",
        "description": f"planner -> {fanout} coders ({each} each) -> reviewer (1 pytest run)",
        "roles": roles,
    }


def calls_per_job(fanout: int, subagents: int) -> int:
    coder = 3 + (1 + 2 * subagents if subagents else 0)
    return 2 + coder * fanout + 1 + 2 + 1


def wide(fanout: int, subagents: int) -> int:
    """The most tasks of one job that run at once: its coders, or their subagents."""
    return fanout * max(1, subagents)


# -- counting the harness's own Redis commands ---------------------------------------------


class Counted(redis.connection.Connection):
    """A connection that counts the commands it sends (a pipeline's, one by one)."""

    sent: ClassVar[Counter[str]] = Counter()
    trips: ClassVar[Counter[str]] = Counter()  # round trips: a command, or a pipeline
    lock: ClassVar[threading.Lock] = threading.Lock()
    label = "harness"

    def pack_command(self, *args: Any) -> list[bytes]:
        with Counted.lock:
            Counted.sent[self.label] += 1
            Counted.trips[self.label] += 1
        return super().pack_command(*args)

    def pack_commands(self, commands: Any) -> list[bytes]:
        commands = list(commands)
        with Counted.lock:
            Counted.sent[self.label] += len(commands)
            Counted.trips[self.label] += 1
        return super().pack_commands(commands)


def counted_client(url: str, label: str) -> redis.Redis:
    cls = type(f"Counted_{label}", (Counted,), {"label": label})
    return redis.Redis.from_url(url, connection_class=cls, socket_timeout=10)


# -- the rig: Redis, the loopback, one fleet ---------------------------------------------------


class Loopback:
    """``slow_openai.py`` in its own process."""

    def __init__(self, folder: Path, scenario_path: Path, delay_s: float) -> None:
        port_file = folder / "loopback.port"
        self.proc = subprocess.Popen(
            [sys.executable, str(LOOPBACK), str(scenario_path), "--delay-s", str(delay_s),
             "--port-file", str(port_file)],
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the loopback model server did not start")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.http = httpx.Client(timeout=10)

    def stats(self, *, reset_max: bool = False) -> dict[str, Any]:
        path = "/stats?reset-max" if reset_max else "/stats"
        return self.http.get(f"http://127.0.0.1:{self.port}{path}").json()

    def cpu_s(self) -> float:
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass(frozen=True)
class Load:
    fleet: str  # "a" or "b"
    processes: int
    slots_each: int

    @property
    def slots(self) -> int:
        return self.processes * self.slots_each

    @property
    def layout(self) -> tuple[int, int, int]:
        """Planners, coders, reviewers: one planner and one reviewer per ten processes."""
        edge = max(1, round(self.processes / 10))
        return edge, max(1, self.processes - 2 * edge), edge

    @property
    def label(self) -> str:
        return f"{self.processes} x {self.slots_each}"


class Fleet:
    """One ``redfleet up`` for one load; its worker processes; and stopping it cleanly."""

    def __init__(
        self, load: Load, url: str, loopback: Loopback, folder: Path, lease_ms: int, log_level: str
    ):
        p, c, r = load.layout
        env = {
            **os.environ,
            "REDIS_URL": url,
            "REDFLEET_HOME": str(folder / "home"),
            "REDFLEET_LOG_LEVEL": log_level,
            "OPENAI_API_KEY": "x",
        }
        command = [
            sys.executable, "-P", "-m", "coordinator", "up", "--json",
            "--planners", str(p), "--coders", str(c), "--reviewers", str(r),
            "--lease-ms", str(lease_ms), "--provider", "openai", "--model", "bench",
            "--base-url", loopback.base_url,
        ]  # fmt: skip
        # Always given: today's fleet is --concurrency 1, not the default.
        command += [CONCURRENCY_FLAG, str(load.slots_each)]
        self.out_path = folder / f"fleet-{load.fleet}-{load.slots}.json"
        self.log_path = folder / f"fleet-{load.fleet}-{load.slots}.log"
        with self.out_path.open("wb") as out, self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                command, env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=out, stderr=log
            )
        self.seen: dict[int, float] = {}

    def workers(self) -> list[psutil.Process]:
        """The fleet's worker processes now (also remembered for the orphan check)."""
        return workers_of(self.proc.pid, self.seen)

    def logged(self, event: str) -> int:
        """How many times the fleet's log (supervisor and workers) names ``event`` so far."""
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace").count(f'"{event}"')
        return 0

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-1500:]
        return ""

    def stop(self) -> dict[str, Any]:
        ended: dict[str, Any] = {"report": None, "exit_code": None, "killed": False}
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            ended["killed"] = True
        ended["exit_code"] = self.proc.returncode
        with contextlib.suppress(ValueError, OSError):
            ended["report"] = json.loads(self.out_path.read_text())
        deadline = time.monotonic() + 15
        while self.orphans() and time.monotonic() < deadline:
            time.sleep(0.2)
        ended["orphans"] = self.orphans()
        for pid in ended["orphans"]:  # ours: started by this fleet
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return ended

    def orphans(self) -> list[int]:
        """Worker processes seen during the run that are still alive."""
        return still_running(self.seen)


# -- sampling while a load runs --------------------------------------------------------------


class Sampler(threading.Thread):
    """Running tasks at 10 Hz (lease indexes of live jobs); the memory guard once a second."""

    def __init__(self, client: redis.Redis, live: Any, margin_bytes: int) -> None:
        super().__init__(name="fleet-scale-sampler", daemon=True)
        self.client = client
        self.live = live  # () -> job ids submitted and not yet seen finished
        self.margin = margin_bytes
        self.now = 0
        self.peak = 0
        self.samples: list[int] = []
        self.low_memory = ""
        self.stopping = threading.Event()

    def run(self) -> None:
        next_guard = 0.0
        while not self.stopping.wait(SAMPLE_S):
            ids = self.live()
            pipe = self.client.pipeline(transaction=False)
            for job_id in ids:
                pipe.zcard(keys.leases(job_id))
            with contextlib.suppress(redis.RedisError):
                self.now = sum(pipe.execute()) if ids else 0
                self.peak = max(self.peak, self.now)
                self.samples.append(self.now)
            if time.monotonic() >= next_guard:
                next_guard = time.monotonic() + 1
                available = psutil.virtual_memory().available
                if available < self.margin and not self.low_memory:
                    self.low_memory = (
                        f"stopped early: {available / 2**30:.1f} GiB of memory available, "
                        f"below the {self.margin / 2**30:.1f} GiB margin"
                    )


class PssSweeper(threading.Thread):
    """The workers' summed PSS every ~0.5 s; keeps the sweep at the highest running count."""

    def __init__(self, fleet: Fleet, sampler: Sampler) -> None:
        super().__init__(name="fleet-scale-pss", daemon=True)
        self.fleet = fleet
        self.sampler = sampler
        self.at_peak: dict[str, Any] = {"running": -1}
        self.max_total = 0
        self.stopping = threading.Event()

    def sweep(self) -> dict[str, Any]:
        running = self.sampler.now
        pss, n = 0, 0
        for proc in self.fleet.workers():
            with contextlib.suppress(psutil.Error):
                pss += proc.memory_full_info().pss
                n += 1
        return {"running": running, "pss": pss, "processes": n}

    def run(self) -> None:
        while not self.stopping.wait(PSS_EVERY_S):
            s = self.sweep()
            self.max_total = max(self.max_total, s["pss"])
            best = self.at_peak
            if (s["running"], s["pss"]) > (best["running"], best.get("pss", 0)):
                self.at_peak = s


def _busy_s() -> float:
    """CPU seconds the whole machine has been busy (every process, ours or not)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0)


def _cpu(procs: list[psutil.Process]) -> dict[int, tuple[float, float]]:
    """pid -> (own user+system, reaped children's user+system) CPU seconds."""
    found = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            found[proc.pid] = (t.user + t.system, t.children_user + t.children_system)
    return found


# -- one load -------------------------------------------------------------------------------


@dataclass
class LoadRun:
    load: Load
    args: argparse.Namespace
    url: str
    loopback: Loopback
    folder: Path
    console: Console
    mb_per_process: float
    doc: dict[str, Any] = field(default_factory=dict)

    def guard(self) -> str:
        """Why this load is not started (it would not fit in memory), or ''."""
        need = self.load.processes * self.mb_per_process * 1e6 * 1.15
        available = psutil.virtual_memory().available
        if available - need < self.args.memory_margin_gb * 2**30:
            return (
                f"skipped: ~{need / 2**30:.1f} GiB needed for {self.load.processes} worker "
                f"processes, {available / 2**30:.1f} GiB available "
                f"(margin {self.args.memory_margin_gb} GiB)"
            )
        return ""

    def run(self) -> dict[str, Any]:
        load, a = self.load, self.args
        p, c, r = load.layout
        self.doc = {"fleet": load.fleet, "processes": load.processes,
                    "slots_per_process": load.slots_each, "slots": load.slots,
                    "layout": {"planners": p, "coders": c, "reviewers": r}}  # fmt: skip
        skipped = self.guard()
        if skipped:
            self.doc["stopped"] = skipped
            return self.doc
        sampling = counted_client(self.url, "sampling")
        submitting = counted_client(self.url, "submitting")
        sampling.flushall()
        state = State(submitting)
        fleet = Fleet(load, self.url, self.loopback, self.folder, a.lease_ms, a.log_level)
        try:
            self._start(fleet, state, sampling)
            self._drive(fleet, state, sampling)
        finally:
            ended = fleet.stop()
            self.doc["fleet_exit"] = {k: ended[k] for k in ("exit_code", "killed", "report")}
            self.doc["orphans"] = ended["orphans"]
            self.doc["worker_processes_seen"] = len(fleet.seen)
            sampling.close()
            submitting.close()
        return self.doc

    def _start(self, fleet: Fleet, state: State, sampling: redis.Redis) -> None:
        n = self.load.processes
        started = time.monotonic()
        deadline = started + max(120, 3 * n)
        while True:
            if fleet.proc.poll() is not None:
                raise RuntimeError(f"redfleet up exited at start: {fleet.log_tail()}")
            registered = sampling.zcard(keys.WORKERS)
            if len(fleet.workers()) >= n and registered >= n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{registered} of {n} workers registered after the deadline")
            time.sleep(0.5)
        time.sleep(1.0)  # the last ones finish importing
        self.doc["startup_s"] = round(time.monotonic() - started, 1)
        self.doc["startup_hung_kills"] = fleet.logged("fleet.worker_hung")
        _progress(self.console, f"  {n} worker processes up in {self.doc['startup_s']} s"
                  f" ({self.doc['startup_hung_kills']} killed as hung while starting)")  # fmt: skip
        self._idle(fleet, sampling)

    def _idle(self, fleet: Fleet, sampling: redis.Redis) -> None:
        """What the fleet costs doing nothing: worker CPU and Redis commands per second."""
        sent0 = Counted.sent["sampling"]
        cpu0, info0 = _cpu(fleet.workers()), sampling.info("stats")["total_commands_processed"]
        time.sleep(IDLE_S)
        cpu1, info1 = _cpu(fleet.workers()), sampling.info("stats")["total_commands_processed"]
        own = sum(cpu1[p][0] - cpu0[p][0] for p in cpu1 if p in cpu0)
        commands = info1 - info0 - (Counted.sent["sampling"] - sent0)
        self.doc["idle"] = {
            "seconds": IDLE_S,
            "worker_cpu_share": round(own / IDLE_S, 3),  # of one core, all workers together
            "redis_commands_per_s": round(commands / IDLE_S, 1),
        }

    def _drive(self, fleet: Fleet, state: State, sampling: redis.Redis) -> None:
        a, load = self.args, self.load
        in_flight = math.ceil(load.slots / wide(a.fanout, a.subagents))
        total = in_flight * a.rounds
        workers = fleet.workers()
        cpu0, calls0 = _cpu(workers), self.loopback.stats(reset_max=True)
        server_cpu0 = self.loopback.cpu_s()
        sup0 = psutil.Process(fleet.proc.pid).cpu_times()
        server0 = sampling.info("stats")
        info0, reads0 = server0["total_commands_processed"], server0["total_reads_processed"]
        stats0 = sampling.info("commandstats")
        redis_cpu0 = sampling.info("cpu")
        phases0 = _phases(sampling)
        sent0, trips0 = dict(Counted.sent), dict(Counted.trips)
        me0, machine0 = psutil.Process().cpu_times(), _busy_s()
        hung0, died0 = fleet.logged("fleet.worker_hung"), fleet.logged("fleet.worker_died")
        yielded0 = fleet.logged("delivery.yielded")

        live: dict[str, float] = {}
        lock = threading.Lock()

        def live_ids() -> list[str]:
            with lock:
                return list(live)

        sampler = Sampler(sampling, live_ids, int(a.memory_margin_gb * 2**30))
        pss = PssSweeper(fleet, sampler)
        sampler.start()
        pss.start()
        outcomes: dict[str, str] = {}
        submitted = 0
        started = time.monotonic()
        timeout = max(240.0, a.rounds * a.delay_s * 20 * 3)  # ~20 calls deep, 3x slack

        def submit() -> None:
            nonlocal submitted
            spec = JobSpec(goal=f"fleet-scale {load.fleet}-{load.slots} job {submitted:05d}",
                           scenario=Scenario.AGENTS)  # fmt: skip
            job = state.jobs.submit(spec)
            with lock:
                live[job.job_id] = time.monotonic()
            submitted += 1

        poller = State(sampling)
        last_note = 0.0
        stopped = ""
        try:
            for _ in range(min(in_flight, total)):
                submit()
            while len(outcomes) < total:
                time.sleep(SAMPLE_S)
                ids = live_ids()
                pipe = poller.client.pipeline(transaction=False)
                for job_id in ids:
                    pipe.hget(keys.job(job_id), "status")
                for job_id, status in zip(ids, pipe.execute(), strict=True):
                    if status is not None and status.decode() in FINISHED:
                        outcomes[job_id] = status.decode()
                        with lock:
                            live.pop(job_id)
                        if submitted < total:
                            submit()
                now = time.monotonic()
                if now - last_note > 5:
                    last_note = now
                    _progress(self.console, f"  {len(outcomes)}/{total} jobs ended, "
                              f"{sampler.now} running (peak {sampler.peak})")  # fmt: skip
                if sampler.low_memory:
                    stopped = sampler.low_memory
                    break
                if now - started > timeout:
                    stopped = (
                        f"stopped early: {len(outcomes)} of {total} jobs ended in {timeout:.0f} s"
                    )
                    break
                if fleet.proc.poll() is not None:
                    stopped = f"stopped early: redfleet up exited: {fleet.log_tail()}"
                    break
        finally:
            sampler.stopping.set()
            pss.stopping.set()
            sampler.join()
            pss.join()
        elapsed = time.monotonic() - started
        cpu1 = _cpu(fleet.workers())
        calls1, server_cpu1 = self.loopback.stats(), self.loopback.cpu_s()
        sup1 = psutil.Process(fleet.proc.pid).cpu_times()
        server1 = sampling.info("stats")
        info1, reads1 = server1["total_commands_processed"], server1["total_reads_processed"]
        stats1 = sampling.info("commandstats")
        redis_cpu1 = sampling.info("cpu")
        phases1 = _phases(sampling)
        sent = {k: Counted.sent[k] - sent0.get(k, 0) for k in Counted.sent}
        trips = {k: Counted.trips[k] - trips0.get(k, 0) for k in Counted.trips}
        me1, machine1 = psutil.Process().cpu_times(), _busy_s()
        hung = fleet.logged("fleet.worker_hung") - hung0
        died = fleet.logged("fleet.worker_died") - died0
        yielded = fleet.logged("delivery.yielded") - yielded0
        if stopped:
            self.doc["stopped"] = stopped
            _progress(self.console, f"  {stopped}")

        # -- what the job records say ---------------------------------------------------
        runs, tasks, ended_tasks, model_events, requeued = [], 0, 0, 0, 0
        reasons: Counter[str] = Counter()
        for job_id, status in outcomes.items():
            if status != "succeeded":
                reason = poller.client.hget(keys.job(job_id), "reason") or b""
                reasons[reason.decode(errors="replace")[:160]] += 1
            task_list = poller.tasks.list(job_id)
            tasks += len(task_list)
            ended_tasks += sum(t.status.value in ("succeeded", "dead") for t in task_list)
            events = poller.events.read(job_id, last=100_000)
            model_events += sum(e.event == "model.called" for e in events)
            requeued += sum(e.event == "task.requeued" for e in events)
            runs += _runs(events)
        calls = calls1["answered"] - calls0["answered"]
        refused = calls1["refused"] - calls0["refused"]
        sweep = pss.at_peak if pss.at_peak["running"] >= 0 else pss.sweep()
        # Replacements started during the load count whole; a killed worker's CPU is lost.
        own = sum(cpu1[p][0] - cpu0.get(p, (0.0, 0.0))[0] for p in cpu1)
        child = sum(cpu1[p][1] - cpu0.get(p, (0.0, 0.0))[1] for p in cpu1)
        harness = sent.get("sampling", 0) + 8  # the INFO and HGETALL calls around the window
        commands = info1 - info0 - harness
        # A read event of the server is a request that arrived: a command, or a pipeline (the
        # harness's sampling left out; its submits, as a user's, counted).
        round_trips = reads1 - reads0 - trips.get("sampling", 0)
        redis_s = sum(redis_cpu1[k] - redis_cpu0[k] for k in ("used_cpu_user", "used_cpu_sys"))
        ev_peak, ev_mean, run_s = _concurrency(runs)
        window = elapsed
        mean_running = sum(sampler.samples) / len(sampler.samples) if sampler.samples else 0.0
        calls_per_task = calls / ended_tasks if ended_tasks else 0.0
        ideal_tasks_s = mean_running / (calls_per_task * a.delay_s) if calls_per_task else 0.0
        tasks_per_job = ended_tasks / len(outcomes) if outcomes else 0.0
        self.doc.update(
            jobs={
                "submitted": submitted,
                **{s: Counter(outcomes.values()).get(s, 0) for s in FINISHED},
            },
            tasks=tasks,
            tasks_ended=ended_tasks,
            runs=len(runs),
            window_s=round(window, 2),
            running={
                "peak_sampled": sampler.peak,
                "mean_sampled": round(mean_running, 1),
                "samples": len(sampler.samples),
                "peak_from_events": ev_peak,
                "mean_from_events": round(ev_mean, 1),
                "mean_run_s": round(run_s, 2),
                "utilization": round(mean_running / load.slots, 3),
                "loopback_max_in_flight": calls1["max_in_flight"],
            },
            memory={
                "pss_total_mb": round(sweep["pss"] / 1e6, 1),
                "at_running": sweep["running"],
                "processes_swept": sweep["processes"],
                "mb_per_running_agent": round(sweep["pss"] / 1e6 / sweep["running"], 2)
                if sweep["running"] > 0
                else None,
                "mb_per_slot": round(sweep["pss"] / 1e6 / load.slots, 2),
                "mb_per_process": round(sweep["pss"] / 1e6 / max(1, sweep["processes"]), 1),
                "max_pss_total_mb": round(pss.max_total / 1e6, 1),
                # Conservative: the load's highest PSS (workers warm by then) over its peak
                # running count; the goal is judged on the larger of the two.
                "mb_per_agent_max_over_peak": round(pss.max_total / 1e6 / sampler.peak, 2)
                if sampler.peak
                else None,
            },
            cpu={
                "worker_s": round(own, 2),
                "worker_children_s": round(child, 2),
                "supervisor_s": round(sup1.user + sup1.system - sup0.user - sup0.system, 2),
                "loopback_s": round(server_cpu1 - server_cpu0, 2),
                "redis_s": round(redis_s, 2),
                # The server's share in the kernel (its reads, writes and polls: round trips)
                # beside its own code (commands and scripts).
                "redis_sys_s": round(redis_cpu1["used_cpu_sys"] - redis_cpu0["used_cpu_sys"], 2),
                "worker_ms_per_call": round(1000 * own / calls, 2) if calls else None,
                "redis_ms_per_call": round(1000 * redis_s / calls, 3) if calls else None,
                # Where a worker's CPU went, by phase, as the workers count it (ms per call).
                "phases_ms_per_call": {
                    k: round((phases1.get(k, 0) - phases0.get(k, 0)) / 1000 / calls, 2)
                    for k in sorted(phases1)
                }
                if calls
                else {},
                "harness_s": round(me1.user + me1.system - me0.user - me0.system, 2),
                "machine_busy_s": round(machine1 - machine0, 2),
                "machine_cores": psutil.cpu_count(),
                "worker_processes_gone": len(cpu0.keys() - cpu1.keys()),
            },
            fleet_events={
                "hung_kills": hung,
                "worker_deaths": died,
                "tasks_requeued": requeued,
                # Logged at info: counted with --log-level info only (None otherwise).
                "fair_share_yields": yielded if a.log_level == "info" else None,
                "scripts_rerun": calls1["scripts_rerun"] - calls0["scripts_rerun"],
                "failed_job_reasons": dict(reasons.most_common(5)),
            },
            calls={
                "answered": calls,
                "refused": refused,
                "model_called_events": model_events,
                "per_task": round(calls_per_task, 2),
                "last_refusal": calls1["last_refusal"],
            },
            throughput={
                "tasks_per_s": round(ended_tasks / window, 2),
                "jobs_per_s": round(len(outcomes) / window, 3),
                "ideal_tasks_per_s": round(ideal_tasks_s, 2),
                "ideal_jobs_per_s": round(ideal_tasks_s / tasks_per_job, 3) if tasks_per_job else 0,
                "share_of_ideal": round(ended_tasks / window / ideal_tasks_s, 3)
                if ideal_tasks_s
                else None,
                "capacity_tasks_per_s": round(load.slots / (calls_per_task * a.delay_s), 2)
                if calls_per_task
                else 0,
            },
            redis={
                "commands": commands,
                "per_task": round(commands / ended_tasks, 1) if ended_tasks else None,
                "harness_excluded": harness,
                "per_task_net_of_idle": round(
                    (commands - self.doc["idle"]["redis_commands_per_s"] * window) / ended_tasks, 1
                )
                if ended_tasks
                else None,
                "submit_commands": sent.get("submitting", 0),
                "round_trips": round_trips,
                "round_trips_per_task": round(round_trips / ended_tasks, 1)
                if ended_tasks
                else None,
                "top": _top_commands(stats0, stats1),
                # Redis's own CPU per task by command (a script's time includes the
                # commands it called, which are also counted under their own names).
                "top_us_per_task": {
                    name: round(us / ended_tasks, 1)
                    for name, us in _top_commands(stats0, stats1, field="usec").items()
                }
                if ended_tasks
                else {},
            },
        )


def _phases(client: redis.Redis) -> dict[str, int]:
    """The workers' CPU by phase so far (µs), as they count it into the fleet's metrics."""
    raw = client.hgetall(keys.METRICS)
    prefix = b"cpu_us|"
    return {k[len(prefix) :].decode(): int(v) for k, v in raw.items() if k.startswith(prefix)}


def _runs(events: list[Any]) -> list[tuple[float, float]]:
    """(start, end) in Redis seconds of every claim of the job's tasks, from its stream."""
    opened: dict[str, float] = {}
    runs = []
    for e in events:
        at = e.ts.timestamp()
        if e.event == "task.claimed" and e.task_id:
            opened[e.task_id] = at
        elif e.event in RUN_ENDS and e.task_id in opened:
            runs.append((opened.pop(e.task_id), at))
    return runs


def _concurrency(runs: list[tuple[float, float]]) -> tuple[int, float, float]:
    """Peak and time-weighted mean of overlapping runs, and the mean run's seconds."""
    if not runs:
        return 0, 0.0, 0.0
    edges = sorted([(s, 1) for s, _ in runs] + [(e, -1) for _, e in runs])
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    span = max(e for _, e in runs) - min(s for s, _ in runs)
    busy = sum(e - s for s, e in runs)
    return peak, busy / span if span > 0 else 0.0, busy / len(runs)


def _top_commands(
    before: dict[str, Any], after: dict[str, Any], n: int = 8, field: str = "calls"
) -> dict[str, int]:
    """The ``n`` commands with the most ``calls`` (or ``usec``) between two commandstats."""
    delta = {
        name.removeprefix("cmdstat_"): stats[field] - before.get(name, {}).get(field, 0)
        for name, stats in after.items()
    }
    return dict(Counter(delta).most_common(n))


# -- the run ----------------------------------------------------------------------------------


def _progress(console: Console, text: str) -> None:
    console.print(text, highlight=False, markup=False)


# -- plain RQ beside the fleet ------------------------------------------------------------------

RQ_QUEUE = "bench.plain"
NOOP = f"{Path(__file__).stem}.noop"  # importable by the --rq-worker processes


def noop() -> None:
    """The plain RQ job: does nothing."""


def rq_worker(url: str) -> None:
    """Body of a ``--rq-worker`` process: a plain SimpleWorker on the baseline's queue."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so that NOOP imports
    # Imported now, not by the first job: its import is no cost of RQ's per job.
    importlib.import_module(NOOP.rpartition(".")[0])
    client = redis.Redis.from_url(url)
    queue = Queue(RQ_QUEUE, connection=client, serializer=JSONSerializer)
    SimpleWorker([queue], connection=client, serializer=JSONSerializer).work(
        logging_level="WARNING", with_scheduler=False
    )


def plain_rq(url: str, jobs: int, processes: int, console: Console) -> dict[str, Any]:
    """``jobs`` no-op jobs, enqueued one by one as a user would, through ``processes``
    plain RQ SimpleWorkers: what RQ alone costs a job, measured as the fleet is."""
    sampling = counted_client(url, "sampling")
    sampling.flushall()
    queue = Queue(RQ_QUEUE, connection=redis.Redis.from_url(url), serializer=JSONSerializer)
    command = [sys.executable, str(Path(__file__).resolve()), "--rq-worker", "--url", url]
    procs = [subprocess.Popen(command, stdin=subprocess.DEVNULL) for _ in range(processes)]
    workers = [psutil.Process(p.pid) for p in procs]
    try:
        deadline = time.monotonic() + 60
        while len(SimpleWorker.all(connection=sampling)) < processes:
            if time.monotonic() > deadline:
                raise RuntimeError("the plain RQ workers did not start")
            time.sleep(0.2)
        _progress(console, f"plain RQ: {jobs} no-op jobs through {processes} workers")
        server0, cpu0 = sampling.info("stats"), sampling.info("cpu")
        trips0, sent0, work0 = Counted.trips["sampling"], Counted.sent["sampling"], _cpu(workers)
        for _ in range(jobs):
            queue.enqueue_call(NOOP)
        while queue.finished_job_registry.get_job_count() < jobs:
            time.sleep(SAMPLE_S)
        server1, cpu1 = sampling.info("stats"), sampling.info("cpu")
        trips, work1 = Counted.trips["sampling"] - trips0, _cpu(workers)
        sent = Counted.sent["sampling"] - sent0
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        queue.connection.close()
        sampling.close()
    round_trips = server1["total_reads_processed"] - server0["total_reads_processed"] - trips
    commands = server1["total_commands_processed"] - server0["total_commands_processed"] - sent
    redis_s = sum(cpu1[k] - cpu0[k] for k in ("used_cpu_user", "used_cpu_sys"))
    own = sum(work1[p][0] - work0[p][0] for p in work1 if p in work0)
    return {
        "jobs": jobs,
        "processes": processes,
        "round_trips_per_job": round(round_trips / jobs, 1),
        "commands_per_job": round(commands / jobs, 1),
        "redis_ms_per_job": round(1000 * redis_s / jobs, 3),
        "worker_ms_per_job": round(1000 * own / jobs, 2),
    }


# -- the CLI's own cost --------------------------------------------------------------------------

CLI_RUNS = 5
CLI_COMMANDS = (("--version",), ("status",), ("claims",), ("logs",))
CLI_GOAL_S = 0.25
# What a command that reads Redis imports before any code of its own: its options (typer),
# the Redis client, its settings from the environment (pydantic-settings), its tables (rich).
CLI_FLOOR = "import typer, redis, pydantic_settings, rich.table"
# The least any such command could load and still read Redis through redis-py into the
# records' pydantic models, with its options parsed by typer: no settings, no tables.
CLI_STACK = "import typer, redis; from pydantic import BaseModel"


def _cpu_of(command: list[str], env: dict[str, str]) -> float:
    """The CPU seconds (user + system) one run of ``command`` took, from its rusage."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def cli_cpu(url: str, console: Console) -> dict[str, Any]:
    """The median CPU of each watching command against the run's Redis (with the jobs the
    loads left), beside RQ's own CLI on the same Redis, the libraries such a command
    imports, alone (``CLI_FLOOR``), and the least of them it could do with (``CLI_STACK``),
    each with the project's bytecode cached (``run``)."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "REDIS_URL": url}
    runs = {f"redfleet {' '.join(c)}": [str(bin_dir / "redfleet"), *c] for c in CLI_COMMANDS}
    runs |= {"rq --help": [str(bin_dir / "rq"), "--help"],
             "rq info": [str(bin_dir / "rq"), "info", "--url", url],
             f'python -c "{CLI_FLOOR}"': [sys.executable, "-c", CLI_FLOOR],
             f'python -c "{CLI_STACK}"': [sys.executable, "-c", CLI_STACK]}  # fmt: skip
    _progress(console, f"the CLI: {len(runs)} commands, {CLI_RUNS} runs each")
    medians = {}
    for name, command in runs.items():
        times = sorted(_cpu_of(command, env) for _ in range(CLI_RUNS))
        medians[name] = round(times[len(times) // 2], 3)
    ours = [v for k, v in medians.items() if k.startswith("redfleet")]
    return {"cpu_s": medians, "goal_s": CLI_GOAL_S, "met": max(ours) <= CLI_GOAL_S}


def plan_loads(args: argparse.Namespace) -> list[Load]:
    return [Load("a", n, 1) for n in args.loads_a] + [Load("b", p, s) for p, s in args.loads_b]


def cache_bytecode(console: Console) -> None:
    """Compile the project's modules to Python's bytecode cache, and let every process
    this run starts read it (and write what it lacks).

    So the fleets, plain RQ and the CLI run as an installed package does: its modules are
    compiled once, where PYTHONDONTWRITEBYTECODE (set in some environments) would have
    every worker compile each module it first imports inside the measured load, and
    every CLI run compile the project's modules again. RQ's are compiled at install.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for package in ("coordinator", "workers", "shared_state"):
        where = Path(importlib.import_module(package).__file__ or "").parent
        _progress(console, f"compiling {where} to bytecode")
        compileall.compile_dir(where, quiet=1)


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    cache_bytecode(console)
    doc: dict[str, Any] = {
        "job": scenario(args.fanout, args.subagents)["description"],
        "calls_per_job": calls_per_job(args.fanout, args.subagents),
        "loads": [],
    }
    with tempfile.TemporaryDirectory(prefix="redfleet-fleet-scale-") as tmp:
        folder = Path(tmp)
        scenario_path = folder / "fleet-scale.json"
        scenario_path.write_text(json.dumps(scenario(args.fanout, args.subagents), indent=1))
        server = RedisServer().start()
        loopback = None
        try:
            loopback = Loopback(folder, scenario_path, args.delay_s)
            with contextlib.closing(redis.Redis.from_url(server.url)) as c:
                doc["redis"] = {"version": c.info("server")["redis_version"]}
            # Each worker holds connections: give Redis room for a big fleet.
            with contextlib.closing(redis.Redis.from_url(server.url)) as c:
                c.config_set("maxclients", 10_000)
            mb = {"a": FIRST_GUESS_MB, "b": FIRST_GUESS_MB}
            for load in plan_loads(args):
                _progress(console, f"fleet ({load.fleet}) {load.label} slots: starting")
                one = LoadRun(load, args, server.url, loopback, folder, console, mb[load.fleet])
                result = one.run()
                doc["loads"].append(result)
                per_process = result.get("memory", {}).get("mb_per_process")
                if per_process:
                    mb[load.fleet] = max(mb[load.fleet] if load.fleet == "b" else 0, per_process)
                _progress(console, f"fleet ({load.fleet}) {load.label}: {_summary_line(result)}")
            done = [r for r in doc["loads"] if r.get("tasks_ended")]
            if done:  # as many jobs as the last load ran tasks, as many workers as processes
                last = done[-1]
                doc["plain_rq"] = plain_rq(
                    server.url, last["tasks_ended"], last["processes"], console
                )
            doc["cli"] = cli_cpu(server.url, console)
        finally:
            if loopback is not None:
                loopback.stop()
            server.stop()
    doc["ratio_mb_per_agent_a_over_b"] = _ratio(doc["loads"])
    doc["goals"] = _goals(doc["loads"])
    if "cli" in doc:
        worst = max(v for k, v in doc["cli"]["cpu_s"].items() if k.startswith("redfleet"))
        doc["goals"]["cli_cpu_s"] = {"goal": CLI_GOAL_S, "got": worst, "met": doc["cli"]["met"]}
    return doc


def _summary_line(r: dict[str, Any]) -> str:
    if "running" not in r:
        return r.get("stopped", "no result")
    return (
        f"peak {r['running']['peak_sampled']} running, "
        f"{_mb_per_agent(r)} MB/agent, "
        f"{r['throughput']['share_of_ideal']} of ideal"
        + (f" ({r['stopped']})" if "stopped" in r else "")
    )


def _best(loads: list[dict[str, Any]], fleet: str) -> dict[str, Any] | None:
    """The fleet's measured load with the most running tasks."""
    done = [r for r in loads if r["fleet"] == fleet and "running" in r]
    return max(done, key=lambda r: r["running"]["peak_sampled"]) if done else None


def _ratio(loads: list[dict[str, Any]]) -> float | None:
    a, b = _best(loads, "a"), _best(loads, "b")
    if not (a and b and _mb_per_agent(a) and _mb_per_agent(b)):
        return None
    return round(_mb_per_agent(a) / _mb_per_agent(b), 2)


def _mb_per_agent(r: dict[str, Any]) -> float | None:
    """PSS per running agent: the larger of the sweep at the peak and the max over the peak."""
    m = r["memory"]
    found = [v for v in (m["mb_per_running_agent"], m["mb_per_agent_max_over_peak"]) if v]
    return max(found) if found else None


def _goals(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Each goal, judged on the concurrent fleet's biggest load (fleet (a) when (b) did not run)."""
    best = _best(loads, "b") or _best(loads, "a")
    if best is None:
        return {"judged_on": None}
    mb = _mb_per_agent(best)
    share = best["throughput"]["share_of_ideal"]
    return {
        "judged_on": f"fleet ({best['fleet']}) {best['processes']} x {best['slots_per_process']}",
        "running_tasks": {"goal": GOALS["running_tasks"], "got": best["running"]["peak_sampled"],
                          "met": best["running"]["peak_sampled"] >= GOALS["running_tasks"]},
        "mb_per_agent": {"goal": GOALS["mb_per_agent"], "got": mb,
                         "met": mb is not None and mb <= GOALS["mb_per_agent"]},
        "throughput_share": {"goal": GOALS["throughput_share"], "got": share,
                             "met": share is not None and share >= GOALS["throughput_share"]},
        **{name: _at_most(name, got) for name, got in (
            ("worker_ms_per_call", best["cpu"]["worker_ms_per_call"]),
            ("redis_ms_per_call", best["cpu"]["redis_ms_per_call"]),
            ("round_trips_per_task", best["redis"]["round_trips_per_task"]))},
    }  # fmt: skip


def _at_most(name: str, got: float | None) -> dict[str, Any]:
    return {"goal": GOALS[name], "got": got, "met": got is not None and got <= GOALS[name]}


# -- the report -------------------------------------------------------------------------------


def print_table(doc: dict[str, Any], console: Console) -> None:
    p = doc["params"]
    table = Table(
        title=f"redfleet fleet scale: model delay {p['delay_s']} s, {doc['job']} "
        f"({doc['calls_per_job']} calls a job), {p['rounds']} rounds of jobs per load"
    )
    columns = ("fleet", "procs x slots", "jobs ok/all", "peak running", "mean running",
               "PSS total", "MB/agent at peak (max/peak)", "MB/slot", "worker CPU/call",
               "tasks/s (ideal)", "jobs/s (ideal)", "of ideal", "redis cmds/task",
               "round trips/task", "redis CPU/call")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col == "fleet" else "right")
    for r in doc["loads"]:
        if "running" not in r:
            table.add_row(f"({r['fleet']})", f"{r['processes']} x {r['slots_per_process']}",
                          r.get("stopped", ""), *[""] * 12)  # fmt: skip
            continue
        run_, m, c, t = r["running"], r["memory"], r["cpu"], r["throughput"]
        table.add_row(
            f"({r['fleet']})" + (" [stopped early]" if "stopped" in r else ""),
            f"{r['processes']} x {r['slots_per_process']}",
            f"{r['jobs']['succeeded']}/{r['jobs']['submitted']}",
            f"{run_['peak_sampled']} (events {run_['peak_from_events']})",
            f"{run_['mean_sampled']} ({run_['utilization']:.0%} of slots)",
            f"{m['pss_total_mb']:.0f} MB at {m['at_running']}",
            f"{m['mb_per_running_agent']} ({m['mb_per_agent_max_over_peak']})",
            f"{m['mb_per_slot']}",
            f"{c['worker_ms_per_call']} ms (+{c['worker_children_s']} s pytest)",
            f"{t['tasks_per_s']} ({t['ideal_tasks_per_s']})",
            f"{t['jobs_per_s']} ({t['ideal_jobs_per_s']})",
            f"{t['share_of_ideal']:.0%}" if t["share_of_ideal"] else "-",
            f"{r['redis']['per_task']}",
            f"{r['redis']['round_trips_per_task']}",
            f"{c['redis_ms_per_call']} ms",
        )  # fmt: skip
    console.print(table)
    print_overheads(doc, console)
    print_phases(doc, console)
    ratio = doc["ratio_mb_per_agent_a_over_b"]
    shown = ratio if ratio is not None else "n/a (both fleets must run)"
    console.print(
        f"per-agent memory (a) / (b): {shown}"
        f"  (baseline ~{BASELINE_MB_PER_AGENT:.0f} MB per agent)",
        highlight=False,
    )
    g = doc["goals"]
    if g.get("judged_on"):
        console.print(f"goals, judged on {g['judged_on']}:", highlight=False)
        for name, text in (
            ("running_tasks", "≥ {goal} concurrently running agent tasks"),
            ("mb_per_agent", "≤ {goal} MB per agent (PSS)"),
            ("throughput_share", "throughput ≥ {goal:.0%} of the ideal"),
            ("worker_ms_per_call", "worker CPU ≤ {goal} ms per model call"),
            ("redis_ms_per_call", "Redis CPU ≤ {goal} ms per model call"),
            ("round_trips_per_task", "≤ {goal:.0f} round trips per agent task"),
            ("cli_cpu_s", "`redfleet --version`, `status`, `claims`, `logs` ≤ {goal} s of CPU"),
        ):
            if name not in g:
                continue
            goal = g[name]
            verdict = "MET" if goal["met"] else "NOT MET"
            console.print(f"  {text.format(goal=goal['goal'])}: got {goal['got']} — {verdict}",
                          highlight=False)  # fmt: skip
    for r in doc["loads"]:
        if r.get("orphans"):
            console.print(f"orphans after fleet ({r['fleet']}) {r['slots']}: {r['orphans']}")


def print_phases(doc: dict[str, Any], console: Console) -> None:
    """Worker CPU per model call by phase, and plain RQ's cost of a job beside the fleet's."""
    loads = [r for r in doc["loads"] if r.get("cpu", {}).get("phases_ms_per_call")]
    names = sorted({k for r in loads for k in r["cpu"]["phases_ms_per_call"]})
    if loads:
        table = Table(title="worker CPU per model call by phase (ms; as the workers count it)")
        for col in ("fleet", "procs x slots", *names, "total (process CPU)"):
            table.add_column(col, justify="left" if col == "fleet" else "right")
        for r in loads:
            ph = r["cpu"]["phases_ms_per_call"]
            table.add_row(f"({r['fleet']})", f"{r['processes']} x {r['slots_per_process']}",
                          *[f"{ph.get(n, 0)}" for n in names],
                          f"{r['cpu']['worker_ms_per_call']}")  # fmt: skip
        console.print(table)
    cli = doc.get("cli")
    if cli:
        table = Table(
            title=f"the CLI: CPU of one run (median of {CLI_RUNS}), goal ≤ {cli['goal_s']} s"
        )
        table.add_column("command")
        table.add_column("CPU s", justify="right")
        for name, cpu in cli["cpu_s"].items():
            table.add_row(name, f"{cpu}")
        console.print(table)
    rq = doc.get("plain_rq")
    last = next((r for r in reversed(doc["loads"]) if r.get("tasks_ended")), None)
    if rq and last:
        table = Table(title=f"beside plain RQ: {rq['jobs']} no-op jobs, {rq['processes']} workers")
        for col in ("", "round trips", "Redis commands", "Redis CPU", "worker CPU"):
            table.add_column(col, justify="left" if not col else "right")
        calls = last["calls"]["per_task"]
        table.add_row(f"fleet ({last['fleet']}) {last['processes']} x "
                      f"{last['slots_per_process']}, per agent task",
                      f"{last['redis']['round_trips_per_task']}", f"{last['redis']['per_task']}",
                      f"{(last['cpu']['redis_ms_per_call'] or 0) * calls:.3f} ms",
                      f"{(last['cpu']['worker_ms_per_call'] or 0) * calls:.2f} ms")  # fmt: skip
        table.add_row("plain RQ, per no-op job", f"{rq['round_trips_per_job']}",
                      f"{rq['commands_per_job']}", f"{rq['redis_ms_per_job']} ms",
                      f"{rq['worker_ms_per_job']} ms")  # fmt: skip
        console.print(table)


def _others(c: dict[str, Any]) -> float:
    """Busy CPU of the machine not accounted for by this run's processes (other users)."""
    ours = sum(c[k] for k in ("worker_s", "worker_children_s", "supervisor_s", "loopback_s",
                              "redis_s", "harness_s"))  # fmt: skip
    return round(c["machine_busy_s"] - ours, 1)


def print_overheads(doc: dict[str, Any], console: Console) -> None:
    """Where the time and CPU went, and what went wrong in the fleet, per load."""
    table = Table(title="fleet health and overheads (CPU seconds over the load)")
    columns = ("fleet", "procs x slots", "start-up", "hung kills start/load", "requeued",
               "run s (model s)", "idle workers", "workers", "pytest", "harness", "loopback",
               "redis", "machine busy (others)", "cmds/task net of idle")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col == "fleet" else "right")
    for r in doc["loads"]:
        if "running" not in r:
            continue
        c, f, calls = r["cpu"], r["fleet_events"], r["calls"]
        model_s = doc["params"]["delay_s"] * calls["answered"] / max(1, r["runs"])
        table.add_row(
            f"({r['fleet']})", f"{r['processes']} x {r['slots_per_process']}",
            f"{r['startup_s']} s", f"{r['startup_hung_kills']}/{f['hung_kills']}",
            f"{f['tasks_requeued']} ({f['scripts_rerun']} rerun)",
            f"{r['running']['mean_run_s']} ({model_s:.2f})",
            f"{r['idle']['worker_cpu_share']:.0%} of a core",
            f"{c['worker_s']}", f"{c['worker_children_s']}", f"{c['harness_s']}",
            f"{c['loopback_s']}", f"{c['redis_s']}",
            f"{c['machine_busy_s']} ({_others(c)})", f"{r['redis']['per_task_net_of_idle']}",
        )  # fmt: skip
    console.print(table)


# -- arguments -----------------------------------------------------------------------------------


def _counts(text: str) -> tuple[int, ...]:
    if text == "none":
        return ()
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 3:
        raise argparse.ArgumentTypeError(
            f"expected counts of at least 3, like 25,50,100 (or none): {text!r}"
        )
    return values


def _grid(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple(tuple(int(x) for x in v.split("x")) for v in text.split(",") if v.strip())
    except ValueError:
        pairs = ()
    if not pairs or any(len(p) != 2 or p[0] < 3 or p[1] < 1 for p in pairs):
        raise argparse.ArgumentTypeError(
            f"expected PROCESSESxSLOTS lists like 10x5,10x50: {text!r}"
        )
    return pairs  # type: ignore[return-value]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument(
        "--quick", action="store_true", help="one small load per fleet (a smoke run)"
    )
    parser.add_argument(
        "--delay-s",
        type=_positive,
        default=None,
        help="seconds the loopback model takes per call (default 2; --quick 0.3)",
    )
    parser.add_argument(
        "--loads-a",
        type=_counts,
        default=None,
        help="fleet (a) loads: worker processes (default 25,50,100; none: no fleet (a))",
    )
    parser.add_argument(
        "--loads-b",
        type=_grid,
        default=None,
        help="fleet (b) loads: PROCESSESxSLOTS (default 12x5,12x20,12x50)",
    )
    parser.add_argument(
        "--fanout",
        type=int,
        choices=range(1, 9),
        default=None,
        metavar="1..8",
        help="coders a job's planner dispatches (default 8)",
    )
    parser.add_argument(
        "--subagents",
        type=int,
        choices=range(7),
        default=None,
        metavar="0..6",
        help="subagents each coder spawns before writing (default 6; --quick 1)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="jobs per load: rounds x ceil(slots / (fanout x subagents)) (default 3)",
    )
    parser.add_argument("--lease-ms", type=int, default=10_000, help="the fleets' lease")
    parser.add_argument(
        "--log-level",
        choices=("warning", "info"),
        default="warning",
        help="the fleets' log level (info: fair-share yields are counted, at a cost)",
    )
    parser.add_argument("--rq-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--memory-margin-gb", type=float, default=2.0,
                        help="stop a load when less memory than this is available")  # fmt: skip
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "delay_s": 0.3 if quick else 2.0,
        "loads_a": (4,) if quick else (25, 50, 100),
        "loads_b": ((4, 2),) if quick else ((12, 5), (12, 20), (12, 50)),
        "fanout": 2 if quick else 8,
        "subagents": 1 if quick else 6,
        "rounds": 1 if quick else 3,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    return args


def _stop_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM or SIGHUP: unwind, so that every ``finally`` stops what this run started."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.rq_worker:
        rq_worker(args.url)
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    console = Console(stderr=True)
    doc = run(args, console)
    doc["params"] = {k: v for k, v in vars(args).items() if k not in ("json", "rq_worker", "url")}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, Console(width=max(Console().width, TABLE_WIDTH)))


if __name__ == "__main__":
    main()
