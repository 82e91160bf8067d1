"""The scripted provider: a deterministic replay, with usage from the tokenizer."""

from __future__ import annotations

import pytest

from workers.context import Message, tokenizer_for
from workers.errors import ScenarioExhausted
from workers.llm import Scenario, ScriptedProvider

SCENARIO = Scenario.model_validate(
    {
        "name": "t",
        "roles": {
            "coder": [
                {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.py"}}]},
                {"text": "done"},
            ]
        },
    }
)


def test_it_replays_each_step_in_order_and_says_it_is_scripted() -> None:
    provider = ScriptedProvider(SCENARIO, "coder")
    chat = [Message(role="user", content="write a.py")]
    first = provider.complete(chat, [], max_tokens=100)
    second = provider.complete(chat, [], max_tokens=100)
    assert first.tool_calls[0].name == "write_file" and first.tool_calls[0].arguments == {
        "path": "a.py"
    }
    assert second.text == "done" and not second.tool_calls
    assert first.provider == "scripted" and first.model == "scripted:t"
    assert first.usage.input_tokens == tokenizer_for().count_messages(chat)
    with pytest.raises(ScenarioExhausted):
        provider.complete(chat, [], max_tokens=100)


def test_a_resumed_task_continues_at_its_recorded_step() -> None:
    provider = ScriptedProvider(SCENARIO, "coder", start_step=1)
    assert provider.complete([], [], max_tokens=10).text == "done"


def test_an_unknown_script_key_is_named() -> None:
    with pytest.raises(ScenarioExhausted, match="no script for 'planner'"):
        ScriptedProvider(SCENARIO, "planner")
