"""The agent loop: one model call a step, in named steps, within limits.

``AgentLoop.run`` drives a model until it answers without a tool call, and
stops with a stated reason otherwise — never a crash. Each step is a method:

- ``build``: the context engine builds the call from the run context's
  state (the kill switch may stop it); the context adopts the state the
  engine rebuilt;
- ``reserve``: the call's tokens are reserved from the job's budget before
  it is sent (``BudgetExceeded`` stops it); a job without a budget (and no
  tenant's daily one) reserves nothing;
- ``call``: the provider answers;
- ``settle``: the reservation is settled with the provider's usage (also
  when the call failed); with a job's ledger, by the call's usage record;
- ``record``: the call goes into the ledger (and, through it, the job's usage
  and its ``model.called`` event, and the settlement, in one script) with its
  latency, the bytes of the tool results it delivered and the size of the
  working state;
- ``act``: the answer ends the run, or its tool calls run, each handed the
  run context and returning a typed ``ToolResult`` whose refs the context
  keeps. A malformed call (arguments that are not JSON, an unknown tool,
  arguments that do not fit) or one a tool refuses goes back to the model as
  an error, at most ``max_tool_errors`` times in a run; past that the run
  fails. A result that ``ends_run`` (the task spawned children and waits for
  them, or delivered its result) ends it after its batch; later calls of the
  batch are not made; ``AgentOutcome.ended_by`` names the tool;
- ``checkpoint``: the run context saves its state (and the task gets its
  chance to stop a run whose lease was lost). A run a tool ended is not
  checkpointed here: a tool that hands the task off checkpoints before it
  does, since the handoff ends the claim. With ``ends_riding`` the run's last
  checkpoint and settlement ride with the caller's next write (a task's
  completion or spawn), which the caller then always makes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared_state import Reservation, TokenBudget

from .context import CallLedger, ContextEngine, ContextRequest, Message, Prompt, price_of
from .llm import ModelResponse, Provider
from .llm.failover import models_of
from .phases import CLOCK
from .run_context import RunContext
from .tools import ToolBox, ToolResult
from .tools.tool import REFUSED


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
    history: list[Message] = field(default_factory=list)
    ended_by: str = ""  # the tool whose result ended the run, if one did


class AgentLoop:
    def __init__(
        self,
        provider: Provider,
        engine: ContextEngine,
        tools: ToolBox,
        context: RunContext,
        *,
        ledger: CallLedger,
        budget: TokenBudget | None = None,
        limits: AgentLimits | None = None,
        ends_riding: bool = False,
    ) -> None:
        if budget is not None and not budget.budgeted and ledger.job is None:
            # Its calls reserve nothing: only a job's usage record counts what they used.
            raise ValueError("a budget of a job without one needs the job's ledger")
        self.provider = provider
        self.ends_riding = ends_riding
        self.engine = engine
        self.tools = tools
        self.context = context
        self.ledger = ledger
        self.budget = budget
        self.limits = limits or AgentLimits()
        self.history: list[Message] = []
        self.tool_errors = 0
        self.last_error = ""
        self.delivered = 0  # bytes of the tool results the next call carries to the model
        # The answered call's reservation (None: it made none), tokens used and cost, until
        # its usage record settles it (or counts them).
        self.settling: tuple[Reservation | None, int, float] | None = None

    def run(self, system: str, history: Sequence[Message], *, reference: str = "") -> AgentOutcome:
        self.history, self.tool_errors, self.last_error = list(history), 0, ""
        self.delivered = 0
        # What a model call records costs two round trips: the reservation (carrying the
        # last step's checkpoint; without one, the checkpoint alone) before it, the usage
        # record that settles it after it.
        for step in range(1, self.limits.max_steps + 1):
            with CLOCK.phase("build"):
                prompt = self.build(system, reference)
            with CLOCK.phase("record"):
                held = self.reserve(prompt)
                self.context.flush()  # the checkpoint, if no reservation carried it
            response: ModelResponse | None = None
            try:
                with CLOCK.phase("call"):
                    response, latency_ms = self.call(prompt)
            finally:
                with CLOCK.phase("record"):  # one phase for both: a switch reads the clock
                    self.settle(held, response)
                    if response is not None:
                        self.record(step, prompt, response, latency_ms)
            with CLOCK.phase("tools"):
                outcome = self.act(step, response)
            with CLOCK.phase("record"):
                if outcome is None:
                    self.checkpoint(ride=True)  # before the next call, with its reservation
                    continue
                if not outcome.ended_by:
                    self.checkpoint(ride=self.ends_riding)
                if not self.ends_riding:
                    self.context.flush()  # the settlement, if no usage record carried it
            return outcome
        return self._outcome(False, f"no answer within {self.limits.max_steps} steps")

    # -- the steps ---------------------------------------------------------------------

    def build(self, system: str, reference: str) -> Prompt:
        prompt = self.engine.build(
            ContextRequest(
                system=system,
                tools=self.tools.specs(),
                state=self.context.state,
                history=self.history,
                reference=reference,
            )
        )
        self.history = list(prompt.history)
        self.context.adopt(prompt.state)
        return prompt

    def reserve(self, prompt: Prompt) -> Reservation | None:
        """Hold the call's tokens, and their most cost (nothing cached, every output token)
        at the model's prices, in the job's budgets (``BudgetExceeded``: it is never sent);
        None when there is none to hold them in."""
        if self.budget is None:
            return None
        out = self.limits.max_output_tokens
        # At the dearest model that may answer (a fallback's, if dearer than the model's).
        most = max(price_of(m).cost(prompt.total_tokens, 0, out) for m in models_of(self.provider))
        return self.budget.reserve(prompt.total_tokens + out, most)

    def call(self, prompt: Prompt) -> tuple[ModelResponse, float]:
        """The model's response, and how long it took (ms)."""
        started = time.perf_counter()
        response = self.provider.complete(
            prompt.messages, prompt.tools, max_tokens=self.limits.max_output_tokens
        )
        return response, (time.perf_counter() - started) * 1000

    def settle(self, held: Reservation | None, response: ModelResponse | None) -> None:
        """Give back what the call did not use (all of it, when it failed), charging its
        cost at the prices of the model that answered."""
        if self.budget is None or (held is None and response is None):
            return
        if response is None:
            assert held is not None
            self.budget.settle(held, 0)
            return
        u = response.usage
        price = price_of(response.served_by or self.provider.model)
        cost = price.cost(u.input_tokens, u.cached_tokens, u.output_tokens)
        used = u.input_tokens + u.output_tokens
        if held is None:
            # Nothing held (no budget): the usage record counts the use in the budget.
            self.settling = (None, used, cost)
            return
        if self.ledger.job is not None:
            # The job's reservation is settled by the call's usage record, which ``record``
            # sends next (one script); a tenant's day by a settlement riding with it.
            self.settling = (held, used, cost)
            self.budget.settle_tenant_with_next_write(held, used, cost)
        else:
            self.budget.settle(held, used, cost)

    def record(self, step: int, prompt: Prompt, response: ModelResponse, latency_ms: float) -> None:
        settling, self.settling = self.settling, None
        try:
            self.ledger.record_prompt(
                prompt,
                step=step,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                cached_tokens=response.usage.cached_tokens,
                tool=",".join(c.name for c in response.tool_calls),
                tool_result_bytes=self.delivered,
                latency_ms=latency_ms,
                model=response.served_by,  # a fallback's model, priced as it
                route=response.route,
                settles=(settling[0].id if settling[0] else "*") if settling else "",
            )
        except BaseException:
            # Not recorded: the settlement goes with the next write instead — once either
            # way, by the reservation's id. (A call that reserved nothing has nothing to
            # settle: its use was counted if the record was.)
            if settling is not None and settling[0] is not None and self.budget is not None:
                self.budget.settle_with_next_write(settling[0], *settling[1:])
            raise
        self.delivered = 0

    def act(self, step: int, response: ModelResponse) -> AgentOutcome | None:
        """Answer, or run the response's tool calls; the outcome if the run is over."""
        self.history.append(response.message())
        if not response.tool_calls:
            return self._outcome(True, "answered", answer=response.text, steps=step)
        self.context.step = step
        ended_by = ""
        for call in response.tool_calls:
            if ended_by:
                result = ToolResult(content=f"{REFUSED}not run; {ended_by} ended this run")
            else:
                result = self.tools.call(call, self.context)
                if result.ends_run:
                    ended_by = call.name
            for ref in result.refs:
                self.context.keep(ref)
            self.history.append(result.message(call))
            self.delivered += len(result.content.encode())
            if result.error:
                self.tool_errors, self.last_error = self.tool_errors + 1, result.content
        if ended_by:
            return self._outcome(True, f"ended by {ended_by}", steps=step, ended_by=ended_by)
        if self.tool_errors > self.limits.max_tool_errors:
            reason = (
                f"the model made {self.tool_errors} invalid tool calls "
                f"(limit {self.limits.max_tool_errors}); last: {self.last_error}"
            )
            return self._outcome(False, reason, steps=step)
        return None

    def checkpoint(self, *, ride: bool = False) -> None:
        self.context.checkpoint(ride=ride)

    def _outcome(
        self, ok: bool, reason: str, *, answer: str = "", steps: int = 0, ended_by: str = ""
    ) -> AgentOutcome:
        steps = steps or self.limits.max_steps
        return AgentOutcome(ok, answer, reason, steps, self.history, ended_by)
