"""The agent loop: context → budget → model → tools, step by step, within limits.

One ``AgentLoop.run`` drives a model until it answers without a tool call,
and stops with a stated reason otherwise — never a crash:

- the context is built by the context engine (the kill switch may stop it);
- the call's tokens are reserved from the job's budget before it is sent and
  settled with the provider's usage after (``BudgetExceeded`` stops it);
- every call is recorded in the ledger (and, through it, in the job's usage
  and its ``model.called`` event) with its latency, the bytes of the tool
  results it delivered and the size of the working state;
- a malformed tool call (arguments that are not JSON, an unknown tool,
  arguments that do not fit the tool) goes back to the model as a tool error,
  at most ``max_tool_errors`` times in a run; past that the run fails. A tool
  that refuses its input (``ToolRefused``: an unknown artifact, a bad path)
  counts the same way;
- a tool that ends the run (``ends_run``: it spawned children and the task
  now waits for them, or it delivered the run's result) ends it after its
  batch of calls; ``AgentOutcome.ended_by`` names it.

``on_step`` is called with the working state after each model response,
before its tools run: the task's checkpoint (and its chance to stop a run
whose lease was lost). Tools may update ``AgentLoop.state`` as they go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from shared_state import NotFound, TokenBudget

from .context import (
    CallLedger,
    ContextEngine,
    ContextRequest,
    Message,
    ToolCall,
    ToolSpec,
    WorkingState,
)
from .errors import ToolRefused
from .llm import Provider


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its schema, its argument model and what it does."""

    spec: ToolSpec
    arguments: type[pydantic.BaseModel]
    run: Callable[[Any], str]
    ends_run: bool = False

    @classmethod
    def of(
        cls,
        name: str,
        description: str,
        arguments: type[pydantic.BaseModel],
        run: Callable,
        *,
        phases: Iterable[str] = (),
        ends_run: bool = False,
    ) -> Tool:
        schema = arguments.model_json_schema()
        return cls(ToolSpec(name, description, schema, frozenset(phases)), arguments, run, ends_run)


class ToolBox:
    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = {t.spec.name: t for t in tools}
        if len(self.tools) != len(tools):
            names = [t.spec.name for t in tools]
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"tool names must be unique; given twice: {', '.join(twice)}")

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools.values()]

    def call(self, call: ToolCall, phase: str = "") -> tuple[str, bool]:
        """The tool's result, or an error the model can act on; and whether it ran."""
        if call.invalid:
            return f"error: tool call {call.name!r} rejected: {call.invalid}", False
        tool = self.tools.get(call.name)
        offered = [n for n, t in self.tools.items() if not t.spec.phases or phase in t.spec.phases]
        if tool is None or call.name not in offered:
            known = ", ".join(sorted(offered))
            return f"error: no tool {call.name!r} in phase {phase!r}; available: {known}", False
        try:
            arguments = tool.arguments.model_validate(call.arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return f"error: bad arguments for {call.name}: {problems}", False
        try:
            return tool.run(arguments), True
        except (ToolRefused, NotFound) as exc:
            return f"error: {call.name}: {exc}", False

    def ends_run(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and tool.ends_run


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
    ended_by: str = ""  # the ends_run tool that ended the run, if one did


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
        on_step: Callable[[WorkingState], None] | None = None,
    ) -> None:
        self.provider = provider
        self.engine = engine
        self.tools = tools
        self.ledger = ledger
        self.budget = budget
        self.limits = limits or AgentLimits()
        self.on_step = on_step
        self.state: WorkingState | None = None

    def run(
        self,
        system: str,
        state: WorkingState,
        history: Sequence[Message],
        *,
        reference: str = "",
    ) -> AgentOutcome:
        history, tool_errors, last_error = list(history), 0, ""
        self.state = state
        delivered = 0  # bytes of the tool results the next call carries to the model
        for step in range(1, self.limits.max_steps + 1):
            prompt = self.engine.build(
                ContextRequest(
                    system=system,
                    tools=self.tools.specs(),
                    state=self.state,
                    history=history,
                    reference=reference,
                )
            )
            history, self.state = list(prompt.history), prompt.state
            wanted = prompt.total_tokens + self.limits.max_output_tokens
            # BudgetExceeded: the call is never sent.
            held = self.budget.reserve(wanted) if self.budget is not None else None
            used = 0
            started = time.perf_counter()
            try:
                response = self.provider.complete(
                    prompt.messages, prompt.tools, max_tokens=self.limits.max_output_tokens
                )
                used = response.usage.input_tokens + response.usage.output_tokens
                latency_ms = (time.perf_counter() - started) * 1000
            finally:
                if self.budget is not None and held is not None:
                    self.budget.settle(held, used)
            self.ledger.record_prompt(
                prompt,
                step=step,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                cached_tokens=response.usage.cached_tokens,
                tool=",".join(c.name for c in response.tool_calls),
                tool_result_bytes=delivered,
                latency_ms=latency_ms,
            )
            delivered = 0
            history.append(response.message())
            if self.on_step is not None:
                self.on_step(self.state)
            if not response.tool_calls:
                return self._outcome(True, response.text, "answered", step, history)
            ended_by = ""
            for call in response.tool_calls:
                if ended_by:
                    # The run is over: later calls of the batch are not made.
                    result, ran = f"error: not run; {ended_by} ended this run", True
                else:
                    result, ran = self.tools.call(call, self.state.phase)
                    if ran and self.tools.ends_run(call.name):
                        ended_by = call.name
                history.append(
                    Message(role="tool", content=result, tool_call_id=call.id, name=call.name)
                )
                delivered += len(result.encode())
                if not ran:
                    tool_errors, last_error = tool_errors + 1, result
            if ended_by:
                outcome = self._outcome(True, "", f"ended by {ended_by}", step, history)
                outcome.ended_by = ended_by
                return outcome
            if tool_errors > self.limits.max_tool_errors:
                reason = (
                    f"the model made {tool_errors} invalid tool calls "
                    f"(limit {self.limits.max_tool_errors}); last: {last_error}"
                )
                return self._outcome(False, "", reason, step, history)
        reason = f"no answer within {self.limits.max_steps} steps"
        return self._outcome(False, "", reason, self.limits.max_steps, history)

    def _outcome(
        self, ok: bool, answer: str, reason: str, steps: int, history: list[Message]
    ) -> AgentOutcome:
        assert self.state is not None
        return AgentOutcome(ok, answer, reason, steps, self.state, history)
