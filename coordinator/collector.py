"""A command's start, with Python's cyclic garbage collector held off.

A CLI command first imports what it runs (``redfleet status``: the views,
pydantic, redis-py, rich) and keeps all of it until it exits. None of that is
garbage, yet the collector walks it again and again as it grows: ~25 of the
~230 ms of CPU a ``status`` takes, one full collection alone ~13 ms. So
``cli.main`` holds the collector off (``hold``), and the command's state,
once open (``connection.open_state``: its imports are done by then), lets it
run again (``release``) with what is alive moved out of its sight
(``gc.freeze``, as a worker does after its preload): a command that runs for
hours (a fleet, a worker, ``logs --follow``) collects as any process does,
without walking its imports each time.
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


def release(*, collect: bool) -> None:
    """Turn the collector back on if ``hold`` turned it off, freezing what is alive: for
    good, so ``cli.main`` is a process's entry, not a call to make from a process that goes
    on (a frozen object is never collected; unfrozen as the command ends, the interpreter's
    last collection at exit would walk them all again). ``collect``: first free what the
    start left unreachable (a few dozen objects; the pass costs ~15 ms): for a process that
    serves for hours. A shorter one keeps them, frozen, until it exits."""
    global _held
    if _held:
        _held = False
        if collect:
            gc.collect()
        gc.freeze()
        gc.enable()


def end() -> None:
    """The command is over (``cli.main`` returns): the collector is on again, also after a
    command that opened no state (``--version``)."""
    global _held
    if _held:
        _held = False
        gc.enable()
