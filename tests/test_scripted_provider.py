"""The scripted provider: a deterministic replay, with usage from the tokenizer."""

from __future__ import annotations

import pytest

from workers.context import Message, ToolCall, tokenizer_for
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


def test_ref_arguments_name_the_last_artifact_of_their_kind_in_the_prompt() -> None:
    steps = [{"tool_calls": [{"name": "read", "arguments": {"id": "$ref:features", "n": 1}}]}]
    scenario = Scenario.model_validate({"name": "r", "roles": {"coder": steps}})
    context = (
        "[artifact a-00000000000000aa features 10B trusted: old]\n"
        "[artifact a-00000000000000bb file 10B untrusted: f.py]\n"
        "[artifact a-00000000000000cc features 12B trusted: new]"
    )
    reply = ScriptedProvider(scenario, "coder").complete(
        [Message(role="user", content=context)], [], max_tokens=50
    )
    assert reply.tool_calls[0].arguments == {"id": "a-00000000000000cc", "n": 1}


def test_cached_tokens_are_the_prefix_sent_unchanged_on_the_previous_call() -> None:
    provider = ScriptedProvider(SCENARIO, "coder")
    head = [Message(role="system", content="rules " * 50), Message(role="user", content="go")]
    first = provider.complete(head, [], max_tokens=100)
    second = provider.complete([*head, Message(role="user", content="more")], [], max_tokens=100)
    assert first.usage.cached_tokens == 0
    assert second.usage.cached_tokens == tokenizer_for().count_messages(head)


def test_a_replay_run_out_after_a_refused_step_says_what_was_refused() -> None:
    """A script written for another job asks for a step more once a tool refuses its
    call: the error names the refusal, which is what to fix, not the step count alone."""
    provider = ScriptedProvider(SCENARIO, "coder")
    chat = [Message(role="user", content="write a.py")]
    provider.complete(chat, [], max_tokens=100)
    provider.complete(chat, [], max_tokens=100)
    refused = [
        *chat,
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="write_file"),)),
        Message(
            role="tool", tool_call_id="c1", name="write_file", content="error: the path\nis bad"
        ),
    ]
    with pytest.raises(ScenarioExhausted) as ran_out:
        provider.complete(refused, [], max_tokens=100)
    said = str(ran_out.value)
    assert "coder has 2 steps, step 3 was asked for" in said
    assert "last step's write_file was refused (error: the path is bad)" in said
    assert "a replay cannot adapt" in said
    with pytest.raises(ScenarioExhausted) as plain:  # nothing refused: the count alone
        provider.complete(chat, [], max_tokens=100)
    assert str(plain.value).endswith("step 3 was asked for")


def test_an_unknown_script_key_is_named() -> None:
    with pytest.raises(ScenarioExhausted, match="no script for 'planner'"):
        ScriptedProvider(SCENARIO, "planner")
