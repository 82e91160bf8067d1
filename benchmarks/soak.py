"""Soak: a real fleet under a steady stream of jobs while faults are injected on a schedule.

Everything runs on a private redis-server with an append-only file in a
temporary folder (never the machine's own Redis), stopped at the end:

- the fleet is ``redfleet up`` in a subprocess (supervisor, worker processes,
  the reaper), as a user runs it; its ``REDIS_URL`` points at a
  ``FaultProxy`` (``tests/proxy.py``) in front of Redis, so dropped replies
  and stalls reach every worker and the reaper;
- this process submits jobs straight to Redis at ``--rate`` jobs/s for
  ``--duration`` s: scenario noop, a ``--slow-share`` of them slow (~3 s a
  task), fanout 2 or 3, kept ``--retention`` s once finished;
- every ``--fault-every`` s one fault, in a seeded rotation of ``--faults``:
  ``redis_kill`` (SIGKILL, restarted on the same port and append-only file
  after ``--outage`` s), ``worker_kill`` (SIGKILL), ``worker_stop`` (SIGSTOP,
  SIGCONT after ``--stop-s`` s, longer than the lease: the worker wakes up a
  zombie), ``drop_reply`` (the next reply to a claim, completion, spawn,
  renewal or RQ dequeue is lost and its connection cut), ``stall`` (no byte
  moves for ``--stall-s`` s) and ``sever`` (every connection cut).

Then submitting and faults stop, and the fleet drains for up to ``--drain``
s; a job still unfinished is running if during ``--observe`` s more one of
its tasks changes status, token, attempt or stage, or if every queued task of
it has its envelope waiting in its queue (a backlog, served in turn). After
the jobs' retention and the finished envelopes' expiry the keys are counted
again, by family. Last, the fleet gets SIGTERM (a user's Ctrl-C) and every
worker process seen during the run that is still alive once it exited is an
orphan.

Reported: jobs submitted (and submits left unconfirmed or refused),
succeeded, failed, cancelled, finished per second, running, lost (neither
finished nor running at the end; of which stuck — still active — and records
gone), tasks that succeeded twice (``task.succeeded`` events per task id in
each job stream, read as the job finishes; must be 0), orphan processes,
worker restarts and reaps (the fleet's report), faults by kind, and Redis
``used_memory`` and key count before the first job, at the peak and after
retention.

A measurement, not a test: the exit code is 0 whatever it finds (2 for a
usage error).

Run:  .venv/bin/python benchmarks/soak.py [--json] [--rate R] [--duration S]
          [--faults K,K] [--fault-every S] [--retention S] [--drain S] [--seed N]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis
from fleet_procs import still_running, workers_of
from rich.console import Console
from rich.table import Table

from shared_state import (
    JobSpec,
    RedisServer,
    Role,
    Scenario,
    State,
    StateError,
    SubmitUnconfirmed,
    TaskStatus,
    keys,
)
from shared_state.delivery import RESULT_TTL_S
from shared_state.scripts import SCRIPTS

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ("redis_kill", "worker_kill", "worker_stop", "drop_reply", "stall", "sever")
# What a lost reply hits: the scripts a worker's progress hangs on, and RQ's dequeue.
NEEDLES = {
    **{
        name: SCRIPTS[name].sha.encode()
        for name in ("claimTask", "completeTask", "spawnChildren", "renewLease")
    },
    "BLMOVE": b"BLMOVE",
}
FINISHED = ("succeeded", "failed", "cancelled")
POLL_S = 0.25


def _fault_proxy() -> type:
    """``FaultProxy`` from tests/proxy.py, which is not part of the installed packages."""
    spec = importlib.util.spec_from_file_location("_soak_proxy", ROOT / "tests" / "proxy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FaultProxy


def _quiet_client(url: str) -> redis.Redis:
    """For sampling: fails fast (no retries) so a Redis outage only skips samples."""
    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


def _sample(client: redis.Redis) -> dict[str, int]:
    pipe = client.pipeline(transaction=False)
    pipe.dbsize()
    pipe.info("memory")
    n, memory = pipe.execute()
    return {"keys": n, "used_memory": memory["used_memory"]}


# -- the rig: Redis, the proxy, the fleet ----------------------------------------------


class Rig:
    """A private Redis with its append-only file, the fault proxy and a ``redfleet up``."""

    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.folder = folder
        self.server = RedisServer(data_dir=folder / "redis").start()
        self.proxy = _fault_proxy()(self.server.port).start()
        self.fleet: subprocess.Popen[bytes] | None = None
        self.out_path = folder / "fleet.json"
        self.log_path = folder / "fleet.log"
        self.seen: dict[int, float] = {}  # worker pid -> its create time (pids get reused)

    @property
    def url(self) -> str:
        return self.server.url

    def start_fleet(self) -> None:
        a = self.args
        env = {
            **os.environ,
            "REDIS_URL": self.proxy.url,
            "REDFLEET_HOME": str(self.folder / "home"),
            "REDFLEET_LOG_LEVEL": "warning",
            "REDFLEET_REAP_INTERVAL_MS": "500",
            "REDFLEET_REDELIVER_AFTER_MS": str(max(1_000, a.lease_ms)),
            "REDFLEET_DRAIN_TIMEOUT_S": "10",
        }
        command = [
            sys.executable, "-P", "-m", "coordinator", "up", "--json",
            "--planners", str(a.planners), "--coders", str(a.coders),
            "--reviewers", str(a.reviewers), "--lease-ms", str(a.lease_ms),
        ]  # fmt: skip
        # Files, not pipes: the workers inherit both, and a full pipe would block them.
        with self.out_path.open("wb") as out, self.log_path.open("wb") as log:
            self.fleet = subprocess.Popen(
                command, env=env, cwd=self.folder, stdin=subprocess.DEVNULL, stdout=out, stderr=log
            )

    def workers(self) -> list[psutil.Process]:
        """The fleet's worker processes now (also remembered for the orphan check)."""
        return workers_of(self.fleet.pid, self.seen)

    def kill_redis(self) -> None:
        self.server.process.kill()
        self.server.process.wait()

    def restart_redis(self) -> None:
        """The same port and folder: the server loads its append-only file."""
        self.server = RedisServer(port=self.server.port, data_dir=self.folder / "redis").start(
            timeout_s=60
        )

    def stop_fleet(self) -> dict[str, Any]:
        """SIGTERM (a user's Ctrl-C); the fleet's ``--json`` report, and how it ended."""
        ended: dict[str, Any] = {"report": None, "exit_code": None, "killed": False}
        if self.fleet is None:
            return ended
        self.fleet.send_signal(signal.SIGTERM)
        try:
            self.fleet.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fleet.kill()
            self.fleet.wait()
            ended["killed"] = True
        ended["exit_code"] = self.fleet.returncode
        with contextlib.suppress(ValueError):
            ended["report"] = json.loads(self.out_path.read_text())
        return ended

    def orphans(self) -> list[int]:
        """Worker processes seen during the run that are still alive."""
        return still_running(self.seen)

    def close(self) -> None:
        for pid in self.orphans():  # ours: started by this run's fleet
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        if self.fleet is not None and self.fleet.poll() is None:
            self.fleet.kill()
            self.fleet.wait()
        self.proxy.stop()
        self.server.stop()


# -- submitting, following, sampling ----------------------------------------------------


class Submitter(threading.Thread):
    """Submits at a steady rate, straight to Redis (riding out its restarts)."""

    def __init__(self, url: str, args: argparse.Namespace, rng: random.Random) -> None:
        super().__init__(name="soak-submitter", daemon=True)
        self.state = State.connect(url, retention_s=args.retention)
        self.args = args
        self.rng = rng
        self.jobs: dict[str, Scenario] = {}
        self.unconfirmed: list[str] = []
        self.refused = 0
        self._lock = threading.Lock()

    def spec(self) -> JobSpec:
        slow = self.rng.random() < self.args.slow_share
        scenario = Scenario.SLOW if slow else Scenario.NOOP
        return JobSpec(goal="soak", scenario=scenario, fanout=self.rng.choice((2, 3)))

    def run(self) -> None:
        start = time.monotonic()
        total = int(self.args.rate * self.args.duration)
        for i in range(total):
            # A fixed schedule: after an outage the backlog goes in at once, as clients' would.
            time.sleep(max(0.0, start + i / self.args.rate - time.monotonic()))
            spec = self.spec()
            try:
                job = self.state.jobs.submit(spec)
            except SubmitUnconfirmed as exc:
                self.unconfirmed.append(exc.job_id)
            except (StateError, redis.RedisError):
                self.refused += 1
            else:
                with self._lock:
                    self.jobs[job.job_id] = spec.scenario

    def submitted(self) -> list[str]:
        with self._lock:
            return list(self.jobs)


class Follower(threading.Thread):
    """Reads each job's stream as it finishes, before its retention ends."""

    def __init__(self, url: str, submitter: Submitter) -> None:
        super().__init__(name="soak-follower", daemon=True)
        self.state = State.connect(url)
        self.submitter = submitter
        self.outcomes: dict[str, str] = {}
        self.succeeded: dict[str, Counter[str]] = {}  # job id -> task.succeeded per task
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def pending(self) -> list[str]:
        with self._lock:
            return [j for j in self.submitter.submitted() if j not in self.outcomes]

    def run(self) -> None:
        while not self.stopping.wait(POLL_S):
            try:
                self.poll()
            except (StateError, redis.RedisError):
                continue  # Redis restarting: the next poll catches up

    def poll(self) -> None:
        ids = self.pending()
        pipe = self.state.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(keys.job(job_id), "status")
        for job_id, status in zip(ids, pipe.execute(), strict=True):
            if status is not None and status.decode() in FINISHED:
                self.read_events(job_id)
                with self._lock:
                    self.outcomes[job_id] = status.decode()

    def read_events(self, job_id: str) -> None:
        events = self.state.events.read(job_id, last=100_000)
        if events:
            done = Counter(e.task_id for e in events if e.event == "task.succeeded")
            self.succeeded[job_id] = done


class Sampler(threading.Thread):
    """Key count and memory every tick, and the fleet's worker processes."""

    def __init__(self, rig: Rig) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.rig = rig
        self.peak = {"keys": 0, "used_memory": 0}
        self.stopping = threading.Event()

    def run(self) -> None:
        client = _quiet_client(self.rig.url)
        while not self.stopping.wait(POLL_S):
            self.rig.workers()
            try:
                now = _sample(client)
            except redis.RedisError:
                continue
            for k in self.peak:
                self.peak[k] = max(self.peak[k], now[k])
        client.close()


# -- faults --------------------------------------------------------------------------


@dataclass
class Faults:
    """Injects one fault per slot; undoes timed ones (SIGCONT, resume) when due."""

    rig: Rig
    args: argparse.Namespace
    rng: random.Random
    injected: list[dict[str, Any]] = field(default_factory=list, init=False)
    _undo: list[tuple[float, Callable[[], None]]] = field(default_factory=list, init=False)

    def schedule(self) -> list[str]:
        kinds = list(self.args.faults)
        self.rng.shuffle(kinds)
        slots = int(self.args.duration / self.args.fault_every)
        return [kinds[i % len(kinds)] for i in range(slots)]

    def inject(self, kind: str, at: float) -> None:
        detail = getattr(self, f"_{kind}")()
        self.injected.append({"at_s": round(at, 2), "kind": kind, "detail": detail})

    def undo_due(self, *, everything: bool = False) -> None:
        now = time.monotonic()
        for entry in [u for u in self._undo if everything or u[0] <= now]:
            self._undo.remove(entry)
            with contextlib.suppress(OSError):
                entry[1]()

    def _victim(self) -> psutil.Process | None:
        running = []
        for proc in self.rig.workers():
            with contextlib.suppress(psutil.Error):
                if proc.status() != psutil.STATUS_STOPPED:
                    running.append(proc)
        return self.rng.choice(running) if running else None

    def _redis_kill(self) -> str:
        self.rig.kill_redis()
        time.sleep(self.args.outage)
        self.rig.restart_redis()
        return f"down {self.args.outage} s"

    def _worker_kill(self) -> str:
        victim = self._victim()
        if victim is None:
            return "no worker running"
        os.kill(victim.pid, signal.SIGKILL)
        return f"pid {victim.pid}"

    def _worker_stop(self) -> str:
        victim = self._victim()
        if victim is None:
            return "no worker running"
        os.kill(victim.pid, signal.SIGSTOP)
        wake = time.monotonic() + self.args.stop_s
        self._undo.append((wake, lambda pid=victim.pid: os.kill(pid, signal.SIGCONT)))
        return f"pid {victim.pid} for {self.args.stop_s} s"

    def _drop_reply(self) -> str:
        name = self.rng.choice(sorted(NEEDLES))
        self.rig.proxy.drop_reply(NEEDLES[name])
        return name

    def _stall(self) -> str:
        self.rig.proxy.stall()
        self._undo.append((time.monotonic() + self.args.stall_s, self.rig.proxy.resume))
        return f"{self.args.stall_s} s"

    def _sever(self) -> str:
        self.rig.proxy.sever()
        return "every connection"


# -- the run ---------------------------------------------------------------------------


def _marks(state: State, job_ids: list[str]) -> dict[str, Any]:
    """What moves as a job progresses: its status; each task's status, token, attempt, stage."""
    marks = {}
    for job_id in job_ids:
        status = state.client.hget(keys.job(job_id), "status")
        tasks = state.tasks.list(job_id)
        marks[job_id] = (
            status,
            sorted((t.task_id, t.status, t.token, t.attempt, t.stage) for t in tasks),
        )
    return marks


def _family(key: str) -> str:
    """A key's family: ids replaced by a placeholder (``rf:{job}:task``, ``rq:job``)."""
    if key.startswith("rf:{workers}:"):
        return key if key == keys.WORKERS else "rf:{workers}:<worker>"
    job_key = re.match(r"rf:\{[^}]+\}:(\w+)", key)
    if job_key:
        return f"rf:{{job}}:{job_key.group(1)}"
    if key.startswith("rq:"):
        return ":".join(key.split(":")[:2])
    return key


def _census(client: redis.Redis) -> dict[str, Any]:
    families = Counter(_family(k.decode()) for k in client.scan_iter(count=1000))
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.JOBS)
    pipe.scard(keys.ACTIVE_JOBS)
    pipe.zcard(keys.EXPIRING_JOBS)
    pipe.zcard(keys.WORKERS)
    pipe.xlen(keys.EVENTS)  # capped, not expired: most of what stays after retention
    names = ("jobs", "active", "expiring", "workers", "global events")
    indexes = dict(zip(names, pipe.execute(), strict=True))
    return {"by_family": dict(families.most_common()), "indexes": indexes}


def _wait(condition: Callable[[], bool], timeout_s: float) -> float:
    """Poll until ``condition`` or ``timeout_s``; the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s and not condition():
        time.sleep(POLL_S)
    return round(time.monotonic() - start, 2)


def _in_backlog(state: State, job_ids: list[str]) -> set[str]:
    """Jobs whose queued tasks all have their envelope waiting in its queue: served in turn."""
    in_queue = state.delivery.waiting_ids(set(Role))
    found = set()
    for job_id in job_ids:
        queued = [t.task_id for t in state.tasks.list(job_id) if t.status is TaskStatus.QUEUED]
        pipe = state.client.pipeline(transaction=False)
        for task_id in queued:
            pipe.hget(keys.task(job_id, task_id), "envelope")
        if queued and all(e in in_queue for e in pipe.execute()):
            found.add(job_id)
    return found


class Soak:
    """One run, step by step: start, soak, drain, watch, settle, stop, report."""

    def __init__(self, rig: Rig, args: argparse.Namespace, console: Console) -> None:
        self.rig = rig
        self.args = args
        self.console = console
        self.observer = State.connect(rig.url)
        self.submitter = Submitter(rig.url, args, random.Random(args.seed))
        self.follower = Follower(rig.url, self.submitter)
        self.sampler = Sampler(rig)
        self.faults = Faults(rig, args, random.Random(args.seed + 1))
        self.doc: dict[str, Any] = {}
        self.unfinished: list[str] = []
        self.moving: set[str] = set()
        self.queued: set[str] = set()
        self.active: set[str] = set()  # the active set, and the unfinished with records, at the end
        self.records: set[str] = set()

    def run(self) -> dict[str, Any]:
        try:
            self.start()
            self.soak()
            self.drain()
            self.watch()
            self.settle()
            self.stop()
            return self.report()
        finally:
            self.observer.client.close()

    def start(self) -> None:
        client = self.observer.client
        self.doc["redis"] = {
            "version": client.info("server")["redis_version"],
            "appendfsync": client.config_get("appendfsync")["appendfsync"],
        }
        self.rig.start_fleet()
        a = self.args
        workers = a.planners + a.coders + a.reviewers
        with self.console.status("starting the fleet"):
            _wait(lambda: len(self.observer.workers.list()) >= workers, 60)
        self.doc["memory"] = {"before": _sample(client)}

    def soak(self) -> None:
        """Submit at the rate while injecting the faults on their schedule."""
        a, faults = self.args, self.faults
        for thread in (self.sampler, self.follower, self.submitter):
            thread.start()
        start = time.monotonic()
        with self.console.status(f"soaking: {a.rate} jobs/s for {a.duration} s with faults"):
            for slot, kind in enumerate(faults.schedule(), start=1):
                due = start + slot * a.fault_every
                while time.monotonic() < due:
                    faults.undo_due()
                    time.sleep(min(POLL_S, max(0.0, due - time.monotonic())))
                faults.inject(kind, time.monotonic() - start)
            while self.submitter.is_alive():
                faults.undo_due()
                self.submitter.join(POLL_S)
            faults.undo_due(everything=True)
        self.doc["timings_s"] = {"submit": round(time.monotonic() - start, 2)}

    def drain(self) -> None:
        with self.console.status(f"draining (up to {self.args.drain} s)"):
            waited = _wait(lambda: not self.follower.pending(), self.args.drain)
        self.doc["timings_s"]["drain"] = waited
        self.unfinished = self.follower.pending()

    def watch(self) -> None:
        """Which unfinished jobs still move, or wait in a queue behind others."""
        if self.unfinished:
            n, seconds = len(self.unfinished), self.args.observe
            with self.console.status(f"watching {n} unfinished job(s) for {seconds} s"):
                first = _marks(self.observer, self.unfinished)
                time.sleep(seconds)
                self.follower.poll()
                self.unfinished = self.follower.pending()
                last = _marks(self.observer, self.unfinished)
            self.moving = {j for j in self.unfinished if last[j] != first[j]}
            still = [j for j in self.unfinished if j not in self.moving]
            self.queued = _in_backlog(self.observer, still)
        self.follower.stopping.set()
        self.follower.join()
        for job_id in self.unfinished:  # their streams too, for tasks succeeded twice
            self.follower.read_events(job_id)

    def settle(self) -> None:
        """Wait out the retention and the envelopes' expiry, then count what is left."""
        wait = self.args.retention + RESULT_TTL_S + 3
        with self.console.status(f"waiting {wait} s: retention, envelope expiry, reaper ticks"):
            time.sleep(wait)
        self.doc["timings_s"]["settle"] = wait
        self.doc["memory"]["after"] = _sample(self.observer.client)
        self.doc["after"] = _census(self.observer.client)
        self.sampler.stopping.set()
        self.sampler.join()
        self.doc["memory"]["peak"] = self.sampler.peak

    def stop(self) -> None:
        client = self.observer.client
        self.active = {j.decode() for j in client.smembers(keys.ACTIVE_JOBS)}
        self.records = {j for j in self.unfinished if client.exists(keys.job(j))}
        with self.console.status("stopping the fleet (SIGTERM)"):
            self.doc["fleet"] = self.rig.stop_fleet()
            time.sleep(2)  # a worker told to exit with its supervisor takes a moment
            self.doc["orphans"] = self.rig.orphans()
        self.doc["worker_processes_seen"] = len(self.rig.seen)

    def report(self) -> dict[str, Any]:
        sub, follower, faults = self.submitter, self.follower, self.faults
        outcomes = Counter(follower.outcomes.values())
        lost = [j for j in self.unfinished if j not in self.moving | self.queued]
        twice = {
            f"{job_id}/{task_id}": n
            for job_id, counts in follower.succeeded.items()
            for task_id, n in counts.items()
            if n > 1
        }
        finished = sum(outcomes.values())
        busy_s = self.doc["timings_s"]["submit"] + self.doc["timings_s"]["drain"]
        self.doc["jobs"] = {
            "submitted": len(sub.jobs),
            "slow": sum(s is Scenario.SLOW for s in sub.jobs.values()),
            "unconfirmed": len(sub.unconfirmed),
            "refused": sub.refused,
            **{status: outcomes.get(status, 0) for status in FINISHED},
            "finished_per_s": round(finished / busy_s, 1) if busy_s else 0.0,
            "running": len(self.moving) + len(self.queued),
            "moving": len(self.moving),
            "in_queue": len(self.queued),
            "lost": len(lost),
            "stuck": sum(j in self.active and j in self.records for j in lost),
            "records_gone": sum(j not in self.records for j in lost),
            "streams_unread": sum(j not in follower.succeeded for j in follower.outcomes),
        }
        self.doc.update(
            tasks_succeeded_twice=sum(n - 1 for n in twice.values()),
            twice=dict(list(twice.items())[:20]),
            lost_ids=lost[:20],
            faults=dict(Counter(f["kind"] for f in faults.injected)),
            fault_log=faults.injected,
            replies={"dropped": self.rig.proxy.dropped, "drops_unused": self.rig.proxy.armed()},
        )
        return self.doc


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="redfleet-soak-") as tmp:
        rig = Rig(args, Path(tmp))
        try:
            return Soak(rig, args, console).run()
        finally:
            rig.close()


# -- the report --------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def print_table(doc: dict[str, Any], console: Console) -> None:
    p, j = doc["params"], doc["jobs"]
    title = (
        f"redfleet soak: {p['rate']} jobs/s for {p['duration']} s, faults every "
        f"{p['fault_every']} s (redis {doc['redis']['version']}, "
        f"appendfsync {doc['redis']['appendfsync']})"
    )
    table = Table(title=title)
    for col in ("measurement", "value", "detail"):
        table.add_column(col, justify="right" if col == "value" else "left")
    report = doc["fleet"]["report"] or {}
    m = doc["memory"]
    rows = [
        ("jobs submitted", j["submitted"],
         f"{j['slow']} slow; {j['unconfirmed']} unconfirmed, {j['refused']} refused submits"),
        ("succeeded", j["succeeded"], ""),
        ("failed", j["failed"], f"{report.get('dead', '?')} task(s) dead"),
        ("cancelled", j["cancelled"], ""),
        ("finished per second", j["finished_per_s"],
         f"over submit + drain ({doc['timings_s']['drain']} s of drain)"),
        ("running at the end", j["running"],
         f"{j['moving']} moving, {j['in_queue']} waiting in a queue"),
        ("lost", j["lost"], f"{j['stuck']} stuck (active, no task moves), "
         f"{j['records_gone']} with records gone"),
        ("tasks succeeded twice", doc["tasks_succeeded_twice"],
         f"must be 0; {j['streams_unread']} finished job stream(s) unread"),
        ("orphan processes", len(doc["orphans"]),
         f"of {doc['worker_processes_seen']} worker processes seen"),
        ("worker restarts", report.get("restarts", "?"),
         f"reaped {report.get('reaped', '?')}, redelivered {report.get('redelivered', '?')}"),
    ]  # fmt: skip
    for name, value, detail in rows:
        table.add_row(name, str(value), detail)
    table.add_section()
    for kind, n in doc["faults"].items():
        extra = ""
        if kind == "drop_reply":
            extra = f"{doc['replies']['dropped']} replies lost"
        table.add_row(f"fault: {kind}", str(n), extra)
    table.add_section()
    for phase in ("before", "peak", "after"):
        table.add_row(
            f"redis {phase}",
            f"{m[phase]['keys']:,} keys",
            _mb(m[phase]["used_memory"]),
        )
    top = ", ".join(f"{k} {n}" for k, n in list(doc["after"]["by_family"].items())[:8])
    table.add_row("keys after, by family", "", top)
    idx = doc["after"]["indexes"]
    table.add_row("indexes after", "", ", ".join(f"{k} {v}" for k, v in idx.items()))
    console.print(table)


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}")
    return value


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULTS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fault(s) {unknown or text!r}; choose from {', '.join(FAULTS)}"
        )
    return kinds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    num, whole = _positive(float), _positive(int)
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--rate", type=num, default=20.0, help="jobs submitted per second")
    parser.add_argument("--duration", type=num, default=60.0, help="seconds of submitting")
    parser.add_argument("--slow-share", type=_share, default=0.02, help="share of slow jobs")
    parser.add_argument(
        "--faults", type=_kinds, default=FAULTS, help=f"comma-separated, of {', '.join(FAULTS)}"
    )
    parser.add_argument("--fault-every", type=num, default=5.0, help="seconds between faults")
    parser.add_argument("--outage", type=num, default=2.0, help="seconds Redis stays down")
    parser.add_argument("--stop-s", type=num, default=5.0, help="seconds a worker stays stopped")
    parser.add_argument("--stall-s", type=num, default=3.0, help="seconds a stall lasts")
    parser.add_argument("--lease-ms", type=whole, default=3_000, help="the fleet's lease")
    parser.add_argument("--retention", type=whole, default=8, help="seconds finished jobs stay")
    parser.add_argument("--drain", type=num, default=120.0, help="seconds to wait for the jobs")
    parser.add_argument("--observe", type=num, default=10.0, help="seconds to watch for progress")
    parser.add_argument("--planners", type=whole, default=2)
    parser.add_argument("--coders", type=whole, default=4)
    parser.add_argument("--reviewers", type=whole, default=2)
    parser.add_argument("--seed", type=int, default=1, help="seed of the jobs and faults")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    console = Console(stderr=args.json)
    doc = run(args, console)
    doc["params"] = {k: v for k, v in vars(args).items() if k != "json"}
    doc["params"]["faults"] = list(args.faults)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, console)


if __name__ == "__main__":
    main()
