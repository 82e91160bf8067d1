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

from collections.abc import Callable

import pydantic

from shared_state import ArtifactNotFound, BudgetExceeded, Role

from ..errors import AuthError, BadRequest, Blocked, ContextError, ModelNotFound, ScenarioExhausted
from ..llm import ProviderChoice
from ..outcomes import Asks, Failed, Outcome
from ..task_run import TaskRun
from .coder import Coder
from .gates import APPROVABLE
from .planner import Planner
from .reviewer import Reviewer
from .subagent import Subagent
from .task import AgentTask, opening_of, opening_reads
from .task_input import TaskInput

ROLES: dict[Role, type[AgentTask]] = {
    Role.PLANNER: Planner,
    Role.CODER: Coder,
    Role.REVIEWER: Reviewer,
}
# Errors a retry would meet again: the task fails at once, with the reason.
FINAL = (ArtifactNotFound, BudgetExceeded, ContextError, AuthError, ModelNotFound, BadRequest,
         ScenarioExhausted, pydantic.ValidationError)  # fmt: skip


def run(task_run: TaskRun, choice: ProviderChoice, worker: str) -> Outcome:
    """The run's outcome as its role's agent, for ``outcomes.settle``."""
    return perform(lambda: _agent(task_run, choice, worker))


def perform(agent: Callable[[], AgentTask]) -> Outcome:
    """What the agent ``agent()`` makes comes to: a question as ``Asks``, an error no
    retry would fix as a final ``Failed``; any other error propagates (the worker
    makes it a retryable one)."""
    try:
        return agent().perform()
    except Blocked as exc:
        return Asks(exc.question, exc.approval_for)
    except FINAL as exc:
        return Failed(f"{type(exc).__name__}: {exc}")


def _agent(task_run: TaskRun, choice: ProviderChoice, worker: str) -> AgentTask:
    task = task_run.task
    cls: type[AgentTask] = ROLES[task.role]
    opening = opening_of(task_run)  # what the run reads first, its input among it: read once
    if opening.input and TaskInput.model_validate_json(opening.input).kind == "subagent":
        cls = Subagent
    return cls(task_run, choice, worker, opening)


__all__ = ["APPROVABLE", "ROLES", "AgentTask", "TaskInput", "opening_reads", "perform", "run"]
