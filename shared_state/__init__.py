"""Everything redfleet keeps in Redis: keys, Lua scripts, jobs, tasks, claims, events.

The state layer imports neither ``workers`` nor ``coordinator``.
"""

from . import keys  # key names only: imported at once
from .lazy import exports

_WHERE = {
    ".artifacts": (
        "ArtifactNotFound",
        "ArtifactRef",
        "ArtifactSink",
        "ArtifactStore",
        "MemoryArtifacts",
        "Trust",
    ),
    ".budget": ("BudgetState", "Reservation", "TokenBudget"),
    ".delivery": ("Delivery", "Envelope", "queue_name"),
    ".errors": (
        "BudgetExceeded",
        "Code",
        "ConnectionFailed",
        "ConnectionTimedOut",
        "Fenced",
        "ForeignTarget",
        "IdempotencyConflict",
        "JobFinished",
        "JobNotFound",
        "NotBlocked",
        "NotFound",
        "NotReplicated",
        "NotResumable",
        "NotRetryable",
        "QuestionChanged",
        "RecordChanged",
        "ServerNotFound",
        "StateError",
        "SubmitUnconfirmed",
        "TaskNotFound",
        "TenantBudgetExceeded",
    ),
    ".events": ("EventLog",),
    ".kinds": ("JobStatus", "Role", "Scenario", "TaskStatus"),
    ".models": ("Claim", "Event", "Job", "JobSpec", "Task", "WorkerInfo"),
    ".records": ("EffectStatus", "JournalEntry", "Records"),
    ".server": ("RedisServer", "find_redis_server", "free_port"),
    ".state": ("State",),
    ".tasks": ("Child", "Claimed", "Completion", "TaskStore"),
    ".usage": ("JobUsage", "Usage"),
}
__getattr__ = exports(__name__, _WHERE)
__all__ = ["keys", *sorted(name for names in _WHERE.values() for name in names)]
