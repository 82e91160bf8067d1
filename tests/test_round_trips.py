"""What a model call costs in round trips to Redis, counted on the wire.

Against a real Redis through the loopback proxy, which counts the reads of
client bytes it passes on (a pipeline is one): a call's reservation carries
the last step's checkpoint, and its settlement rides with its usage record,
so a call costs two round trips whatever it records (four before: the
reservation, the settlement, the usage, the checkpoint).
"""

from __future__ import annotations

import pydantic
import pytest

from shared_state import ConnectionFailed, Fenced, JobSpec, State
from shared_state.client import ClientOptions
from shared_state.scripts import SCRIPTS, load
from workers.agent import AgentLoop
from workers.context import CallLedger, ContextEngine, WorkingState
from workers.llm import Scenario, ScriptedProvider
from workers.roles.meter import Meter
from workers.run_context import RunContext
from workers.tools import Tool, ToolBox, ToolResult

from .proxy import FaultProxy

ROUND_TRIPS_PER_CALL = 2  # the reservation (with a checkpoint), the settlement with the usage


class AddArgs(pydantic.BaseModel):
    a: int
    b: int


ADD = Tool("add", "Add two integers.", AddArgs, lambda ctx, a: ToolResult(content=str(a.a + a.b)))


def _steps(n: int) -> Scenario:
    adds = [{"tool_calls": [{"name": "add", "arguments": {"a": i, "b": 2}}]} for i in range(n - 1)]
    return Scenario.model_validate({"name": "t", "roles": {"coder": [*adds, {"text": "3"}]}})


def test_a_model_call_records_in_two_round_trips(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    claimed = remote.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    assert claimed is not None
    records = remote.records(job.job_id)

    def save(working: WorkingState, ride: bool) -> None:
        records.write(claimed.claim, checkpoint=working.model_dump_json(), ride=ride)

    provider = ScriptedProvider(_steps(4), "coder")
    context = RunContext(
        WorkingState(goal="g"), artifacts=remote.artifacts(job.job_id), save=save,
        flush=remote.runner.flush,
    )  # fmt: skip
    ledger = CallLedger(job=Meter(remote, claimed.task, "w1", provider))
    budget = remote.budget(job.job_id)
    for name in SCRIPTS:  # loaded, as a worker that ran a task has them: the calls' own count
        load(state.client, name)
    # The tool results are stored as a task's run stores them: riding with the next write.
    engine = ContextEngine(remote.artifacts(job.job_id, ride=True))
    loop = AgentLoop(
        provider, engine, ToolBox([ADD]), context, ledger=ledger, budget=budget,
    )  # fmt: skip
    before = proxy.requests
    outcome = loop.run("You add.", [])
    spent = proxy.requests - before
    assert outcome.ok and outcome.steps == 4
    # Besides the calls' own: the run's last checkpoint, written at once as it ends (the
    # tool results stored as they arrived rode with the next call's reservation).
    budget_trips = ROUND_TRIPS_PER_CALL * 4 + 1
    assert spent <= budget_trips, f"{spent} round trips for 4 calls (budget {budget_trips})"
    # Nothing that rode was lost: every call counted and settled, the state checkpointed,
    # every tool result stored.
    usage = state.usage(job.job_id).get()
    assert usage.calls == 4 and state.budget(job.job_id).state().reserved == 0
    saved = state.records(job.job_id).checkpoint(job.root_task)
    assert saved is not None and WorkingState.model_validate_json(saved) == context.state
    stored = [r for r in state.artifacts(job.job_id).list() if r.kind == "tool-result"]
    assert len(stored) == 3


def test_a_refused_rider_raises_at_the_write_that_carried_it(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    claimed = state.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    assert claimed is not None
    stale = claimed.claim.model_copy(update={"token": claimed.claim.token - 1})
    state.records(job.job_id).write(stale, checkpoint="{}", ride=True)
    assert state.records(job.job_id).checkpoint(job.root_task) is None  # not sent yet
    with pytest.raises(Fenced):
        state.budget(job.job_id).reserve(10)
    # It went, and was refused: nothing waits to go again with the next write.
    assert state.records(job.job_id).checkpoint(job.root_task) is None
    state.budget(job.job_id).reserve(10)


def test_a_rider_whose_write_lost_its_connection_rides_again(
    state: State, proxy: FaultProxy
) -> None:
    brittle = State.connect(proxy.url, client_options=ClientOptions(retries=0))
    job = state.jobs.submit(JobSpec(goal="g"))
    claimed = brittle.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    assert claimed is not None
    brittle.records(job.job_id).write(claimed.claim, checkpoint='{"n": 1}', ride=True)
    proxy.sever()  # the write that carries it goes out on a connection that is gone
    with pytest.raises(ConnectionFailed):  # the write that carried it: no answer came
        brittle.budget(job.job_id).reserve(10)
    brittle.runner.flush()  # it rides again
    assert state.records(job.job_id).checkpoint(job.root_task) == '{"n": 1}'
    brittle.client.close()
