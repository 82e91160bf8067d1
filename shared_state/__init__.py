"""Everything redfleet keeps in Redis: keys, Lua scripts, jobs, tasks, claims, events.

The state layer imports neither ``workers`` nor ``coordinator``.
"""

from . import keys
from .artifacts import (
    ArtifactNotFound,
    ArtifactRef,
    ArtifactSink,
    ArtifactStore,
    MemoryArtifacts,
    Trust,
)
from .budget import BudgetState, Reservation, TokenBudget
from .delivery import Delivery, Envelope, queue_name
from .errors import (
    BudgetExceeded,
    Code,
    ConnectionFailed,
    Fenced,
    ForeignTarget,
    IdempotencyConflict,
    JobFinished,
    JobNotFound,
    NotBlocked,
    NotFound,
    NotReplicated,
    NotResumable,
    NotRetryable,
    QuestionChanged,
    RecordChanged,
    ServerNotFound,
    StateError,
    SubmitUnconfirmed,
    TaskNotFound,
    TenantBudgetExceeded,
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
from .records import EffectStatus, JournalEntry, Records
from .server import RedisServer, find_redis_server, free_port
from .state import State
from .tasks import Child, Claimed, Completion, TaskStore
from .usage import JobUsage, Usage

__all__ = [
    "ArtifactNotFound",
    "ArtifactRef",
    "ArtifactSink",
    "ArtifactStore",
    "BudgetExceeded",
    "BudgetState",
    "Child",
    "Claim",
    "Claimed",
    "Code",
    "Completion",
    "ConnectionFailed",
    "Delivery",
    "EffectStatus",
    "Envelope",
    "Event",
    "EventLog",
    "Fenced",
    "ForeignTarget",
    "IdempotencyConflict",
    "Job",
    "JobFinished",
    "JobNotFound",
    "JobSpec",
    "JobStatus",
    "JobUsage",
    "JournalEntry",
    "MemoryArtifacts",
    "NotBlocked",
    "NotFound",
    "NotReplicated",
    "NotResumable",
    "NotRetryable",
    "QuestionChanged",
    "RecordChanged",
    "Records",
    "RedisServer",
    "Reservation",
    "Role",
    "Scenario",
    "ServerNotFound",
    "State",
    "StateError",
    "SubmitUnconfirmed",
    "Task",
    "TaskNotFound",
    "TaskStatus",
    "TaskStore",
    "TenantBudgetExceeded",
    "TokenBudget",
    "Trust",
    "Usage",
    "WorkerInfo",
    "find_redis_server",
    "free_port",
    "keys",
    "queue_name",
]
