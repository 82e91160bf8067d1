"""``Meter``: a task's usage sink — the job's totals in Redis, one ``model.called`` event a call."""

from __future__ import annotations

from shared_state import State, Task

from ..llm import Provider


class Meter:
    """Records each model call of one task in its job's usage (the ledger's ``job`` sink).

    The event names the task, worker, provider and model; a call to another
    model (a summary model) names that one, as the ledger says.
    """

    def __init__(
        self, state: State, task: Task, worker: str, provider: Provider, tenant: str = "default"
    ) -> None:
        self.state = state
        self.task = task
        self.worker = worker
        self.provider = provider
        self.tenant = tenant  # whose job: the fleet's spend is counted by it (``/metrics``)
        self.calls = 0

    def record(
        self,
        *,
        input_tokens: int,
        cached_tokens: int,
        output_tokens: int,
        cost_usd: float,
        compaction: bool = False,
        event: dict[str, str | int] | None = None,
        settles: str = "",
    ) -> object:
        self.calls += 1
        return self.state.usage(self.task.job_id).record(
            input_tokens=input_tokens,
            cached_tokens=cached_tokens,
            output_tokens=output_tokens,
            cost_usd=cost_usd,
            compaction=compaction,
            event={
                "task_id": self.task.task_id,
                "role": self.task.role.value,
                "worker": self.worker,
                "step": self.calls,
                "provider": self.provider.name,
                "model": self.provider.model,
                "tenant": self.tenant,
                **(event or {}),  # the step's metrics, from the ledger (and another model's name)
                "kind": "compaction" if compaction else "step",
            },
            settles=settles,
        )
