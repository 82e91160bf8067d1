"""Worker processes a benchmark's fleet left behind."""

from __future__ import annotations

import contextlib

import psutil


def still_running(seen: dict[int, float]) -> list[int]:
    """The pids of ``seen`` (pid -> create time) still running: not exited, not a zombie,
    not a new process that was given a reused pid."""
    alive = []
    for pid, created in seen.items():
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive
