"""Everything redfleet keeps in Redis: keys, Lua scripts, jobs, tasks, claims, events.

The state layer imports neither ``workers`` nor ``coordinator``.
"""

from . import keys
from .delivery import Delivery, Envelope, queue_name
from .errors import (
    Code,
    ConnectionFailed,
    Fenced,
    JobFinished,
    JobNotFound,
    NotFound,
    ServerNotFound,
    StateError,
    TaskNotFound,
)
from .events import EventLog
from .models import (
    Claim,
    Event,
    Job,
    JobSpec,
    JobStatus,
    Role,
    Scenario,
    Task,
    TaskStatus,
    WorkerInfo,
)
from .server import RedisServer, find_redis_server, free_port
from .state import State
from .tasks import Child, Claimed, Completion, TaskStore

__all__ = [
    "Child",
    "Claim",
    "Claimed",
    "Code",
    "Completion",
    "ConnectionFailed",
    "Delivery",
    "Envelope",
    "Event",
    "EventLog",
    "Fenced",
    "Job",
    "JobFinished",
    "JobNotFound",
    "JobSpec",
    "JobStatus",
    "NotFound",
    "RedisServer",
    "Role",
    "Scenario",
    "ServerNotFound",
    "State",
    "StateError",
    "Task",
    "TaskNotFound",
    "TaskStatus",
    "TaskStore",
    "WorkerInfo",
    "find_redis_server",
    "free_port",
    "keys",
    "queue_name",
]
