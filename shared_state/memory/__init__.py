"""Long-term memory: items a tenant's jobs keep, with scope, provenance and a lifecycle.

    items    what an item is (Scope, Provenance, Claim, MemoryItem) and who asks
             (MemoryContext: the tenant, user, job and task come from the job)
    store    MemoryStore: write, read, promote (the gate), forget (through all
             that was derived) and expire with the job
    recall   Recall: BM25 keyword search over a tenant's items, offline

Errors are the state layer's (``shared_state.errors``): ``MemoryRefused`` and
its children, ``MemoryNotFound``.
"""

from .items import (
    AUTHORITY,
    Claim,
    MemoryContext,
    MemoryItem,
    Provenance,
    Scope,
    ScopeKind,
    SourceKind,
)
from .recall import Hit, Recall
from .store import Evidence, ForgetReport, MemoryStore, Removed

__all__ = [
    "AUTHORITY",
    "Claim",
    "Evidence",
    "ForgetReport",
    "Hit",
    "MemoryContext",
    "MemoryItem",
    "MemoryStore",
    "Provenance",
    "Recall",
    "Removed",
    "Scope",
    "ScopeKind",
    "SourceKind",
]
