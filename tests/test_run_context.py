"""The run context: the one owner of a task's working state, handed to every tool."""

from __future__ import annotations

import pydantic
import pytest

from shared_state import ArtifactRef, MemoryArtifacts, State
from workers.agent import AgentLoop
from workers.context import CallLedger, ContextEngine, WorkingState
from workers.errors import ScenarioExhausted
from workers.llm import Scenario, ScriptedProvider
from workers.roles.planner import SYSTEM, Planner
from workers.run_context import RunContext
from workers.tools import Tool, ToolBox, ToolResult

from .test_journal import claimed
from .test_notes import FACT, Script, note


class Text(pydantic.BaseModel):
    text: str


def scripted(*steps: dict) -> ScriptedProvider:
    return ScriptedProvider(
        Scenario.model_validate({"name": "t", "roles": {"coder": steps}}), "coder"
    )


def calls(*names: str) -> dict:
    """One scripted step: a batch of calls, one per tool named."""
    return {"tool_calls": [{"name": n, "arguments": {"text": n}} for n in names]}


def make(
    tools: list[Tool], *steps: dict, loop: type[AgentLoop] = AgentLoop
) -> tuple[RunContext, AgentLoop]:
    """A loop over ``tools`` replaying ``steps``, and the run context it acts through."""
    sink = MemoryArtifacts()
    ctx = RunContext(WorkingState(goal="g"), artifacts=sink)
    engine, box = ContextEngine(sink), ToolBox(tools)
    return ctx, loop(scripted(*steps), engine, box, ctx, ledger=CallLedger())


def run(tools: list[Tool], *steps: dict) -> tuple[RunContext, AgentLoop]:
    ctx, loop = make(tools, *steps)
    loop.run("s", [])
    return ctx, loop


def test_a_tool_gets_its_context_and_arguments_and_only_the_context_holds_the_state() -> None:
    given: list[tuple] = []

    def count(ctx: RunContext, a: Text) -> ToolResult:
        given.append((ctx, a))
        ctx.track("counted", len(a.text))
        return ToolResult(content="counted")

    ctx, loop = run([Tool("count", "Count.", Text, count)], calls("count"), {"text": "done"})
    ((seen, arguments),) = given
    assert seen is ctx and arguments == Text(text="count")
    assert ctx.state.progress == {"counted": 5}
    with pytest.raises(AttributeError):
        ctx.state = WorkingState(goal="replaced")  # type: ignore[misc]  # read-only
    assert not [v for v in vars(loop).values() if isinstance(v, WorkingState)]


def test_a_tool_result_refs_land_in_the_working_state_as_typed_refs_without_text() -> None:
    stored: list[ArtifactRef] = []

    def save(ctx: RunContext, a: Text) -> ToolResult:
        stored.append(ctx.store(a.text, kind="note", title="saved"))
        return ToolResult(content="saved it", refs=(stored[-1],))  # the text names no handle

    ctx, _ = run([Tool("save", "Save.", Text, save)], calls("save"), {"text": "done"})
    assert ctx.state.artifacts == tuple(stored) and isinstance(ctx.state.artifacts[0], ArtifactRef)
    assert ctx.state.of_kind("note") == stored
    assert stored[0].handle() in ctx.state.render()  # text only once a prompt is built


def test_a_result_that_ends_the_run_ends_it_and_later_calls_of_its_batch_are_not_made() -> None:
    made: list[str] = []

    def act(ctx: RunContext, a: Text) -> ToolResult:
        made.append(a.text)
        return ToolResult(content=f"{a.text} done", ends_run=a.text == "finish")

    tools = [Tool("finish", "Finish.", Text, act), Tool("more", "More.", Text, act)]
    _, loop = make(tools, calls("finish", "more"), {"text": "never"})
    outcome = loop.run("s", [])
    assert (outcome.ok, outcome.ended_by, outcome.steps) == (True, "finish", 1)
    assert made == ["finish"]
    results = [m.content for m in outcome.history if m.role == "tool"]
    assert results == ["finish done", "error: not run; finish ended this run"]


def test_a_tool_that_returns_a_string_is_a_mistake_caught_at_once() -> None:
    untyped = Tool("plain", "Plain.", Text, lambda ctx, a: "error: looks like a refusal")
    with pytest.raises(TypeError, match="plain returned str, not a ToolResult"):
        run([untyped], calls("plain"))


def test_each_step_of_the_loop_is_a_method_called_in_order() -> None:
    order: list[str] = []

    class Traced(AgentLoop):
        pass

    for name in ("build", "reserve", "call", "settle", "record", "act", "checkpoint"):

        def traced(self, *args, _name=name, **kwargs):
            order.append(_name)
            return getattr(AgentLoop, _name)(self, *args, **kwargs)

        setattr(Traced, name, traced)
    ok = Tool("ok", "Ok.", Text, lambda ctx, a: ToolResult(content="ok"))
    _, loop = make([ok], calls("ok"), {"text": "done"}, loop=Traced)
    loop.run("s", [])
    one = ["build", "reserve", "call", "settle", "record", "act", "checkpoint"]
    assert order == one + one


def test_the_state_checkpointed_is_the_one_the_context_owns_with_the_note_a_tool_wrote(
    state: State,
) -> None:
    agent = Planner(claimed(state), Script(note(**FACT)), "w1")
    with pytest.raises(ScenarioExhausted):  # the worker "crashes" at its second call
        agent.drive(SYSTEM, agent.tools(), "plan")
    saved = agent.records.checkpoint(agent.task.task_id)
    assert saved is not None
    assert WorkingState.model_validate_json(saved) == agent.context.state
    assert [f.text for f in agent.context.state.facts] == [FACT["text"]]
    assert not [v for v in vars(agent).values() if isinstance(v, WorkingState)]


def test_a_result_that_is_part_of_a_whole_reaches_the_history_marked_cut_with_its_refs() -> None:
    def tail(ctx: RunContext, a: Text) -> ToolResult:
        log = ctx.store("line\n" * 500, kind="log", title="the whole log")
        return ToolResult(content=f"last line: line; whole: {log.id}", refs=(log,), reduced=True)

    ctx, loop = run([Tool("tail", "Tail.", Text, tail)], calls("tail"), {"text": "done"})
    (result,) = [m for m in loop.history if m.role == "tool"]
    assert result.reduced == "cut" and result.content.startswith("last line: line")
    assert [r.kind for r in ctx.state.artifacts] == ["log"]


def test_a_checkpoint_an_older_version_wrote_starts_the_task_afresh_and_says_so(
    state: State,
) -> None:
    from shared_state import keys
    from workers.llm import ProviderChoice
    from workers.roles.planner import Planner

    from .conftest import events_named
    from .test_journal import claimed

    run = claimed(state)
    old = '{"version": 3, "goal": "g", "artifacts": ["[artifact a-1 file 3B trusted: x]"]}'
    state.client.hset(keys.checkpoints(run.job.job_id), run.task.task_id, old)
    agent = Planner(run, ProviderChoice(), "w1")
    assert agent.context.state.goal == "g" and agent.context.state.artifacts == ()
    (event,) = events_named(state, run.job.job_id, "checkpoint.unreadable")
    assert event.task_id == run.task.task_id and "error" in (event.model_extra or {})
