"""Anthropic messages API, with a prompt-cache breakpoint after the stable prefix.

Anthropic caches the prompt in the order tools → system → messages; a
``cache_control`` breakpoint on the system block covers the tools and the
system prompt — redfleet's stable slots. Usage reports cache reads and
writes separately; ``input_tokens`` here is the whole input, cached included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..context.engine import ToolSpec
from ..context.messages import Message, ToolCall
from .base import HttpProvider, ModelResponse, TokenUsage, WireTools, estimate_tokens

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class AnthropicProvider(HttpProvider):
    name = "anthropic"
    path = "/v1/messages"
    key_env = "ANTHROPIC_API_KEY"
    default_base_url = DEFAULT_BASE_URL

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, max_tokens: int
    ) -> ModelResponse:
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": _wire([m for m in messages if m.role != "system"]),
        }
        if system:
            payload["system"] = [
                {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
            ]
        headers = {"x-api-key": self.api_key, "anthropic-version": API_VERSION}
        body = self.http.post(
            self.url, payload, headers, tokens=estimate_tokens(messages, max_tokens), used=_used,
            encoded={"tools": _TOOLS(tools)} if tools else None,
        )  # fmt: skip
        texts, calls = [], []
        for block in body.get("content") or ():
            if block.get("type") == "text":
                texts.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                calls.append(_tool_call(block))
        usage = body.get("usage") or {}
        read = int(usage.get("cache_read_input_tokens") or 0)
        written = int(usage.get("cache_creation_input_tokens") or 0)
        return ModelResponse(
            text="".join(texts),
            tool_calls=tuple(calls),
            usage=TokenUsage(
                input_tokens=int(usage.get("input_tokens", 0)) + read + written,
                cached_tokens=read,
                output_tokens=int(usage.get("output_tokens", 0)),
            ),
            provider=self.name,
            model=body.get("model", self.model),
            stop_reason=body.get("stop_reason") or "",
            route=self.route_id,
            served_by=self.model,
        )


_TOOLS = WireTools(
    lambda t: {"name": t.name, "description": t.description, "input_schema": t.parameters}
)


def _used(body: dict[str, Any]) -> int:
    usage = body.get("usage") or {}
    fields = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
              "output_tokens")  # fmt: skip
    return sum(int(usage.get(f) or 0) for f in fields)


def _tool_call(block: dict[str, Any]) -> ToolCall:
    arguments = block.get("input")
    if not isinstance(arguments, dict):
        return ToolCall(
            id=block.get("id", ""), name=block.get("name", ""), invalid="input is not an object"
        )
    return ToolCall(id=block.get("id", ""), name=block.get("name", ""), arguments=arguments)


def _wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat messages as Anthropic turns: tool results ride in a user turn."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant" and m.tool_calls:
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": m.content}] if m.content else []
            )
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m.role, "content": m.content})
    return out
