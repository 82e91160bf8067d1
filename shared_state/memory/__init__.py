"""Long-term memory: items a tenant's jobs keep, with scope, provenance and a lifecycle.

    items    what an item is (Scope, Provenance, Claim, MemoryItem) and who asks
             (MemoryContext: the tenant, user, job and task come from the job)
    store    MemoryStore: write, read, promote (the gate), forget (through all
             that was derived) and expire with the job
    files    MemoryFiles: the /memories tree (AGENTS.md, notes, scratchpads)
    recall   Recall: keywords and meaning fused over a tenant's items
             (imported from ``shared_state.memory.recall``: it loads numpy,
             which a process that never recalls should not pay for)
    index    TenantIndex: what recall keeps per tenant in a process (filter
             columns, postings, vectors), and its snapshot in Redis
    embed    the embedders: the offline default and an OpenAI-compatible one

Errors are the state layer's (``shared_state.errors``): ``MemoryRefused`` and
its children, ``MemoryNotFound``.
"""

from ..lazy import exports

# Imported when first used: the CLI's memory commands are registered with every command,
# and the store brings the artifacts and the Lua scripts with it.
_WHERE = {
    ".items": (
        "AUTHORITY",
        "Claim",
        "MemoryContext",
        "MemoryItem",
        "Provenance",
        "Scope",
        "ScopeKind",
        "SourceKind",
    ),
    ".store": ("Evidence", "ForgetReport", "MemoryStore", "Removed"),
}
__getattr__ = exports(__name__, _WHERE)
__all__ = [*sorted(name for names in _WHERE.values() for name in names)]
