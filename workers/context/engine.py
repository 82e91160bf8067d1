"""The context engine: what enters each model call, slot by slot, within budget.

``ContextEngine.build`` takes what a task knows (system prompt, tools, working
state, history, reference text, retrieved items) and returns the ``Prompt``
to send plus the history and state the task keeps afterwards (old tool
results cleared into artifacts, old turns rolled into the state). Every
overflow is handled by the slot's own behaviour (see ``budgets``); a context
still above the hard ceiling is never sent: ``ContextCeilingExceeded``
carries a diagnostic artifact instead (the kill switch).

Cache discipline: the stable slots come first and are byte-identical from
call to call; the working state is re-rendered only when the prefix is
invalidated anyway (phase change, compaction) or every ``state_refresh_steps``
calls, and tool results are cleared in batches — so most of each call is a
prefix the provider has already cached.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared_state import ArtifactRef, ArtifactSink, Trust

from ..errors import ContextCeilingExceeded, PromptTooLarge
from .budgets import DEFAULT_BUDGETS, ContextBudgets, Overflow, Slot
from .identifiers import extract
from .messages import Message, turns
from .tokens import Tokenizer, tokenizer_for
from .working_state import WorkingState

CLEARED_PREFIX = "[tool result cleared:"
TRUNCATED_MARK = "[truncated; full text:"


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; ``phases`` empty means every phase."""

    name: str
    description: str
    parameters: dict[str, Any]
    phases: frozenset[str] = frozenset()

    def schema_text(self) -> str:
        return json.dumps(
            {"name": self.name, "description": self.description, "parameters": self.parameters},
            sort_keys=True,
        )


@dataclass(frozen=True)
class Retrieved:
    text: str
    score: float
    source: str = ""


@dataclass(frozen=True)
class ContextRequest:
    system: str
    tools: Sequence[ToolSpec]
    state: WorkingState
    history: Sequence[Message]
    reference: str = ""
    retrieved: Sequence[Retrieved] = ()


@dataclass(frozen=True)
class Block:
    """One unit of a prompt, in order: what prefix caching compares."""

    slot: Slot
    text: str
    tokens: int


@dataclass
class Prompt:
    messages: list[Message]
    tools: list[ToolSpec]
    blocks: list[Block]
    history: list[Message]  # the history the task keeps from now on
    state: WorkingState  # the state the task keeps from now on
    actions: list[str] = field(default_factory=list)  # overflow handling done for this call

    @property
    def total_tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)

    def slot_tokens(self) -> dict[str, int]:
        counts = dict.fromkeys((s.value for s in Slot), 0)
        for block in self.blocks:
            counts[block.slot.value] += block.tokens
        return counts

    def prefix_hash(self) -> str:
        """Hash of the stable slots (system, tools, reference)."""
        stable = (Slot.SYSTEM, Slot.TOOLS, Slot.REFERENCE)
        text = "\x00".join(b.text for b in self.blocks if b.slot in stable)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def text(self) -> str:
        return "\n".join(b.text for b in self.blocks)


def _reduced(message: Message) -> bool:
    """Already cleared or truncated: its full text is in an artifact."""
    return message.content.startswith(CLEARED_PREFIX) or TRUNCATED_MARK in message.content


class ContextEngine:
    """Builds budgeted prompts for one task (it remembers the last state snapshot)."""

    def __init__(
        self,
        sink: ArtifactSink,
        *,
        budgets: ContextBudgets = DEFAULT_BUDGETS,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.sink = sink
        self.budgets = budgets
        self.tok = tokenizer or tokenizer_for()
        self._snapshot: str | None = None
        self._snapshot_phase = ""
        self._calls_since_snapshot = 0
        self._steps: list[dict[str, Any]] = []
        self._handles: dict[str, ArtifactRef] = {}  # tool call id -> its truncated result

    # -- the call ----------------------------------------------------------------------

    def build(self, request: ContextRequest) -> Prompt:
        actions: list[str] = []
        blocks = [self._system(request.system)]
        tools = self._tools(request, actions)
        blocks += [
            Block(Slot.TOOLS, t.schema_text(), self.tok.count(t.schema_text())) for t in tools
        ]
        if request.reference:
            blocks.append(self._reference(request.reference, actions))
        history = list(request.history)
        history = self._truncate_results(history, actions)
        history = self._clear_results(history, actions)
        state, kept = self._roll_tail(request.state, history, actions)
        fitted = self._fit_state(state, actions)
        # Rolling or compacting rewrites the prompt from the state on: refresh it then.
        blocks.append(self._state_block(fitted, kept is not history or fitted is not state))
        history = kept
        if request.retrieved:
            blocks += self._retrieved(request.retrieved, actions)
        blocks += [
            Block(
                Slot.RESULTS if m.is_tool_result else Slot.TAIL, m.text(), self.tok.count_message(m)
            )
            for m in history
        ]
        prompt = Prompt(
            messages=self._messages(blocks, history),
            tools=tools,
            blocks=blocks,
            history=history,
            state=fitted,
            actions=actions,
        )
        self._remember(prompt)
        if prompt.total_tokens > self.budgets.ceiling:
            # The kill switch: never sent.
            raise ContextCeilingExceeded(
                prompt.total_tokens, self.budgets.ceiling, self._diagnose(prompt)
            )
        return prompt

    # -- slots ---------------------------------------------------------------------------

    def _block(self, slot: Slot, text: str) -> Block:
        return Block(slot, text, self.tok.count(text))

    def _system(self, system: str) -> Block:
        tokens = self.tok.count(system)
        if tokens > self.budgets.tokens(Slot.SYSTEM):
            raise PromptTooLarge(Slot.SYSTEM, tokens, self.budgets.tokens(Slot.SYSTEM))
        return Block(Slot.SYSTEM, system, tokens)

    def _tools(self, request: ContextRequest, actions: list[str]) -> list[ToolSpec]:
        """The tools of the current phase (untagged tools belong to every phase).

        Should they still overflow the slot, the phase's own tools are kept
        ahead of the untagged ones, in their given order, as far as they fit.
        """
        budget = self.budgets.slots[Slot.TOOLS]
        phase = request.state.phase
        tools = [t for t in request.tools if not t.phases or phase in t.phases]
        tokens = sum(self.tok.count(t.schema_text()) for t in tools)
        if tokens <= budget.tokens:
            return tools
        if budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.TOOLS, tokens, budget.tokens)
        ranked = sorted(tools, key=lambda t: not t.phases)  # stable: phase tools first
        kept, used = [], 0
        for tool in ranked:
            cost = self.tok.count(tool.schema_text())
            if used + cost <= budget.tokens:
                kept.append(tool)
                used += cost
        actions.append(f"tools pruned: {len(kept)} of {len(tools)} for phase {phase!r}")
        return [t for t in tools if t in kept]

    def _reference(self, text: str, actions: list[str]) -> Block:
        budget = self.budgets.slots[Slot.REFERENCE]
        tokens = self.tok.count(text)
        if tokens <= budget.tokens:
            return Block(Slot.REFERENCE, text, tokens)
        if budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.REFERENCE, tokens, budget.tokens)
        ref = self.sink.put(text, kind="reference", title="reference context", trust=Trust.TRUSTED)
        head = self._head(text, budget.tokens, ref)
        actions.append(f"reference truncated to {budget.tokens} tokens ({ref.id})")
        return Block(Slot.REFERENCE, head, self.tok.count(head))

    def _state_block(self, state: WorkingState, rewritten: bool) -> Block:
        refresh = (
            rewritten
            or self._snapshot is None
            or state.phase != self._snapshot_phase
            or self._calls_since_snapshot >= self.budgets.state_refresh_steps
        )
        if refresh:
            self._snapshot, self._snapshot_phase = state.render(), state.phase
            self._calls_since_snapshot = 0
        self._calls_since_snapshot += 1
        assert self._snapshot is not None
        return Block(Slot.STATE, self._snapshot, self.tok.count(self._snapshot))

    def _fit_state(self, state: WorkingState, actions: list[str]) -> WorkingState:
        budget = self.budgets.slots[Slot.STATE]
        tokens = self.tok.count(state.render())
        if tokens <= budget.tokens:
            return state
        if budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.STATE, tokens, budget.tokens)
        compacted = state.compact(self.sink)
        actions.append(f"state compacted: {tokens} -> {self.tok.count(compacted.render())} tokens")
        return compacted

    def _retrieved(self, items: Sequence[Retrieved], actions: list[str]) -> list[Block]:
        budget = self.budgets.slots[Slot.RETRIEVED]
        ranked = sorted(items, key=lambda r: -r.score)
        blocks, used = [], 0
        for item in ranked:
            tokens = self.tok.count(item.text)
            if used + tokens > budget.tokens:
                if budget.overflow is Overflow.FAIL:
                    raise PromptTooLarge(Slot.RETRIEVED, used + tokens, budget.tokens)
                continue
            blocks.append(Block(Slot.RETRIEVED, item.text, tokens))
            used += tokens
        if len(blocks) < len(items):
            actions.append(f"retrieved: dropped {len(items) - len(blocks)} lowest-scored items")
        return blocks

    # -- history: tool results and the conversation tail -------------------------------------

    def _result_tokens(self, history: list[Message]) -> int:
        return sum(self.tok.count_message(m) for m in history if m.is_tool_result)

    def _clear_results(self, history: list[Message], actions: list[str]) -> list[Message]:
        policy = self.budgets.clearing
        total = self._result_tokens(history)
        if total <= policy.trigger:
            return history
        live = [
            i
            for i, m in enumerate(history)
            if m.is_tool_result
            and not m.content.startswith(CLEARED_PREFIX)
            and m.name not in policy.exclude_tools
        ]
        candidates = live[: max(0, len(live) - policy.keep)]
        plan, freed = [], 0
        for i in candidates:
            if freed >= policy.clear_at_least and total - freed <= policy.trigger:
                break
            stub = self._stub(history[i])
            freed += self.tok.count_message(history[i]) - self.tok.count_message(stub)
            plan.append((i, stub))
        if freed < policy.clear_at_least or not plan:
            return history
        cleared = list(history)
        for i, stub in plan:
            cleared[i] = stub
        actions.append(f"cleared {len(plan)} tool results ({freed} tokens)")
        return cleared

    def _stub(self, result: Message) -> Message:
        # A truncated result's full text is already stored: point at that artifact.
        ref = self._existing_ref(result) or self._store_result(result)
        content = f"{CLEARED_PREFIX} {ref.id}, {ref.bytes} bytes; read_artifact to see it]"
        return result.model_copy(update={"content": content})

    def _existing_ref(self, result: Message) -> ArtifactRef | None:
        if TRUNCATED_MARK not in result.content:
            return None
        return self._handles.get(result.tool_call_id or "")

    def _store_result(self, result: Message) -> ArtifactRef:
        return self.sink.put(
            result.content,
            kind="tool-result",
            title=f"{result.name or 'tool'} result for call {result.tool_call_id}",
            source=f"tool:{result.name}",
            trust=Trust.UNTRUSTED,
        )

    def _truncate_results(self, history: list[Message], actions: list[str]) -> list[Message]:
        """A tool result over ``max_result_tokens`` keeps a head and its artifact handle.

        The full text is one ``read_artifact`` away; the context carries only
        what the model needs to decide whether to read more.
        """
        budget = self.budgets.slots[Slot.RESULTS]
        limit = min(self.budgets.max_result_tokens, budget.tokens)
        out = list(history)
        for i, m in enumerate(history):
            if not m.is_tool_result or _reduced(m) or self.tok.count(m.content) <= limit:
                continue
            if budget.overflow is Overflow.FAIL:
                raise PromptTooLarge(Slot.RESULTS, self.tok.count(m.content), limit)
            ref = self._store_result(m)
            self._handles[m.tool_call_id or ""] = ref
            out[i] = m.model_copy(update={"content": self._head(m.content, limit, ref)})
            actions.append(f"tool result {m.tool_call_id} truncated to {limit} tokens ({ref.id})")
        return out

    def _head(self, text: str, tokens: int, ref: ArtifactRef) -> str:
        mark = f"\n{TRUNCATED_MARK} {ref.handle()}]"
        return self.tok.truncate(text, max(0, tokens - self.tok.count(mark))) + mark

    def _roll_tail(
        self, state: WorkingState, history: list[Message], actions: list[str]
    ) -> tuple[WorkingState, list[Message]]:
        """Roll the oldest whole turns into the working state until the tail fits."""
        budget = self.budgets.slots[Slot.TAIL]
        tail = sum(self.tok.count_message(m) for m in history if not m.is_tool_result)
        if tail <= budget.tokens:
            return state, history
        if budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.TAIL, tail, budget.tokens)
        grouped = turns(history)
        rolled: list[Message] = []
        # The last turn may hold a pending call: it is never rolled.
        while len(grouped) > 1 and tail > budget.tokens // 2:
            turn = grouped.pop(0)
            tail -= sum(self.tok.count_message(m) for m in turn if not m.is_tool_result)
            rolled += turn
        if not rolled:
            return state, history
        transcript = "\n".join(f"{m.role}: {m.text()}" for m in rolled)
        ref = self.sink.put(
            transcript,
            kind="transcript",
            title=f"{len(rolled)} earlier messages",
            source="conversation",
            trust=Trust.UNTRUSTED,
        )
        named = extract(transcript)
        state = state.keep_identifiers(named).add_artifact(ref)
        kept = state.render() + "\n" + self.sink.text(ref.id)
        lost = [i for i in named if i not in kept]
        if lost:
            state = state.model_copy(update={"dropped": (*state.dropped, *lost)})
        actions.append(
            f"rolled {len(rolled)} messages into state ({ref.id}), {len(named)} ids kept"
        )
        return state, [m for turn in grouped for m in turn]

    # -- assembly, memory, diagnostics -------------------------------------------------------

    def _messages(self, blocks: list[Block], history: list[Message]) -> list[Message]:
        system = next(b.text for b in blocks if b.slot is Slot.SYSTEM)
        context = [b.text for b in blocks if b.slot in (Slot.REFERENCE, Slot.STATE, Slot.RETRIEVED)]
        return [
            Message(role="system", content=system),
            Message(role="user", content="\n\n".join(context)),
            *history,
        ]

    def _remember(self, prompt: Prompt) -> None:
        self._steps = [
            *self._steps[-4:],
            {
                "tokens": prompt.total_tokens,
                "slots": prompt.slot_tokens(),
                "actions": prompt.actions,
            },
        ]

    def _diagnose(self, prompt: Prompt) -> ArtifactRef:
        largest = sorted(prompt.blocks, key=lambda b: -b.tokens)[:5]
        report = {
            "total_tokens": prompt.total_tokens,
            "ceiling": self.budgets.ceiling,
            "slots": prompt.slot_tokens(),
            "largest_items": [
                {"slot": b.slot.value, "tokens": b.tokens, "head": b.text[:200]} for b in largest
            ],
            "last_steps": self._steps,
        }
        return self.sink.put(
            json.dumps(report, indent=1),
            kind="diagnostic",
            title=f"kill switch: {prompt.total_tokens} tokens > ceiling {self.budgets.ceiling}",
            source="context-engine",
            trust=Trust.TRUSTED,
        )
