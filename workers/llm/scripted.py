"""``scripted``: a deterministic replay of a scenario, for tests, demos and benchmarks.

A scenario lists, per role, what the model says at each step: text and/or
tool calls. Token usage is computed with the tokenizer from what is sent and
what is returned, so budgets, kill switch and metrics behave as with a real
model. Output that comes from it is always labelled ``scripted``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..context.engine import ToolSpec
from ..context.messages import Message, ToolCall
from ..context.tokens import tokenizer_for
from ..errors import ScenarioExhausted
from .base import ModelResponse, TokenUsage


class ScriptedCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptedStep(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()


class Scenario(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    roles: dict[str, tuple[ScriptedStep, ...]]

    @classmethod
    def from_file(cls, path: str | Path) -> Scenario:
        return cls.model_validate(json.loads(Path(path).read_text()))


class ScriptedProvider:
    name = "scripted"

    def __init__(self, scenario: Scenario, role: str, *, start_step: int = 0) -> None:
        if role not in scenario.roles:
            known = ", ".join(sorted(scenario.roles))
            raise ValueError(f"scenario {scenario.name!r} has no role {role!r} (has: {known})")
        self.model = f"scripted:{scenario.name}"
        self.scenario = scenario
        self.role = role
        self.step = start_step  # resumption continues from the task's records
        self.tok = tokenizer_for()

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, max_tokens: int
    ) -> ModelResponse:
        steps = self.scenario.roles[self.role]
        if self.step >= len(steps):
            raise ScenarioExhausted(
                f"scripted scenario {self.scenario.name!r}: role {self.role} has "
                f"{len(steps)} steps, step {self.step + 1} was asked for"
            )
        planned = steps[self.step]
        calls = tuple(
            ToolCall(id=f"call_{self.role}_{self.step}_{i}", name=c.name, arguments=c.arguments)
            for i, c in enumerate(planned.tool_calls)
        )
        self.step += 1
        reply = Message(role="assistant", content=planned.text, tool_calls=calls)
        sent = self.tok.count_messages(list(messages)) + sum(
            self.tok.count(t.schema_text()) for t in tools
        )
        return ModelResponse(
            text=planned.text,
            tool_calls=calls,
            usage=TokenUsage(
                input_tokens=sent,
                cached_tokens=0,
                output_tokens=min(self.tok.count_message(reply), max_tokens),
            ),
            provider=self.name,
            model=self.model,
            stop_reason="tool_use" if calls else "end_turn",
        )
