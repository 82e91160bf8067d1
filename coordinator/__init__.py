"""The control plane: CLI, job intake, fleet supervisor, reaper, monitor views."""

from shared_state.lazy import exports

_WHERE = {
    ".api": ("Client", "Progress", "WaitTimeout"),
    ".errors": ("CoordinatorError",),
    ".fleet": ("Fleet", "FleetReport", "FleetSpec"),
    ".reaper": ("Reaper", "ReapReport"),
    ".settings": ("Settings",),
}
__getattr__ = exports(__name__, _WHERE)
__all__ = [*sorted(name for names in _WHERE.values() for name in names)]
