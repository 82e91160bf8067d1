"""Errors of the worker runtime.

    WorkerError        root: anything the worker runtime raises itself
    ├── LeaseLost      this worker no longer owns its task: stop, write nothing
    └── NotInWorker    execute() was called outside a redfleet worker process

State-layer errors (``shared_state.StateError``) pass through unchanged.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Root of the worker runtime's errors."""


class LeaseLost(WorkerError):
    """The lease could not be renewed (fenced, job finished, Redis unreachable too long)."""


class NotInWorker(WorkerError):
    """``execute`` runs only inside a process started by ``redfleet worker``."""
