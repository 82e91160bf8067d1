"""Summaries by a cheap model: asked by name, recorded as compaction usage; none without one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coordinator.cli import _provider_env, app
from coordinator.settings import Settings
from shared_state import JobSpec, State
from workers.context import ContextRequest, Message, RollingSummary, ToolCall, WorkingState
from workers.llm import ModelSummarizer, ProviderChoice, ProviderName, ScriptedSummaryModel
from workers.outcomes import settle
from workers.roles.subagent import Subagent
from workers.summary import Summary

from .conftest import events_named
from .loopback import Loopback
from .test_journal import claimed

# Over the default 1,500-token cap; its first sentences fit well under it.
LONG = "\n".join(f"Finding {i}: case {i} fails. " + "detail " * 40 for i in range(60))


def turns(n: int) -> list[Message]:
    history: list[Message] = []
    for i in range(n):
        call = ToolCall(id=f"c{i}", name="read", arguments={"i": i})
        history += [
            Message(role="assistant", content=f"Reading part {i}.", tool_calls=(call,)),
            Message(role="tool", content="row " * 400, tool_call_id=call.id, name="read"),
        ]
    return history


def test_a_rolling_summary_with_a_summary_model_asks_that_model_and_counts_the_call(
    state: State,
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", token_budget=1_000_000))
    reply = {
        "model": "cheap",
        "choices": [{"message": {"content": "parts 0-3 read; nothing failed."}}],
        "usage": {"prompt_tokens": 1_700, "completion_tokens": 9},
    }
    with Loopback() as server:
        server.answer(200, reply)
        choice = ProviderChoice(
            provider=ProviderName.OPENAI, model="big", summary_model="cheap", base_url=server.url
        )
        provider = choice.open_summaries()
        assert provider is not None
        summarizer = ModelSummarizer(provider, budget=state.budget(job.job_id))
        strategy = RollingSummary(threshold=1_500, keep=1, summarizer=summarizer)
        request = ContextRequest(
            system="s", tools=[], state=WorkingState(goal="g"), history=turns(5)
        )
        prompt = strategy.build(request)
    (sent,) = server.requests
    assert sent["json"]["model"] == "cheap"
    assert "Reading part 0." in sent["json"]["messages"][-1]["content"]
    (summarized,) = strategy.compactions
    assert (summarized.model, summarized.input_tokens, summarized.output_tokens) == (
        "cheap",
        1_700,
        9,
    )
    assert "parts 0-3 read; nothing failed." in prompt.text()
    budget = state.budget(job.job_id).state()
    assert (budget.used, budget.reserved) == (1_709, 0)


def scripted_subagent(state: State, tmp_path: Path, summary_model: str) -> tuple[Subagent, str]:
    """A subagent whose scripted model answers over its cap; the agent and its job id."""
    run = claimed(state)
    script = tmp_path / "long.json"
    script.write_text(json.dumps({"name": "long", "roles": {"planner": [{"text": LONG}]}}))
    choice = ProviderChoice(script=str(script), summary_model=summary_model)
    return Subagent(run, choice, "w1"), run.job.job_id


def summary_of(agent: Subagent) -> Summary:
    task = agent.run.state.tasks.get(agent.task.job_id, agent.task.task_id)
    return Summary.model_validate_json(agent.artifacts.text(task.result))


def test_an_answer_over_its_cap_is_condensed_by_the_summary_model_as_a_compaction(
    state: State, tmp_path: Path
) -> None:
    agent, job_id = scripted_subagent(state, tmp_path, "cheap-summaries")
    settle(agent.run, agent.perform())
    summary = summary_of(agent)
    assert summary.condensed and summary.text.startswith("Finding 0: case 0 fails.")
    assert summary.tokens <= summary.cap
    usage = state.usage(job_id).get()
    assert (usage.calls, usage.compaction_calls) == (2, 1)
    called = [(e.kind, e.model) for e in events_named(state, job_id, "model.called")]
    assert called == [("step", "scripted:long"), ("compaction", "cheap-summaries")]


def test_without_a_summary_model_no_model_is_called_and_the_answer_is_cut(
    state: State, tmp_path: Path
) -> None:
    agent, job_id = scripted_subagent(state, tmp_path, "")
    settle(agent.run, agent.perform())
    summary = summary_of(agent)
    assert not summary.condensed and summary.full_text in summary.text  # cut, with its ref
    usage = state.usage(job_id).get()
    assert (usage.calls, usage.compaction_calls) == (1, 0)
    assert ProviderChoice().open_summaries() is None


def test_the_scripted_summary_model_answers_the_same_call_the_same_way() -> None:
    model = ScriptedSummaryModel("cheap")
    asked = [Message(role="system", content="Condense."), Message(role="user", content=LONG)]
    first = model.complete(asked, [], max_tokens=60)
    assert first == model.complete(asked, [], max_tokens=60)
    assert first.text.startswith("Finding 0: case 0 fails.\nFinding 1: case 1 fails.")
    assert first.usage.output_tokens == model.tok.count(first.text) <= 60
    assert (first.provider, first.model) == ("scripted", "cheap")


def test_the_summary_model_is_a_setting_and_an_option_of_up_and_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDFLEET_SUMMARY_MODEL", "from-env")
    assert Settings().provider_choice().summary_model == "from-env"
    choice, env = _provider_env(Settings(), None, None, None, None, "cheaper")
    assert choice.summary_model == "cheaper" and ("REDFLEET_SUMMARY_MODEL", "cheaper") in env
    assert "summaries by cheaper" in choice.describe()
    for command in ("up", "worker"):
        shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        assert "--summary-model" in shown
