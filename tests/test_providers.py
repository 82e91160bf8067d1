"""Providers against loopback servers speaking each wire format (real sockets, real client)."""

from __future__ import annotations

import importlib
import json

import pytest

from workers.context import Message, ToolCall, ToolSpec
from workers.errors import AuthError, BadRequest, ModelNotFound, ProviderUnavailable
from workers.llm import AnthropicProvider, OpenAIProvider, RetryPolicy

from .loopback import Loopback

FAST = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5)
TOOLS = [ToolSpec("read_lines", "read lines of an artifact", {"type": "object"})]
CHAT = [
    Message(role="system", content="be brief"),
    Message(role="user", content="read it"),
    Message(
        role="assistant",
        content="",
        tool_calls=(ToolCall(id="c0", name="read_lines", arguments={"id": "a-1"}),),
    ),
    Message(role="tool", content="line 1", tool_call_id="c0", name="read_lines"),
]


def openai_answer(message: dict, cached: int = 0) -> dict:
    return {
        "model": "m-1",
        "choices": [{"message": message, "finish_reason": "tool_calls"}],
        "usage": {
            "prompt_tokens": 120,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def test_openai_retries_429_and_500_then_returns_tool_calls_and_usage() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_lines", "arguments": '{"id": "a-1"}'},
    }
    with Loopback() as server:
        server.answer(429, {"error": {"message": "slow down"}}, **{"retry-after": "0"})
        server.answer(500, {"error": {"message": "boom"}})
        server.answer(200, openai_answer({"content": None, "tool_calls": [call]}, cached=100))
        provider = OpenAIProvider("m-1", base_url=server.url + "/v1", api_key="k", retry=FAST)
        response = provider.complete(CHAT, TOOLS, max_tokens=50)
    assert len(server.requests) == 3
    sent = server.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == "Bearer k"
    assert sent["json"]["tools"][0]["function"]["name"] == "read_lines"
    assert [m["role"] for m in sent["json"]["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["json"]["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"id": "a-1"}'
    assert sent["json"]["messages"][3]["tool_call_id"] == "c0"
    assert response.tool_calls == (ToolCall(id="c1", name="read_lines", arguments={"id": "a-1"}),)
    assert (response.usage.input_tokens, response.usage.cached_tokens) == (120, 100)
    assert response.usage.output_tokens == 9 and response.provider == "openai"


@pytest.mark.parametrize("provider", [OpenAIProvider, AnthropicProvider])
def test_a_calls_tools_are_sent_as_encoding_the_whole_request_would_send_them(
    provider: type[OpenAIProvider] | type[AnthropicProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each tool's JSON is made once and kept (``WireTools``): the request is, byte for
    byte, the compact UTF-8 JSON of the whole of it, tools last; a tool sent again is not
    encoded again, and a spec made anew (the same name, another description) is sent as
    it now is."""
    module = importlib.import_module(provider.__module__)
    made: list[str] = []
    wire = module._TOOLS.wire
    monkeypatch.setattr(module._TOOLS, "wire", lambda t: made.append(t.name) or wire(t))
    first = [
        ToolSpec("read_lines", "lire les lignes de l'élément — é", {"type": "object"}),
        ToolSpec("grep", "search an artifact", {"type": "object"}),
    ]
    again = [ToolSpec("read_lines", "read the lines", {"type": "object"}), first[1]]
    answer = (
        openai_answer({"content": "ok"})
        if provider is OpenAIProvider
        else {"content": [{"type": "text", "text": "ok"}], "usage": {}}
    )
    with Loopback() as server:
        for _ in range(3):
            server.answer(200, answer)
        model = provider("m-1", base_url=server.url + "/v1", api_key="k", retry=FAST)
        for tools in (first, first, again):
            model.complete(CHAT, tools, max_tokens=50)
    assert made == ["read_lines", "grep", "read_lines"]  # each spec encoded once
    bodies = [r["body"] for r in server.requests]
    for body in bodies:
        whole = json.loads(body)
        assert list(whole)[-1] == "tools"
        assert json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode() == body
    assert bodies[0] == bodies[1]
    described = [
        t.get("description") or t["function"]["description"]
        for r in server.requests
        for t in r["json"]["tools"][:1]
    ]
    assert described == ["lire les lignes de l'élément — é"] * 2 + ["read the lines"]


def test_openai_marks_a_malformed_tool_call_instead_of_crashing() -> None:
    bad = {"id": "c2", "type": "function", "function": {"name": "read_lines", "arguments": "{oops"}}
    with Loopback() as server:
        server.answer(200, openai_answer({"content": "", "tool_calls": [bad]}))
        response = OpenAIProvider("m", base_url=server.url, api_key="k", retry=FAST).complete(
            CHAT, TOOLS, max_tokens=10
        )
    (call,) = response.tool_calls
    assert call.name == "read_lines" and call.invalid.startswith("arguments are not JSON")


@pytest.mark.parametrize(
    ("status", "error", "needle"),
    [
        (401, AuthError, "API key was rejected"),
        (404, ModelNotFound, "unknown model"),
        (400, BadRequest, "HTTP 400"),
    ],
)
def test_openai_fails_at_once_with_one_clear_line_on_errors_retries_cannot_fix(
    status, error, needle
) -> None:
    with Loopback() as server:
        server.answer(status, {"error": {"message": "nope"}})
        provider = OpenAIProvider("m", base_url=server.url, api_key="bad", retry=FAST)
        with pytest.raises(error) as err:
            provider.complete(CHAT, TOOLS, max_tokens=10)
    assert len(server.requests) == 1
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_openai_gives_up_after_the_bounded_retries() -> None:
    with Loopback() as server:
        for _ in range(FAST.attempts):
            server.answer(503, {"error": {"message": "overloaded"}})
        provider = OpenAIProvider("m", base_url=server.url, api_key="k", retry=FAST)
        with pytest.raises(ProviderUnavailable, match="after 4 attempts"):
            provider.complete(CHAT, TOOLS, max_tokens=10)
    assert len(server.requests) == FAST.attempts


def test_an_unreachable_server_is_a_provider_error_after_retries() -> None:
    with Loopback() as server:
        url = server.url
    provider = OpenAIProvider("m", base_url=url, api_key="k", retry=FAST)
    with pytest.raises(ProviderUnavailable, match=r"after 4 attempts .*Connection refused"):
        provider.complete(CHAT, TOOLS, max_tokens=10)


def test_anthropic_sends_a_cache_breakpoint_and_reads_cache_usage() -> None:
    answer = {
        "model": "claude-x",
        "content": [
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "tu1", "name": "read_lines", "input": {"id": "a-1"}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 20,
            "cache_read_input_tokens": 300,
            "cache_creation_input_tokens": 5,
            "output_tokens": 12,
        },
    }
    with Loopback() as server:
        server.answer(500, {"type": "error", "error": {"message": "overloaded"}})
        server.answer(200, answer)
        provider = AnthropicProvider("claude-x", base_url=server.url, api_key="k", retry=FAST)
        response = provider.complete(CHAT, TOOLS, max_tokens=50)
    sent = server.requests[-1]
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == "k" and sent["headers"]["anthropic-version"]
    body = sent["json"]
    assert body["system"] == [
        {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}
    ]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"][0] == {
        "type": "tool_use",
        "id": "c0",
        "name": "read_lines",
        "input": {"id": "a-1"},
    }
    assert body["messages"][2]["content"][0]["type"] == "tool_result"
    assert body["tools"][0]["input_schema"] == {"type": "object"}
    assert response.text == "reading"
    assert response.tool_calls == (ToolCall(id="tu1", name="read_lines", arguments={"id": "a-1"}),)
    assert (response.usage.input_tokens, response.usage.cached_tokens) == (325, 300)
    assert response.usage.output_tokens == 12
