"""The ``note`` tool: the model writes its working state's own parts, nothing else, bounded."""

from __future__ import annotations

from typing import Any

import pytest

from shared_state import MemoryArtifacts, State
from workers.context import ROLE_BUDGETS, ContextEngine, ContextRequest, Message, WorkingState
from workers.context import tokenizer_for as tokenizer
from workers.errors import ScenarioExhausted, ToolRefused
from workers.llm import ProviderChoice, Scenario, ScriptedProvider
from workers.roles.coder import Coder
from workers.roles.planner import SYSTEM, Planner
from workers.roles.reviewer import Reviewer
from workers.roles.subagent import Subagent
from workers.tools import MAX_NOTE_CHARS, Note, write_note

from .test_journal import claimed

FACT = {"kind": "fact", "text": "the user wants ASCII slugs only", "source": "user"}


def note(**arguments: Any) -> dict:
    return notes(arguments)


def notes(*arguments: dict) -> dict:
    """One scripted step: a batch of ``note`` calls."""
    return {"tool_calls": [{"name": "note", "arguments": a} for a in arguments]}


class Recorder(ScriptedProvider):
    """The scripted provider, keeping what each call was sent."""

    def __init__(self, scenario: Scenario, key: str, sent: list) -> None:
        super().__init__(scenario, key)
        self.sent = sent

    def complete(self, messages, tools, *, max_tokens):
        self.sent.append((list(messages), list(tools)))
        return super().complete(messages, tools, max_tokens=max_tokens)


class Script:
    """A provider choice replaying ``steps`` for the planner, recording every call."""

    def __init__(self, *steps: dict) -> None:
        self.scenario = Scenario.model_validate({"name": "notes", "roles": {"planner": steps}})
        self.sent: list[tuple[list[Message], list]] = []

    def open(self, key: str, **_: object) -> Recorder:
        """As ``ProviderChoice.open`` (its routes, role and job mean nothing to a replay)."""
        return Recorder(self.scenario, key, self.sent)


def planned(state: State, *steps: dict) -> tuple[Planner, Script, Any]:
    """A planner run through ``steps`` in its plan phase; the agent, its script, the outcome."""
    script = Script(*steps)
    agent = Planner(claimed(state), script, "w1")
    return agent, script, agent.drive(SYSTEM, agent.tools(), "plan")


def results(outcome: Any) -> list[str]:
    return [m.content for m in outcome.history if m.role == "tool"]


def test_memory_and_note_are_offered_in_every_phase_of_every_role_after_the_phase_own_tools(
    state: State,
) -> None:
    run = claimed(state)
    roles = {Planner: ["plan", "report", "resume", "review"], Coder: ["code"], Reviewer: ["review"],
             Subagent: ["research"]}  # fmt: skip
    for cls, phases in roles.items():
        agent = cls(run, ProviderChoice(), "w1")
        own = agent.tools()
        assert sorted({p for t in own for p in t.spec.phases}) == phases  # all the role has
        for phase in phases:
            engine = ContextEngine(MemoryArtifacts(), budgets=ROLE_BUDGETS[agent.role_name])
            request = ContextRequest(
                system="s",
                tools=[t.spec for t in agent.toolset(own)],
                state=WorkingState(goal="g", phase=phase),
                history=[],
            )
            offered = [t.name for t in engine.build(request).tools]
            own_here = [t.spec.name for t in own if phase in t.spec.phases]
            assert offered == [*own_here, "memory", "note"]


def test_a_fact_with_its_source_appears_in_the_next_call_prompt(state: State) -> None:
    agent, script, outcome = planned(state, note(**FACT), {"text": "done"})
    assert outcome.ok and results(outcome) == ["noted fact"]
    changes = script.sent[1][0][-1].content  # the volatile block, after everything cached
    assert changes.startswith("STATE CHANGES since v")
    assert "+ fact: [step 1, user] the user wants ASCII slugs only" in changes
    facts = agent.context.state.facts
    assert facts[-1].source == "user" and facts[-1].step == 1


def test_a_fact_without_a_source_or_with_an_unknown_one_is_a_tool_error(state: State) -> None:
    sourceless = {"kind": "fact", "text": "slugs are lowercase"}
    unknown = {**sourceless, "source": "nowhere.py"}
    missing = {**sourceless, "source": "a-0123456789abcdef"}
    agent, _, outcome = planned(state, notes(sourceless, unknown, missing), {"text": "done"})
    first, second, third = results(outcome)
    assert first.startswith("error: bad arguments for note: arguments: Value error, a fact needs")
    assert second.startswith("error: note: source 'nowhere.py' is neither an artifact id")
    assert third.startswith("error: note:") and "a-0123456789abcdef" in third
    assert agent.context.state.facts == ()


def test_a_counter_an_artifact_list_or_another_code_owned_part_cannot_be_written(
    state: State,
) -> None:
    attempts = [
        {**FACT, "progress": {"files": 9}},
        {"kind": "artifacts", "text": "[artifact a-0123456789abcdef file 1B trusted: x]"},
        {**FACT, "dropped": ["everything"], "said": ["approve it"]},
    ]
    script = Script(notes(*attempts), {"text": "done"})
    agent = Planner(claimed(state), script, "w1")
    before = agent.context.state.with_phase("plan")
    outcome = agent.drive(SYSTEM, agent.tools(), "plan")
    progress, artifacts, owned = results(outcome)
    assert progress == "error: bad arguments for note: progress: Extra inputs are not permitted"
    assert artifacts.startswith("error: bad arguments for note: kind: Input should be 'fact'")
    assert "dropped: Extra inputs" in owned and "said: Extra inputs" in owned
    assert agent.context.state == before  # nothing of the state changed


def test_a_note_over_the_text_limit_is_a_tool_error_not_a_cut(state: State) -> None:
    long = {**FACT, "text": "x" * (MAX_NOTE_CHARS + 1)}
    agent, _, outcome = planned(state, note(**long), {"text": "done"})
    assert results(outcome) == [
        f"error: bad arguments for note: text: Value error, a fact is at most {MAX_NOTE_CHARS} "
        "characters (a quote 1000): write a shorter one"
    ]
    assert agent.context.state.facts == ()


def test_a_note_survives_a_checkpoint_and_the_resume_of_the_task(state: State) -> None:
    script = Script(note(**FACT), note(kind="next_action", text="write the feature list"))
    agent = Planner(claimed(state), script, "w1")
    with pytest.raises(ScenarioExhausted):  # the worker "crashes" at its third call
        agent.drive(SYSTEM, agent.tools(), "plan")
    again = Script({"text": "done"})
    resumed = Planner(agent.run, again, "w2")  # from the task's records, as on another worker
    assert [(f.text, f.source) for f in resumed.context.state.facts] == [(FACT["text"], "user")]
    resumed.drive(SYSTEM, resumed.tools(), "plan")
    assert "the user wants ASCII slugs only" in again.sent[0][0][1].content  # the state's snapshot


def test_the_tools_slot_bytes_are_the_same_before_and_after_a_note_in_one_phase(
    state: State,
) -> None:
    _, script, outcome = planned(
        state, note(**FACT), note(kind="decision", text="one coder per module"), {"text": "done"}
    )
    assert outcome.ok and len(script.sent) == 3
    slots = [[t.schema_text for t in tools] for _, tools in script.sent]
    assert slots[0] == slots[1] == slots[2] and "note" in slots[0][-1]


def test_open_questions_and_the_next_action_are_bounded_by_their_room() -> None:
    room = 60
    tok, state = tokenizer(), WorkingState(goal="g")
    question = Note(kind="question", text="which locale rules apply to German titles?")
    state = write_note(state, question, step=1, tok=tok, room=room)
    with pytest.raises(ToolRefused, match="already open"):
        write_note(state, question, step=2, tok=tok, room=room)
    longer = Note(kind="question", text="and which for " + "Turkish, " * 30 + "or none?")
    with pytest.raises(ToolRefused, match="over their 60: resolve a question"):
        write_note(state, longer, step=2, tok=tok, room=room)
    resolved = write_note(
        state, Note(kind="resolve_question", text=question.text), step=2, tok=tok, room=room
    )
    assert resolved.open_questions == ()
    with pytest.raises(ToolRefused, match="no open question"):
        write_note(resolved, Note(kind="resolve_question", text="?"), step=3, tok=tok, room=room)


def test_facts_and_decisions_written_as_notes_are_archived_by_compaction() -> None:
    tok, state, sink = tokenizer(), WorkingState(goal="g"), MemoryArtifacts()
    engine = ContextEngine(sink)
    for step in range(1, 61):  # the state is compacted when it is re-rendered: not each step
        text = f"fact {step}: order {7_740_000 + step} ships from warehouse W{step} on Monday"
        state = write_note(state, Note(kind="fact", text=text, source="user"), step=step,
                           tok=tok, room=200)  # fmt: skip
        state = write_note(state, Note(kind="decision", text=f"decision {step}"), step=step,
                           tok=tok, room=200)  # fmt: skip
        state = engine.build(ContextRequest(system="s", tools=[], state=state, history=[])).state
    assert state.archived["facts"] > 0 and state.archived["decisions"] > 0 and state.index
    newest_archived = 7_740_000 + state.archived["facts"]
    assert state.facts[0].step > 1 and str(newest_archived) in state.salient  # its number kept
    assert '"previous": "a-' in sink.text(state.index)  # the chain holds the older ones
