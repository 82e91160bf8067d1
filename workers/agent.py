"""The agent loop: context → budget → model → tools, step by step, within limits.

One ``AgentLoop.run`` drives a model until it answers without a tool call,
and stops with a stated reason otherwise — never a crash:

- the context is built by the context engine (the kill switch may stop it);
- the call's tokens are reserved from the job's budget before it is sent and
  settled with the provider's usage after (``BudgetExceeded`` stops it);
- every call is recorded in the ledger (and, through it, in the job's usage);
- a malformed tool call (arguments that are not JSON, an unknown tool,
  arguments that do not fit the tool) goes back to the model as a tool error,
  at most ``max_tool_errors`` times in a run; past that the run fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from shared_state import TokenBudget

from .context import (
    CallLedger,
    ContextEngine,
    ContextRequest,
    Message,
    ToolCall,
    ToolSpec,
    WorkingState,
)
from .llm import Provider


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its schema, its argument model and what it does."""

    spec: ToolSpec
    arguments: type[pydantic.BaseModel]
    run: Callable[[Any], str]

    @classmethod
    def of(
        cls, name: str, description: str, arguments: type[pydantic.BaseModel], run: Callable
    ) -> Tool:
        return cls(ToolSpec(name, description, arguments.model_json_schema()), arguments, run)


class ToolBox:
    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = {t.spec.name: t for t in tools}

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools.values()]

    def call(self, call: ToolCall) -> tuple[str, bool]:
        """The tool's result, or an error the model can act on; and whether it ran."""
        if call.invalid:
            return f"error: tool call {call.name!r} rejected: {call.invalid}", False
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools))
            return f"error: unknown tool {call.name!r}; available: {known}", False
        try:
            arguments = tool.arguments.model_validate(call.arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return f"error: bad arguments for {call.name}: {problems}", False
        return tool.run(arguments), True


@dataclass(frozen=True)
class AgentLimits:
    max_steps: int = 30
    max_output_tokens: int = 1_024
    max_tool_errors: int = 3


@dataclass
class AgentOutcome:
    ok: bool
    answer: str
    reason: str
    steps: int
    state: WorkingState
    history: list[Message] = field(default_factory=list)


class AgentLoop:
    def __init__(
        self,
        provider: Provider,
        engine: ContextEngine,
        tools: ToolBox,
        *,
        ledger: CallLedger,
        budget: TokenBudget | None = None,
        limits: AgentLimits | None = None,
    ) -> None:
        self.provider = provider
        self.engine = engine
        self.tools = tools
        self.ledger = ledger
        self.budget = budget
        self.limits = limits or AgentLimits()

    def run(self, system: str, state: WorkingState, history: Sequence[Message]) -> AgentOutcome:
        history, tool_errors, last_error = list(history), 0, ""
        for step in range(1, self.limits.max_steps + 1):
            prompt = self.engine.build(
                ContextRequest(
                    system=system, tools=self.tools.specs(), state=state, history=history
                )
            )
            history, state = list(prompt.history), prompt.state
            reserved = prompt.total_tokens + self.limits.max_output_tokens
            if self.budget is not None:
                self.budget.reserve(reserved)  # BudgetExceeded: the call is never sent
            used = 0
            try:
                response = self.provider.complete(
                    prompt.messages, prompt.tools, max_tokens=self.limits.max_output_tokens
                )
                used = response.usage.input_tokens + response.usage.output_tokens
            finally:
                if self.budget is not None:
                    self.budget.settle(reserved, used)
            self.ledger.record_prompt(
                prompt,
                step=step,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                cached_tokens=response.usage.cached_tokens,
                tool=",".join(c.name for c in response.tool_calls),
            )
            history.append(response.message())
            if not response.tool_calls:
                return AgentOutcome(True, response.text, "answered", step, state, history)
            for call in response.tool_calls:
                result, ran = self.tools.call(call)
                history.append(
                    Message(role="tool", content=result, tool_call_id=call.id, name=call.name)
                )
                if not ran:
                    tool_errors, last_error = tool_errors + 1, result
            if tool_errors > self.limits.max_tool_errors:
                reason = (
                    f"the model made {tool_errors} invalid tool calls "
                    f"(limit {self.limits.max_tool_errors}); last: {last_error}"
                )
                return AgentOutcome(False, "", reason, step, state, history)
        reason = f"no answer within {self.limits.max_steps} steps"
        return AgentOutcome(False, "", reason, self.limits.max_steps, state, history)
