"""The agent roles: planner, coder, reviewer, and the subagents any of them spawns.

``run`` picks the role for a claimed task (a task whose input says
``subagent`` runs as one, whatever its queue) and turns what can go wrong
into a stated reason on the task: an effect that cannot be settled stops it
as blocked; a request the provider refuses, a context over its ceiling, a
budget spent, a missing input artifact or a stored record that does not
validate fail it without retries (they would fail again); a provider that
is unavailable fails the attempt, which is retried.
"""

from __future__ import annotations

import pydantic

from shared_state import ArtifactNotFound, BudgetExceeded, Role

from ..errors import AuthError, BadRequest, Blocked, ContextError, ModelNotFound, ScenarioExhausted
from ..llm import ProviderChoice
from ..outcomes import Asks, Failed, Outcome
from ..task_run import TaskRun
from .coder import Coder
from .planner import Planner
from .reviewer import Reviewer
from .subagent import Subagent
from .task import AgentTask
from .task_input import TaskInput

ROLES: dict[Role, type[AgentTask]] = {
    Role.PLANNER: Planner,
    Role.CODER: Coder,
    Role.REVIEWER: Reviewer,
}
# What a job may gate (`submit --approve`): the tools whose calls act outside the task
# (files, checks run, tasks spawned, long-term memory written).
APPROVABLE = frozenset({
    "append_file", "delete_file", "dispatch_batches", "dispatch_coders", "dispatch_fixes",
    "dispatch_reviewer", "edit_file", "memory", "rename_file", "run_checks", "spawn_subagents",
    "write_file",
})  # fmt: skip
# Errors a retry would meet again: the task fails at once, with the reason.
FINAL = (ArtifactNotFound, BudgetExceeded, ContextError, AuthError, ModelNotFound, BadRequest,
         ScenarioExhausted, pydantic.ValidationError)  # fmt: skip


def run(task_run: TaskRun, choice: ProviderChoice, worker: str) -> Outcome:
    """The run's outcome, for ``outcomes.settle``; an error no retry would fix is a final
    ``Failed``, any other propagates (the worker makes it a retryable one)."""
    try:
        return _agent(task_run, choice, worker).perform()
    except Blocked as exc:
        return Asks(exc.question, exc.approval_for)
    except FINAL as exc:
        return Failed(f"{type(exc).__name__}: {exc}")


def _agent(task_run: TaskRun, choice: ProviderChoice, worker: str) -> AgentTask:
    task = task_run.task
    cls: type[AgentTask] = ROLES[task.role]
    if task.input:
        text = task_run.state.artifacts(task.job_id).text(task.input)
        if TaskInput.model_validate_json(text).kind == "subagent":
            cls = Subagent
    return cls(task_run, choice, worker)


__all__ = ["APPROVABLE", "ROLES", "AgentTask", "TaskInput", "run"]
