"""What a model call, a task and a run's start cost in round trips to Redis, on the wire.

Against a real Redis through the loopback proxy, which counts the reads of
client bytes it passes on (a pipeline is one): a call's reservation carries
the last step's checkpoint, and its usage record settles it (one script), so
a call costs two round trips whatever it records (four before: the
reservation, the settlement, the usage, the checkpoint).
"""

from __future__ import annotations

import importlib
import json
import threading
from pathlib import Path

import pydantic
import pytest
import redis
from rq.job import Job as RQJob
from rq.job import JobStatus
from rq.serializers import JSONSerializer

from shared_state import (
    Child,
    ConnectionFailed,
    EffectStatus,
    Fenced,
    JobSpec,
    JournalEntry,
    Role,
    Scenario,
    State,
    keys,
)
from shared_state.client import ClientOptions
from shared_state.memory import MemoryContext
from shared_state.memory.files import PROJECT_MEMORY
from shared_state.records import Opening
from shared_state.scripts import SCRIPTS, load
from workers import runtime, slots
from workers.agent import AgentLoop
from workers.context import CallLedger, ContextEngine, WorkingState
from workers.lease import Lease
from workers.llm import ProviderChoice, ScriptedProvider
from workers.llm import Scenario as Script
from workers.roles.meter import Meter
from workers.roles.task import opening_of, opening_reads
from workers.run_context import RunContext
from workers.task_run import TaskRun
from workers.tools import Tool, ToolBox, ToolResult

from .proxy import FaultProxy

ROUND_TRIPS_PER_CALL = 2  # the reservation (with a checkpoint), the usage with its settlement
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


def test_a_call_of_a_job_without_a_budget_reserves_nothing_and_its_record_counts_its_use(
    state: State, remote: State, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim that opens a run says whether its job has a budget; without one a call
    sends no reservation (its checkpoint goes alone) and its usage record counts what it
    used in the budget, as a settlement would: the job's spend is what its usage says."""
    job = state.jobs.submit(JobSpec(goal="g"))
    claimed = remote.tasks.claim(job.job_id, job.root_task, "w1", 60_000, open_run=lambda j: None)
    assert claimed is not None and claimed.opened is not None
    assert claimed.opened.budgeted is False
    records = remote.records(job.job_id)

    def save(working: WorkingState, ride: bool) -> None:
        records.write(claimed.claim, checkpoint=working.model_dump_json(), ride=ride)

    sent: list[str] = []
    run_many = remote.runner.run_many
    monkeypatch.setattr(
        remote.runner,
        "run_many",
        lambda name, *a, **k: sent.append(name) or run_many(name, *a, **k),
    )
    provider = ScriptedProvider(_steps(4), "coder")
    context = RunContext(
        WorkingState(goal="g"), artifacts=remote.artifacts(job.job_id), save=save,
        flush=remote.runner.flush,
    )  # fmt: skip
    loop = AgentLoop(
        provider, ContextEngine(remote.artifacts(job.job_id, ride=True)), ToolBox([ADD]), context,
        ledger=CallLedger(job=Meter(remote, claimed.task, "w1", provider)),
        budget=remote.budget(job.job_id, budgeted=claimed.opened.budgeted),
    )  # fmt: skip
    for name in SCRIPTS:
        load(state.client, name)
    before = proxy.requests
    outcome = loop.run("You add.", [])
    spent = proxy.requests - before
    assert outcome.ok and outcome.steps == 4
    assert "reserveTokens" not in sent
    # The first call's record alone; each later one's checkpoint (with the tool result
    # stored before it) and record; the run's last checkpoint.
    assert spent <= 1 + 2 * 3 + 1, f"{spent} round trips for 4 calls"
    usage = state.usage(job.job_id).get()
    assert usage.calls == 4
    assert state.budget(job.job_id).state().used == usage.input_tokens + usage.output_tokens > 0
    assert state.budget(job.job_id).spent_usd()[0] == pytest.approx(usage.cost_usd, abs=1e-6)
    saved = state.records(job.job_id).checkpoint(job.root_task)
    assert saved is not None and WorkingState.model_validate_json(saved) == context.state


@pytest.mark.parametrize("spec", [{"token_budget": 1_000}, {"budget_usd": 0.5}])
def test_a_claim_says_a_job_with_a_budget_has_one(state: State, spec: dict[str, float]) -> None:
    job = state.jobs.submit(JobSpec(goal="g", **spec))
    claimed = state.tasks.claim(job.job_id, job.root_task, "w1", 60_000, open_run=lambda j: None)
    assert claimed is not None and claimed.opened is not None
    assert claimed.opened.budgeted is True


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
            suspended=rt.heartbeat.suspended,  # `rq suspend` looked for by the tick, as a fleet's
        )  # fmt: skip
        return proxy.requests - before

    for name in SCRIPTS:  # loaded, as in a fleet that has run a task
        load(state.client, name)
    sent: list[str] = []  # the scripts the run sent: a job without a budget reserves nothing
    run_many = remote.runner.run_many
    monkeypatch.setattr(
        remote.runner,
        "run_many",
        lambda name, *a, **k: sent.append(name) or run_many(name, *a, **k),
    )
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
    usage = state.usage(job.job_id).get()
    assert "reserveTokens" not in sent and usage.calls > 30
    assert state.budget(job.job_id).state().used == usage.input_tokens + usage.output_tokens


def test_a_run_its_claim_opens_starts_in_one_round_trip_with_the_records_a_read_gives(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    """A claim that opens its run brings back the task's checkpoint, its own journal
    entries (not the job's other tasks') and its input's text, and carries the reads
    outside the job (the tenant's AGENTS.md, where its memory stands) once the process
    knows the job: the run starts in one round trip, from what a read after the claim
    gives."""
    state.memory_files.create(MemoryContext(tenant="default", actor="cli:test"),
                              PROJECT_MEMORY, "# Rules\n", operator=True)  # fmt: skip
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.AGENTS))
    root = state.tasks.claim(job.job_id, job.root_task, "planner-0", 60_000)
    assert root is not None
    brief = state.artifacts(job.job_id).put("the brief", kind="input")
    first, mine, other = state.tasks.spawn(
        root.claim, "review", [Child(Role.CODER, "a"), Child(Role.CODER, "b", input=brief.id),
                               Child(Role.CODER, "c")],
    )  # fmt: skip
    # Its own entry, another task's, and one whose key only starts with its id.
    entries = [
        JournalEntry(key=f"{t}:bump x#0:start", task_id=t, tool="bump", status=EffectStatus.DONE)
        for t in (mine, other, f"{mine}x")
    ]
    state.client.hset(
        keys.journal(job.job_id), mapping={e.key: e.model_dump_json() for e in entries}
    )
    state.client.hset(keys.checkpoints(job.job_id), mapping={mine: '{"n": 1}', other: "{}"})

    def opened(task_id: str) -> tuple[Opening, int]:
        """The run's opening as a worker takes it, and the round trips it took."""
        reads = proxy.requests
        claimed = remote.tasks.claim(
            job.job_id, task_id, "w1", 60_000,
            open_run=lambda j: opening_reads(remote, j, task_id),
        )  # fmt: skip
        assert claimed is not None
        run = TaskRun(remote, claimed.job, claimed.task, claimed.claim, Lease("w1", 60_000),
                      opened=claimed.opened)  # fmt: skip
        opening = opening_of(run)
        return opening, proxy.requests - reads

    bare, trips = opened(first)
    assert trips == 2  # a job new to the process: its tenant is known after the claim
    assert bare.checkpoint is None and bare.input is None and bare.journal == {}
    assert bare.document == "# Rules\n"
    opening, trips = opened(mine)
    assert trips == 1
    assert opening.checkpoint == '{"n": 1}' and opening.input == "the brief"
    assert list(opening.journal.values()) == [entries[0]]
    assert opening.document == "# Rules\n"
    # The same as the reads after a claim give (Redis's time apart).
    task = state.tasks.get(job.job_id, mine)
    read = opening_of(TaskRun(state, job, task, root.claim, Lease("w1", 60_000)))
    assert opening.model_dump(exclude={"also"}) == read.model_dump(exclude={"also"})
    assert opening.also[1:] == read.also[1:]


def test_the_reads_a_script_call_carries_are_sent_once_its_script_reloaded_if_need_be(
    state: State, remote: State
) -> None:
    """After a restart (SCRIPT FLUSH) the call's script is loaded and sent again; the reads
    that rode with it were answered the first time and are not sent twice."""
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    where = keys.script_keys("claimTask", job.job_id, job.root_task)
    state.client.script_flush()
    res, read = remote.runner.run_reading(
        "claimTask", job.job_id, where, ["w1", 60_000, "", 1_000, 60_000, 0.5, ""],
        lambda pipe: (pipe.incr("sent"), pipe.get(keys.job(job.job_id))),
    )  # fmt: skip
    assert res.ok and res.data["task"]["owner"] == "w1"
    assert read[0] == 1
    assert isinstance(read[1], redis.ResponseError)  # the job is a hash: the error, in place
    assert state.client.get("sent") == b"1"


def test_an_envelopes_start_rides_with_its_tasks_claim_and_its_end_with_the_next_dequeue(
    state: State, remote: State, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RQ's writes as an envelope starts (its status, the execution record, the slot
    "busy") go in the claim's round trip, and those as it ends (its status and end, the
    counters, the finished registry, "idle") in the slot's next dequeue's: neither takes
    a round trip of its own. RQ's records of the envelope are those of any finished job,
    its start before its end."""
    monkeypatch.setattr(slots, "RQ_HEARTBEAT_EVERY_S", 3600)  # the slot's own, at its birth
    rt = runtime.WorkerRuntime(remote, role=Role.CODER, lease_ms=60_000, worker_id="c-rt")
    monkeypatch.setattr(runtime, "_runtime", rt)
    monkeypatch.setattr(runtime._slot, "lease", rt.heartbeat.leases[0], raising=False)
    client = slots.slot_client(remote.client, "c-rt/0")  # connected once, for both bursts
    queue = state.delivery.queues[Role.CODER]

    def burst() -> int:
        before = proxy.requests
        slots.serve("c-rt/0", queue.name, client, threading.Event(), threading.Event(),
                    burst=True, commands=False, suspended=threading.Event())  # fmt: skip
        return proxy.requests - before

    for name in SCRIPTS:
        load(state.client, name)
    burst()  # the slot's connections dialled
    idle = burst()  # a slot's birth, its empty dequeue, its death
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP, fanout=1))
    root = state.tasks.claim(job.job_id, job.root_task, "planner-0", 60_000)
    assert root is not None
    (coder,) = state.tasks.spawn(root.claim, "review", [Child(Role.CODER, "a")])
    envelope = state.client.hget(keys.task(job.job_id, coder), "envelope").decode()
    # RQ's pop and its read of the envelope; the claim, carrying RQ's start writes; the
    # completion; the planner's envelope, sent as its last child ends (and RQ's one look
    # at the server's version, the first time this process enqueues). RQ's end writes
    # go with the slot's next dequeue, which ends the burst (counted in ``idle``). Eight
    # when the start and the end were round trips of their own.
    assert burst() - idle == 6
    assert state.tasks.get(job.job_id, coder).status == "succeeded"
    ran = RQJob.fetch(envelope, connection=state.client, serializer=JSONSerializer)
    assert ran.get_status() == JobStatus.FINISHED and ran.worker_name == "c-rt/0"
    assert ran.started_at is not None and ran.ended_at is not None
    assert envelope in queue.finished_job_registry.get_job_ids()
    assert envelope not in queue.started_job_registry.get_job_ids()
    assert not state.client.llen(queue.intermediate_queue_key)
    client.close()
