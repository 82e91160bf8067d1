"""The agent loop: tools, malformed calls, the budget and usage, with real providers' wire."""

from __future__ import annotations

import json

import pydantic
import pytest

from shared_state import BudgetExceeded, JobSpec, MemoryArtifacts, State
from workers.agent import AgentLimits, AgentLoop
from workers.context import CallLedger, ContextEngine, WorkingState
from workers.llm import OpenAIProvider, RetryPolicy, Scenario, ScriptedProvider
from workers.run_context import RunContext
from workers.tools import Tool, ToolBox, ToolResult

from .conftest import events_named
from .loopback import Loopback


class AddArgs(pydantic.BaseModel):
    a: int
    b: int


ADD = Tool("add", "Add two integers.", AddArgs, lambda ctx, a: ToolResult(content=str(a.a + a.b)))
SYSTEM = "You add numbers with the add tool, then answer."


def scenario(*steps: dict) -> Scenario:
    return Scenario.model_validate({"name": "t", "roles": {"coder": list(steps)}})


def context(goal: str = "g", phase: str = "start") -> RunContext:
    return RunContext(WorkingState(goal=goal, phase=phase), artifacts=MemoryArtifacts())


def loop(provider, ctx: RunContext | None = None, **kw) -> AgentLoop:
    engine = ContextEngine(MemoryArtifacts())
    return AgentLoop(provider, engine, ToolBox([ADD]), ctx or context(), **kw)


def test_a_tool_call_then_an_answer_completes_the_run_with_per_step_usage() -> None:
    provider = ScriptedProvider(
        scenario({"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}, {"text": "5"}),
        "coder",
    )
    ledger = CallLedger()
    outcome = loop(provider, ledger=ledger).run(SYSTEM, [])
    assert (outcome.ok, outcome.answer, outcome.steps) == (True, "5", 2)
    result = next(m for m in outcome.history if m.role == "tool")
    assert result.content == "5" and result.tool_call_id == "call_coder_0_0"
    assert [c.tool for c in ledger.calls] == ["add", ""]
    assert all(c.input_tokens > 0 and c.output_tokens > 0 for c in ledger.calls)


def test_malformed_tool_calls_go_back_to_the_model_then_fail_the_run_with_the_reason() -> None:
    bad = [
        {"tool_calls": [{"name": "mul", "arguments": {}}]},
        {"tool_calls": [{"name": "add", "arguments": {"a": "x"}}]},
        {"tool_calls": [{"name": "add", "arguments": {"a": 1}}]},
        {"tool_calls": [{"name": "nope", "arguments": {}}]},
    ]
    provider = ScriptedProvider(scenario(*bad), "coder")
    outcome = loop(provider, ledger=CallLedger()).run(SYSTEM, [])
    assert not outcome.ok and outcome.steps == 4
    assert outcome.reason.startswith("the model made 4 invalid tool calls (limit 3)")
    errors = [m.content for m in outcome.history if m.role == "tool"]
    assert errors[0].startswith("error: no tool 'mul' in phase 'start'; available: add")
    assert "a: Input should be a valid integer" in errors[1]
    assert "b: Field required" in errors[2]


def test_a_call_over_the_job_budget_is_refused_before_it_is_sent(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g", token_budget=500))
    provider = ScriptedProvider(scenario({"text": "hi"}), "coder")
    agent = loop(provider, ledger=CallLedger(), budget=state.budget(job.job_id))
    with pytest.raises(BudgetExceeded):
        agent.run(SYSTEM, [])
    assert provider.step == 0  # nothing was sent
    assert state.budget(job.job_id).state().reserved == 0


def test_a_run_over_openai_wire_survives_429_500_and_a_malformed_call(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g", token_budget=100_000))

    def answer(message: dict, prompt: int) -> dict:
        usage = {"prompt_tokens": prompt, "completion_tokens": 7}
        return {"model": "m", "choices": [{"message": message}], "usage": usage}

    good = {
        "id": "c1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a":1,"b":2}'},
    }
    broken = {"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{"}}
    with Loopback() as server:
        server.answer(429, {"error": {"message": "slow"}}, **{"retry-after": "0"})
        server.answer(200, answer({"content": None, "tool_calls": [broken]}, 300))
        server.answer(500, {"error": {"message": "oops"}})
        server.answer(200, answer({"content": None, "tool_calls": [good]}, 320))
        server.answer(200, answer({"content": "3"}, 340))
        fast = RetryPolicy(attempts=3, base_delay_s=0.01, timeout_s=5)
        provider = OpenAIProvider("m", base_url=server.url, api_key="k", retry=fast)
        ledger = CallLedger(job=state.usage(job.job_id))
        outcome = loop(provider, ledger=ledger, budget=state.budget(job.job_id)).run(SYSTEM, [])
    assert (outcome.ok, outcome.answer) == (True, "3")
    tool_results = [m.content for m in outcome.history if m.role == "tool"]
    assert tool_results[0].startswith("error: tool call 'add' rejected: arguments are not JSON")
    assert tool_results[1] == "3"
    assert [c.input_tokens for c in ledger.calls] == [300, 320, 340]
    usage = state.usage(job.job_id).get()
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (3, 960, 21)
    budget = state.budget(job.job_id).state()
    assert (budget.used, budget.reserved) == (960 + 21, 0)


class _UnsentUsage:
    """A job's usage sink whose write never reaches Redis (its connection lost for good)."""

    def record(self, **_: object) -> object:
        raise ConnectionError("lost")


def test_a_call_whose_usage_record_was_not_sent_is_settled_with_the_next_write(
    state: State,
) -> None:
    """The usage record settles its call's reservation; when it fails, the settlement is
    not lost with it: it goes with the thread's next write, once."""
    job = state.jobs.submit(JobSpec(goal="g", token_budget=100_000))
    provider = ScriptedProvider(scenario({"text": "done"}), "coder")
    budget = state.budget(job.job_id)
    with pytest.raises(ConnectionError):
        loop(provider, ledger=CallLedger(job=_UnsentUsage()), budget=budget).run(SYSTEM, [])
    assert budget.state().reserved > 0  # riding: not sent yet
    state.runner.flush()
    held = budget.state()
    assert held.reserved == 0 and held.used > 0


def test_the_run_stops_at_the_step_limit() -> None:
    step = {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}
    provider = ScriptedProvider(scenario(*[step] * 5), "coder")
    outcome = loop(provider, ledger=CallLedger(), limits=AgentLimits(max_steps=3)).run(SYSTEM, [])
    assert not outcome.ok and outcome.reason == "no answer within 3 steps"


def test_a_tool_of_another_phase_is_refused_like_an_unknown_one() -> None:
    later = Tool(
        "publish", "Publish.", AddArgs, lambda ctx, a: ToolResult(content="ok"), phases=["report"]
    )
    step = {"tool_calls": [{"name": "publish", "arguments": {"a": 1, "b": 1}}]}
    provider = ScriptedProvider(scenario(step, {"text": "ok"}), "coder")
    engine = ContextEngine(MemoryArtifacts())
    tools = ToolBox([ADD, later])
    outcome = AgentLoop(provider, engine, tools, context(phase="plan"), ledger=CallLedger()).run(
        SYSTEM, []
    )
    (refused,) = [m.content for m in outcome.history if m.role == "tool"]
    assert refused == "error: no tool 'publish' in phase 'plan'; available: add"


def test_two_tools_with_one_name_are_a_mistake_caught_at_once() -> None:
    with pytest.raises(ValueError, match="given twice: add"):
        ToolBox([ADD, ADD])


def test_every_step_records_latency_tool_result_bytes_and_state_bytes_in_its_event(
    state: State,
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", token_budget=100_000))
    add = {"tool_calls": [{"name": "add", "arguments": {"a": 20, "b": 22}}]}
    provider = ScriptedProvider(scenario(add, {"text": "42"}), "coder")
    ledger = CallLedger(job=state.usage(job.job_id))
    loop(provider, ledger=ledger).run(SYSTEM, [])
    first, second = ledger.calls
    assert first.tool_result_bytes == 0 and second.tool_result_bytes == len(b"42")
    assert all(c.latency_ms > 0 and c.state_bytes > 0 for c in ledger.calls)
    events = events_named(state, job.job_id, "model.called")
    assert [int(e.tool_result_bytes) for e in events] == [0, 2]
    sizes = [c.state_bytes for c in ledger.calls]
    assert [int(e.state_bytes) for e in events] == sizes
    assert [getattr(e, "tool", "") for e in events] == ["add", ""]  # empty fields are not kept


def test_a_tools_spec_and_its_schema_text_are_made_once_for_every_run() -> None:
    """Every run builds its tools again: the spec (the argument model's JSON schema) and
    the text the tools slot holds are the first run's, not made again for each call."""

    def fresh() -> Tool:  # as a run makes it: a new function each time
        return Tool("add", "Add two integers.", AddArgs, lambda ctx, a: ToolResult(content=""))

    first, second = fresh().spec, fresh().spec
    assert first is second
    assert first.schema_text is first.schema_text  # the same string, not an equal one
    assert json.loads(first.schema_text)["parameters"] == AddArgs.model_json_schema()
    other = Tool("add", "Add two integers.", AddArgs, lambda ctx, a: ToolResult(content=""),
                 phases=("build",)).spec  # fmt: skip
    assert other is not first and other.phases == {"build"}
