"""Fault injection for tests and drills: kill this process at a named point.

``REDFLEET_FAILPOINTS`` lists points, comma-separated. A worker reaching a
listed point sends itself SIGKILL — a real crash, with no cleanup, exactly
what a lost machine looks like to the rest of the fleet. ``name@path`` fires
once across processes: only the first to create ``path`` dies, so the
replacement worker survives to resume the task.

    journal.after-intent.<tool>   a journaled call's intent is recorded, its effect not yet made
    journal.after-effect.<tool>   its effect is made, its result not yet recorded
"""

from __future__ import annotations

import os
import signal

ENV = "REDFLEET_FAILPOINTS"


def reach(point: str) -> None:
    for item in filter(None, os.environ.get(ENV, "").split(",")):
        name, _, once = item.strip().partition("@")
        if name != point:
            continue
        if once:
            try:
                os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue
        os.kill(os.getpid(), signal.SIGKILL)
