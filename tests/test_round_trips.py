"""What a model call costs in round trips to Redis, counted on the wire.

Against a real Redis through the loopback proxy, which counts the reads of
client bytes it passes on (a pipeline is one): a call's reservation carries
the last step's checkpoint, and its settlement rides with its usage record,
so a call costs two round trips whatever it records (four before: the
reservation, the settlement, the usage, the checkpoint).
"""

from __future__ import annotations

import importlib
import json
import threading
from pathlib import Path

import pydantic
import pytest

from shared_state import ConnectionFailed, Fenced, JobSpec, Role, Scenario, State
from shared_state.client import ClientOptions
from shared_state.scripts import SCRIPTS, load
from workers import runtime
from workers.agent import AgentLoop
from workers.context import CallLedger, ContextEngine, WorkingState
from workers.llm import ProviderChoice, ScriptedProvider
from workers.llm import Scenario as Script
from workers.roles.meter import Meter
from workers.run_context import RunContext
from workers.tools import Tool, ToolBox, ToolResult

from .proxy import FaultProxy

ROUND_TRIPS_PER_CALL = 2  # the reservation (with a checkpoint), the settlement with the usage
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


class AddArgs(pydantic.BaseModel):
    a: int
    b: int


ADD = Tool("add", "Add two integers.", AddArgs, lambda ctx, a: ToolResult(content=str(a.a + a.b)))


def _steps(n: int) -> Script:
    adds = [{"tool_calls": [{"name": "add", "arguments": {"a": i, "b": 2}}]} for i in range(n - 1)]
    return Script.model_validate({"name": "t", "roles": {"coder": [*adds, {"text": "3"}]}})


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


ROUND_TRIPS_PER_TASK = 25  # issue 24's budget for an agent task, from its delivery to its end


def test_a_task_costs_at_most_25_round_trips_end_to_end(
    state: State,
    remote: State,
    proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A job of the benchmark's shape (``fleet_scale``: a planner, 4 coders with 6
    subagents each, a reviewer; 30 tasks), each task counted on the wire from RQ's
    dequeue of its envelope to RQ's record of its end: one slot of each role in turn
    takes what its queue holds (a burst) through the proxy, until the job ends. What a
    slot costs to start and stop (an RQ worker's birth and death, and the empty dequeue
    that ends a burst) is counted with nothing queued and left out, and so are the
    process's heartbeats (per second, not per task: they are not running here)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    shape = importlib.import_module("fleet_scale").scenario(fanout=4, subagents=6)
    script = tmp_path / "wide.json"
    script.write_text(json.dumps(shape))
    choice = ProviderChoice(script=str(script))
    runtimes = {
        role: runtime.WorkerRuntime(
            remote, role=role, lease_ms=60_000, worker_id=f"{role.value}-e2e", provider=choice
        )
        for role in Role
    }

    def burst(role: Role) -> int:
        """Run one slot of ``role`` until its queue is empty; the round trips it took."""
        rt = runtimes[role]
        monkeypatch.setattr(runtime, "_runtime", rt)
        before = proxy.requests
        runtime._slot_main(
            remote, rt.heartbeat.leases[0], f"{rt.worker_id}/0", role, threading.Event(),
            waiting=threading.Event(), burst=True, commands=False,
        )  # fmt: skip
        return proxy.requests - before

    for name in SCRIPTS:  # loaded, as in a fleet that has run a task
        load(state.client, name)
    idle = {role: burst(role) for role in Role}  # a slot's own start and stop
    job = state.jobs.submit(JobSpec(goal="part modules", scenario=Scenario.AGENTS))
    spent = 0
    for _ in range(30):  # turns of the three roles: the job ends in a few
        if state.jobs.get(job.job_id).status.finished:
            break
        for role in Role:
            if state.client.llen(state.delivery.queues[role].key):
                spent += burst(role) - idle[role]
    assert state.jobs.get(job.job_id).status == "succeeded"
    tasks = len(state.tasks.list(job.job_id))
    assert tasks == 30
    per_task = spent / tasks
    assert per_task <= ROUND_TRIPS_PER_TASK, f"{per_task:.1f} round trips per task"
