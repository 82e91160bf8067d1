"""Chat messages as the context engine sees them (immutable)."""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Role = Literal["system", "user", "assistant", "tool"]
# How much of a tool result is left in its message: all of it (""), a head ("cut": the
# whole is in an artifact its text names) or only a stub ("cleared"). Never sent.
Reduction = Literal["", "cut", "cleared"]


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = {}
    invalid: str = ""  # why the model's arguments could not be used ("" when they can)

    @cached_property
    def arguments_json(self) -> str:
        # The model's own characters, as it wrote them (and as providers accept them).
        return json.dumps(self.arguments, sort_keys=True, ensure_ascii=False)


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # on a tool result: the call it answers
    name: str | None = None  # on a tool result: the tool's name
    reduced: Reduction = ""  # on a tool result: set when its full text went into an artifact

    @property
    def is_tool_result(self) -> bool:
        return self.role == "tool"

    def text(self) -> str:
        """Everything the model reads of this message (for recall checks)."""
        return self.full_text

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Message:
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("full_text", None)  # the copy's text is its own, made when asked
        return copy

    @cached_property
    def full_text(self) -> str:
        # Made once per message: the same object every step, so comparing it is O(1).
        calls = " ".join(f"{c.name}({c.arguments_json})" for c in self.tool_calls)
        return f"{self.content} {calls}".strip()


def turns(messages: list[Message]) -> list[list[Message]]:
    """Group a history into turns that must stay together.

    An assistant message with tool calls and the tool results that answer it
    form one turn: clearing or compaction moves whole turns, never a call
    without its result (providers reject orphaned tool results).
    """
    grouped: list[list[Message]] = []
    for message in messages:
        if message.is_tool_result and grouped and _answers(grouped[-1], message):
            grouped[-1].append(message)
        else:
            grouped.append([message])
    return grouped


def _answers(turn: list[Message], result: Message) -> bool:
    return any(result.tool_call_id == c.id for m in turn for c in m.tool_calls)
