"""The agent runtime: worker processes, the task loop, and task behaviours."""

from shared_state.lazy import exports

_WHERE = {
    ".errors": ("LeaseLost", "NotInWorker", "WorkerError"),
    ".runtime": ("WorkerRuntime", "execute", "run_worker"),
}
__getattr__ = exports(__name__, _WHERE)
__all__ = [*sorted(name for names in _WHERE.values() for name in names)]
