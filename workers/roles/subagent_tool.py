"""``spawn_subagents``: research delegated to children in clean contexts.

The children run on the task's own role queue with a brief and input refs
(the task's inputs and those the model names); each hands back a Summary
under ``summary_cap`` tokens. The spawn is journaled and ends the run: the
task waits without holding a worker and resumes at ``resume_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..run_context import RunContext
from ..tools import Tool, ToolResult
from .arguments import SpawnArgs
from .task_input import TaskInput

if TYPE_CHECKING:
    from .task import AgentTask


def subagent_tool(task: AgentTask, phases: Sequence[str], resume_at: str) -> Tool:
    def spawn(ctx: RunContext, a: SpawnArgs) -> ToolResult:
        base = task.input.inputs if task.input else ()
        children = [
            (
                task.task.role,
                TaskInput(
                    kind="subagent",
                    name=b.name,
                    brief=b.brief,
                    inputs=(*base, *task.check_inputs(b.inputs)),
                    summary_cap=a.summary_cap,
                ),
            )
            for b in a.agents
        ]
        return task.dispatch(ctx, "spawn_subagents", resume_at, children, a)

    return Tool(
        "spawn_subagents",
        "Delegate research to subagents with clean contexts. Each gets a brief and "
        "input refs and returns a summary under summary_cap tokens; exact material "
        "comes back as artifact refs. This task waits for them, then resumes.",
        SpawnArgs,
        spawn,
        phases=phases,
    )
