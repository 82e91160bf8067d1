"""Real ``redfleet up`` processes for the supervisor and partition tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil

from shared_state import Role, State, TaskStatus, WorkerInfo


class Up:
    """A real ``redfleet up`` process; the JSON log lines of it and its workers, as they come."""

    def __init__(self, redis_url: str, *args: str) -> None:
        env = {**os.environ, "REDIS_URL": redis_url, "REDFLEET_LOG_LEVEL": "info"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "up", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[tuple[float, dict[str, Any]]] = []  # (monotonic arrival, event)
        self.plain: list[str] = []  # lines that are not JSON objects (nothing should be)
        self.seen: set[int] = set()  # every worker pid ever listed, for the clean-up
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        decoder = json.JSONDecoder()
        for raw in self.proc.stderr:  # until the supervisor and every worker closed it
            # Decoded object by object: a line that is not one JSON object (a
            # traceback) is skipped, never taken for the next event.
            text, at = raw.decode(errors="replace").strip(), time.monotonic()
            while text.startswith("{"):
                try:
                    doc, end = decoder.raw_decode(text)
                except ValueError:
                    break
                self.lines.append((at, doc))
                text = text[end:].lstrip()
            if text:
                self.plain.append(text)

    def logged(self, event: str, **fields: Any) -> list[tuple[float, dict[str, Any]]]:
        return [
            (at, doc)
            for at, doc in list(self.lines)
            if doc.get("event") == event and all(doc.get(k) == v for k, v in fields.items())
        ]

    def worker_pids(self) -> set[int]:
        try:
            pids = {child.pid for child in psutil.Process(self.proc.pid).children()}
        except psutil.NoSuchProcess:
            return set()
        self.seen |= pids
        return pids

    def registered(self, state: State, count: int) -> list[WorkerInfo] | None:
        """Its ``count`` workers once each of them is in the worker index, else None."""
        pids = self.worker_pids()
        listed = [w for w in state.workers.list() if w.pid in pids]
        return listed if len(pids) == count and len(listed) == count else None

    def stop(self, timeout_s: float = 40.0) -> int:
        """SIGTERM (a drain), then the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def report(self) -> dict[str, Any]:
        """What ``up --json`` printed when it exited."""
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.read())


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def launching() -> Iterator[Callable[..., Up]]:
    """Start ``redfleet up`` processes; on exit none of them nor their workers runs."""
    started: list[Up] = []

    def start(redis_url: str, *args: str) -> Up:
        started.append(Up(redis_url, *args))
        return started[-1]

    try:
        yield start
    finally:
        for up in started:
            up.worker_pids()
            try:
                up.stop()
            except subprocess.TimeoutExpired:
                up.proc.kill()
                up.proc.wait()
            for pid in up.seen:
                with contextlib.suppress(psutil.NoSuchProcess):
                    psutil.Process(pid).kill()


@dataclass(frozen=True)
class Held:
    """A task a live worker holds, as its heartbeat says."""

    worker_id: str
    pid: int
    task_id: str


def busy(state: State, job_id: str, role: Role) -> list[Held]:
    """One entry per live claim a worker of ``role`` holds on the job's tasks.

    A worker with several slots appears once per task it holds.
    """
    found = []
    for w in state.workers.list():
        if w.role is not role:
            continue
        for held in w.tasks.split():
            held_job, _, task_id = held.partition("/")
            if held_job != job_id:
                continue
            task = state.tasks.get(job_id, task_id)
            if task.status == TaskStatus.CLAIMED and task.owner == w.worker_id:
                found.append(Held(w.worker_id, w.pid, task_id))
    return found
