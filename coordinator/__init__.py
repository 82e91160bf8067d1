"""The control plane: CLI, job intake, fleet supervisor, reaper, monitor views."""

from .errors import CoordinatorError
from .fleet import Fleet, FleetReport, FleetSpec
from .reaper import Reaper, ReapReport
from .settings import Settings

__all__ = [
    "CoordinatorError",
    "Fleet",
    "FleetReport",
    "FleetSpec",
    "ReapReport",
    "Reaper",
    "Settings",
]
