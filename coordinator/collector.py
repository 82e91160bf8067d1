"""A command's start, with Python's cyclic garbage collector held off.

A CLI command first imports what it runs (``redfleet status``: the views,
pydantic, redis-py, rich) and keeps all of it until it exits. None of that is
garbage, yet the collector walks it again and again as it grows: ~25 of the
~230 ms of CPU a ``status`` takes, one full collection alone ~13 ms. So
``cli.main`` holds the collector off (``hold``), and the command's state,
once open (``connection.open_state``: its imports are done by then), lets it
run again (``release``) with what the start loaded moved out of its sight
(``gc.freeze``, as a worker does after its preload): a command that runs
for hours (a fleet, a worker, ``logs --follow``) collects as any process does.
"""

from __future__ import annotations

import gc

_held = False  # the collector is off because ``hold`` turned it off


def hold() -> None:
    """Turn the collector off for a command's start (if on: else nobody's to undo)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release(*, freeze: bool = True) -> None:
    """Turn the collector back on if ``hold`` turned it off; ``freeze``: what is alive
    now lives until the process exits (a command's imports), so no collection walks it.
    ``cli.main`` releases without freezing as it returns: a process that calls it in
    turn (a test) may drop what it holds."""
    global _held
    if _held:
        _held = False
        if freeze:
            gc.freeze()
        gc.enable()
