"""The tools a job may gate (``submit --approve``): those whose calls act outside the task.

Files written, checks run, tasks spawned (the ``dispatch_*`` tools, ``plan_items``'
batches, ``spawn_subagents``), long-term memory changed. A gated tool's call waits
for a person (``AgentTask._asking``), except the calls in ``READS``, which only
read (a memory ``view`` or ``search``).
"""

from __future__ import annotations

APPROVABLE = frozenset({
    "append_file", "delete_file", "dispatch_batches", "dispatch_coders", "dispatch_fixes",
    "dispatch_reviewer", "edit_file", "memory", "plan_items", "rename_file", "run_checks",
    "spawn_subagents", "write_file",
})  # fmt: skip
# Per gated tool, the values of its ``command`` argument that only read.
READS: dict[str, frozenset[str]] = {"memory": frozenset({"view", "search"})}
