"""A benchmark fleet's worker processes: the ones running now, and those it left behind."""

from __future__ import annotations

import contextlib

import psutil


def workers_of(supervisor: int, seen: dict[int, float]) -> list[psutil.Process]:
    """The worker processes under ``supervisor`` now; each is added to ``seen``
    (pid -> create time), for ``still_running`` after the fleet stopped."""
    try:
        children = psutil.Process(supervisor).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for proc in children:
        with contextlib.suppress(psutil.Error):
            if "worker" in proc.cmdline():
                seen.setdefault(proc.pid, proc.create_time())
                found.append(proc)
    return found


def still_running(seen: dict[int, float]) -> list[int]:
    """The pids of ``seen`` still running: not exited, not a zombie, not a new process that
    was given a reused pid."""
    alive = []
    for pid, created in seen.items():
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive
