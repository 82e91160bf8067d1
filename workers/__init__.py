"""The agent runtime: worker processes, the task loop, and task behaviours."""

from .errors import LeaseLost, NotInWorker, WorkerError
from .runtime import WorkerRuntime, execute, run_worker

__all__ = ["LeaseLost", "NotInWorker", "WorkerError", "WorkerRuntime", "execute", "run_worker"]
