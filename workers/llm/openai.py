"""OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, llama.cpp, LM Studio)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..context.engine import ToolSpec
from ..context.messages import Message, ToolCall
from .base import HttpProvider, ModelResponse, TokenUsage, WireTools, estimate_tokens

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIProvider(HttpProvider):
    name = "openai"
    path = "/chat/completions"
    key_env = "OPENAI_API_KEY"
    default_base_url = DEFAULT_BASE_URL

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, max_tokens: int
    ) -> ModelResponse:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire(m) for m in messages],
            "max_tokens": max_tokens,
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = self.http.post(
            self.url, payload, headers, tokens=estimate_tokens(messages, max_tokens), used=_used,
            encoded={"tools": _TOOLS(tools)} if tools else None,
        )  # fmt: skip
        choice = body["choices"][0]
        message = choice.get("message") or {}
        usage = body.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return ModelResponse(
            text=message.get("content") or "",
            tool_calls=tuple(_tool_call(c) for c in message.get("tool_calls") or ()),
            usage=TokenUsage(
                input_tokens=int(usage.get("prompt_tokens", 0)),
                cached_tokens=int(details.get("cached_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens", 0)),
            ),
            provider=self.name,
            model=body.get("model", self.model),
            stop_reason=choice.get("finish_reason") or "",
            route=self.route_id,
            served_by=self.model,
        )


_TOOLS = WireTools(
    lambda t: {
        "type": "function",
        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
    }
)


def _used(body: dict[str, Any]) -> int:
    usage = body.get("usage") or {}
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def _wire(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    wire: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        wire["content"] = m.content or None
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json},
            }
            for c in m.tool_calls
        ]
    return wire


def _tool_call(raw: dict[str, Any]) -> ToolCall:
    function = raw.get("function") or {}
    name, text = function.get("name", ""), function.get("arguments") or "{}"
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        return ToolCall(id=raw.get("id", ""), name=name, invalid=f"arguments are not JSON: {exc}")
    if not isinstance(arguments, dict):
        return ToolCall(id=raw.get("id", ""), name=name, invalid="arguments are not an object")
    return ToolCall(id=raw.get("id", ""), name=name, arguments=arguments)
