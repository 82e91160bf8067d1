"""The fleet supervisor behind ``redfleet up``: worker processes plus the reaper.

One OS process per worker (``redfleet worker --role R``), each serving one
role queue. A worker that dies is replaced (with a growing pause if it keeps
dying at once). The reaper runs in the supervisor's loop; it and the burst
check log a Redis error and try again next time, so an outage ends nothing.

A hung worker — one that stopped making progress (SIGSTOP, a stuck
heartbeat thread) — is killed with SIGKILL and replaced, logged as
``fleet.worker_hung``: every worker writes a byte to its liveness pipe each
heartbeat tick (a third of the lease) whether or not Redis answers, and one
silent for ``hung_after_s`` (three leases, at least 5 s) is hung. A worker
cut off from Redis still ticks, so a partition never gets it killed. One
still starting (no byte yet) has a 30 s grace, and after it is hung only if
it has also used no CPU for ``hung_after_s``: a hundred workers importing on
two cores are slow, not hung (up to ten graces).

SIGINT, SIGTERM or SIGHUP (a closed terminal) drains: each worker gets
SIGTERM (finish the current task, then exit), and whatever is still running
after ``drain_timeout_s`` is killed — its task is reclaimed by any fleet's
reaper after the lease. ``burst`` stops the fleet once no job is active
(nothing queued, claimed or waiting). Workers die with the supervisor: if it
is killed outright, each gets SIGHUP from the kernel (PR_SET_PDEATHSIG, bound
to the thread that started it — so only the thread running ``run`` starts
workers, and it ends only after they have) or notices its parent is gone, and
drains itself, giving its task up after ``drain_timeout_s``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import redis
import structlog

from shared_state import Role, State, StateError
from workers.heartbeat import SupervisorLink
from workers.llm import ProviderChoice

from .reaper import Reaper
from .settings import Settings

log = structlog.get_logger("redfleet.fleet")

_MAX_BACKOFF_S = 5.0
_QUICK_DEATH_S = 2.0
_HUNG_LEASES = 3  # a tick blocked in Redis calls delays the next byte by up to a lease
_HUNG_FLOOR_S = 5.0
# A worker starting (imports, the CLI's first connection, which retries through an
# outage) writes its first byte late: silence counts only after this, and after it
# only while the starting process also uses no CPU (see ``_Slot.starting``).
_STARTUP_GRACE_S = 30.0
# However busy, a worker that has not written its first byte after this long is hung
# (a busy loop in an import): ten graces.
_STARTUP_CAP_S = 10 * _STARTUP_GRACE_S


def provider_env(choice: ProviderChoice) -> tuple[tuple[str, str], ...]:
    """The environment that gives a fleet's workers ``choice`` (``FleetSpec.worker_env``)."""
    env = {"REDFLEET_PROVIDER": choice.provider.value, "REDFLEET_MODEL": choice.model,
           "REDFLEET_SCRIPT": choice.script,
           "REDFLEET_SUMMARY_MODEL": choice.summary_model}  # fmt: skip
    if choice.base_url:
        env["REDFLEET_BASE_URL"] = choice.base_url
    if choice.fallbacks:
        env["REDFLEET_FALLBACK"] = ",".join(str(f) for f in choice.fallbacks)
        env["REDFLEET_FALLBACK_AFTER_S"] = str(choice.fallback_after_s)
    env["REDFLEET_PROVIDER_WAIT_S"] = str(choice.wait_s)
    return tuple(env.items())


@dataclass(frozen=True)
class FleetSpec:
    planners: int = 1
    coders: int = 2
    reviewers: int = 1
    lease_ms: int = 10_000
    concurrency: int = 1  # task slots per worker process
    burst: bool = False
    reaper: bool = True
    worker_env: tuple[tuple[str, str], ...] = ()  # set for every worker (the provider's)
    startup_grace_s: float = _STARTUP_GRACE_S

    def roles(self) -> list[Role]:
        return (
            [Role.PLANNER] * self.planners
            + [Role.CODER] * self.coders
            + [Role.REVIEWER] * self.reviewers
        )

    @property
    def hung_after_s(self) -> float:
        """How long a worker may leave its liveness pipe silent before it counts as hung."""
        return max(_HUNG_LEASES * self.lease_ms / 1000, _HUNG_FLOOR_S)


def _cpu_ticks(pid: int) -> int | None:
    """The CPU time a process has used, in clock ticks; None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        return int(fields[11]) + int(fields[12])  # utime and stime: fields 14 and 15 of proc(5)
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class _Slot:
    role: Role
    process: subprocess.Popen[bytes] | None = None
    liveness: int = -1  # the read end of the worker's liveness pipe
    started: float = 0.0
    heard_at: float = 0.0  # monotonic: the worker last wrote to its pipe (or the grace ends)
    # No byte yet: still importing or connecting. Many workers starting at once on a
    # few cores can take longer than any grace; one that uses CPU is not hung.
    starting: bool = True
    cpu_ticks: int = -1  # its CPU time (utime + stime) when last looked at, while starting
    quick_deaths: int = 0
    restart_at: float = 0.0
    restarts: int = 0


@dataclass
class FleetReport:
    """What happened while the fleet ran (``redfleet up --json`` prints it)."""

    restarts: int = 0
    hung: int = 0
    reaped: int = 0
    dead: int = 0
    redelivered: int = 0


class Fleet:
    def __init__(
        self,
        state: State,
        redis_url: str,
        spec: FleetSpec,
        *,
        reap_interval_ms: int = 500,
        redeliver_after_ms: int = 5_000,
        drain_timeout_s: float = 30.0,
    ) -> None:
        self.state = state
        self.redis_url = redis_url
        self.spec = spec
        self.reap_interval_s = reap_interval_ms / 1000
        self.drain_timeout_s = drain_timeout_s
        self.reaper = Reaper(state, redeliver_after_ms=redeliver_after_ms)
        self.slots = [_Slot(role) for role in spec.roles()]
        self.stopping = threading.Event()
        self.report = FleetReport()

    @classmethod
    def from_settings(
        cls, state: State, redis_url: str, spec: FleetSpec, settings: Settings
    ) -> Fleet:
        return cls(
            state,
            redis_url,
            spec,
            reap_interval_ms=settings.reap_interval_ms,
            redeliver_after_ms=settings.redeliver_after_ms,
            drain_timeout_s=settings.drain_timeout_s,
        )

    def _spawn(self, slot: _Slot) -> None:
        liveness, beat_end = os.pipe()
        os.set_blocking(liveness, False)
        link = SupervisorLink(pid=os.getpid(), liveness_fd=beat_end, drain_s=self.drain_timeout_s)
        env = {
            **os.environ, **dict(self.spec.worker_env), "REDIS_URL": self.redis_url, **link.env()
        }  # fmt: skip
        # -P: never import from the current directory (a stray ./workers would shadow ours).
        command = [
            sys.executable, "-P", "-m", "coordinator", "worker",
            "--role", slot.role.value, "--lease-ms", str(self.spec.lease_ms),
            "--concurrency", str(self.spec.concurrency),
        ]  # fmt: skip
        try:
            # Own process group: a terminal's Ctrl-C or hangup reaches the supervisor only,
            # which drains the workers with one SIGTERM each (a second is RQ's cold stop).
            slot.process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, process_group=0, pass_fds=(beat_end,)
            )
        except BaseException:
            os.close(liveness)
            raise
        finally:
            os.close(beat_end)  # the worker's now: ours would hide its EOF and EPIPE
        slot.liveness = liveness
        slot.started = time.monotonic()
        slot.heard_at = slot.started + self.spec.startup_grace_s
        slot.starting, slot.cpu_ticks = True, -1
        log.info("fleet.worker_started", role=slot.role.value, pid=slot.process.pid)

    def _hung(self, slot: _Slot, now: float) -> bool:
        """Read what the worker wrote to its liveness pipe; True if it has been silent too long.

        Before its first byte, a worker whose CPU time grew since the last look
        counts as heard: it is still starting, not stopped or stuck; up to
        ``_STARTUP_CAP_S``, after which no start-up is slow, only hung.
        """
        try:
            if os.read(slot.liveness, 4096):
                slot.heard_at, slot.starting = now, False
        except BlockingIOError:
            pass  # nothing since the last look
        if slot.starting and now - slot.started > _STARTUP_CAP_S:
            return True
        if slot.starting and slot.process is not None:
            ticks = _cpu_ticks(slot.process.pid)
            if ticks is not None and ticks != slot.cpu_ticks:
                slot.cpu_ticks = ticks
                slot.heard_at = max(slot.heard_at, now)
        return now - slot.heard_at > self.spec.hung_after_s

    def _supervise(self, slot: _Slot) -> None:
        now = time.monotonic()
        if slot.process is None:
            if now >= slot.restart_at:
                self._spawn(slot)
            return
        if slot.process.poll() is None and self._hung(slot, now):
            log.warning(
                "fleet.worker_hung", role=slot.role.value, pid=slot.process.pid,
                silent_s=round(now - slot.heard_at, 2), bound_s=self.spec.hung_after_s,
            )  # fmt: skip
            slot.process.kill()
            slot.process.wait()
            self.report.hung += 1
        code = slot.process.poll()
        if code is None:
            return
        os.close(slot.liveness)
        lived = now - slot.started
        slot.quick_deaths = slot.quick_deaths + 1 if lived < _QUICK_DEATH_S else 0
        pause = min(_MAX_BACKOFF_S, 0.25 * 2**slot.quick_deaths) if slot.quick_deaths else 0
        log.warning(
            "fleet.worker_died", role=slot.role.value, pid=slot.process.pid, code=code,
            lived_s=round(lived, 2), restart_in_s=pause,
        )  # fmt: skip
        slot.process = None
        slot.restart_at = now + pause
        slot.restarts += 1
        self.report.restarts += 1

    def _idle(self) -> bool:
        try:
            return not self.state.jobs.active()
        except redis.RedisError as exc:
            log.warning("fleet.check_failed", error=str(exc))
            return False

    def request_stop(self, *_: object) -> None:
        self.stopping.set()

    def run(self) -> FleetReport:
        """Supervise until stopped (signal, ``request_stop``, or burst done)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, self.request_stop)
        next_reap = 0.0
        try:
            while not self.stopping.is_set():
                for slot in self.slots:
                    self._supervise(slot)
                if self.spec.reaper and time.monotonic() >= next_reap:
                    self._reap()
                    next_reap = time.monotonic() + self.reap_interval_s
                if self.spec.burst and self._idle():
                    break
                self.stopping.wait(0.1)
        finally:
            self._drain()
        return self.report

    def _reap(self) -> None:
        try:
            rep = self.reaper.tick()
        except (redis.RedisError, StateError) as exc:
            # Redis restarting or failing over: keep supervising, try next tick.
            log.warning("fleet.reap_failed", error=str(exc))
            return
        self.report.reaped += len(rep.requeued) + len(rep.dead)
        self.report.dead += len(rep.dead)
        self.report.redelivered += len(rep.redelivered)

    def _drain(self) -> None:
        running = [s.process for s in self.slots if s.process and s.process.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.drain_timeout_s
        for proc in running:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("fleet.worker_killed", pid=proc.pid, why="drain timeout")
                proc.kill()
                proc.wait()
        for slot in self.slots:
            if slot.process is not None:
                os.close(slot.liveness)
        log.info(
            "fleet.stopped", workers=len(self.slots), restarts=self.report.restarts,
            hung=self.report.hung,
        )  # fmt: skip
