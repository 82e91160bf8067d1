"""The control plane: CLI, job intake, fleet supervisor, reaper, monitor views."""

from .api import Client, Progress, WaitTimeout
from .errors import CoordinatorError
from .fleet import Fleet, FleetReport, FleetSpec
from .reaper import Reaper, ReapReport
from .settings import Settings

__all__ = [
    "Client",
    "CoordinatorError",
    "Fleet",
    "FleetReport",
    "FleetSpec",
    "Progress",
    "ReapReport",
    "Reaper",
    "Settings",
    "WaitTimeout",
]
