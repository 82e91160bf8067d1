"""The context engine: what enters each model call, slot by slot, within budget.

``ContextEngine.build`` takes what a task knows (system prompt, tools, working
state, history, reference text, retrieved items) and returns the ``Prompt``
to send plus the history and state the task keeps afterwards (seen tool
results cleared into artifacts, old turns rolled into the state). Every
overflow is handled by the slot's own behaviour (see ``budgets``); a context
still above the hard ceiling is never sent: ``ContextCeilingExceeded``
carries a diagnostic artifact instead (the kill switch).

What the model has not seen is never taken from it: the results of the
latest assistant turn stay whole until the model has answered once (only a
batch too large for the results slot is cut, each result to its share, with
the rest one reader call away). A result no longer than a stub (``KEPT_WHOLE_TOKENS``:
"wrote part.py", "saved [artifact …]") is never cut or cleared: a stub would
not shorten it. Every reduced result leaves a stub carrying
the identifiers of its full text and its handle (``stubs``); what a stub
cannot carry is listed in the state's ``dropped``. Rolled turns pin the
user's words verbatim and their identifiers in the state.

Cache discipline: the stable slots come first and are byte-identical from
call to call; the working state's snapshot is re-rendered (and only then
compacted) when its changes outgrow the small ``updates`` block that follows
everything cached — a roll, a phase change or a part over its budget shows
there first and busts nothing by itself; tool results are cleared in batches,
once the call nears the high-water target — so most of each call is a prefix
the provider has already cached.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from shared_state import ArtifactRef, ArtifactSink, Trust

from ..errors import ContextCeilingExceeded, PromptTooLarge
from . import stubs, updates
from .budgets import DEFAULT_BUDGETS, ContextBudgets, Overflow, Slot
from .compaction import fit, state_tokens
from .identifiers import extract
from .messages import Message, ToolCall, turns
from .stubs import Reduced
from .tokens import MESSAGE_OVERHEAD, Tokenizer, tokenizer_for
from .working_state import WorkingState

_ARTIFACT_ID = re.compile(r"a-[0-9a-f]{16}")
# The fixed words of a cut mark, besides its identifiers (a generous bound).
_CUT_MARK_TOKENS = 80
# A result this short stays whole in the context, never cut or cleared: the stub that would
# replace it (its handle and the reader call that shows it, with no identifier: 44 tokens;
# 29 in a phase that offers no reader) is about as long, so reducing it would free next to
# nothing and hide what it said. (It is stored all the same, as every result is the step
# it arrives: the job's record of what its model was told.)
KEPT_WHOLE_TOKENS = 48


# Every slot's name, in order (``Prompt.slot_tokens``: counted on every call).
_SLOT_NAMES = tuple(s.value for s in Slot)


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; ``phases`` empty means every phase.

    ``keeps_arguments``: the values the model writes as this tool's
    arguments are its own decisions — a branch name it chose, a command line,
    a short block — pinned verbatim when their turn rolls out of the tail.
    False for a reader (its arguments are addresses, kept as identifiers like
    any other) and for the ``note`` tool (its arguments are the note).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    phases: frozenset[str] = frozenset()
    keeps_arguments: bool = True

    @cached_property
    def schema_text(self) -> str:
        """The tool as the tools slot holds it, made once: a ``Tool``'s spec is shared by every
        run that offers it (``tools.tool``), and every call of a run counts and sends it."""
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
        counts = dict.fromkeys(_SLOT_NAMES, 0)
        for block in self.blocks:
            counts[block.slot.value] += block.tokens
        return counts

    def prefix_hash(self) -> str:
        """Hash of the stable slots (system, tools, reference)."""
        stable = (Slot.SYSTEM, Slot.TOOLS, Slot.REFERENCE)
        return _prefix_digest(tuple(b.text for b in self.blocks if b.slot in stable))

    def text(self) -> str:
        return "\n".join(b.text for b in self.blocks)


# The stable slots repeat call after call (a tool's text is one string a process keeps,
# ``ToolSpec.schema_text``): hashing them again, ~24 KB a call, took ~27 µs of it, the
# memo ~2. The key's hash is each string's own, cached by Python; the entries hold
# strings the runs in flight hold anyway, so the size is a little over a process's slots.
@lru_cache(maxsize=128)
def _prefix_digest(texts: tuple[str, ...]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]


def _fresh(history: Sequence[Message]) -> set[int]:
    """Indices of the tool results the model has not answered yet (after its last message)."""
    last = max((i for i, m in enumerate(history) if m.role == "assistant"), default=-1)
    return {i for i in range(last + 1, len(history)) if history[i].is_tool_result}


def _is_reduced(message: Message) -> bool:
    """Already cleared or cut: its full text is in an artifact."""
    return message.reduced != ""


def _shares(sizes: dict[int, int], budget: int) -> dict[int, int]:
    """Water-filling: the largest results of a batch share what the smaller ones leave."""
    caps: dict[int, int] = {}
    left, order = budget, sorted(sizes, key=lambda i: sizes[i])
    for n, i in enumerate(order):
        fair = left // (len(order) - n)
        if sizes[i] <= fair:
            left -= sizes[i]
        else:
            caps[i] = fair
            left -= fair
    return caps


def _record_hidden(
    state: WorkingState, result: Message, hidden: list[str], reduced: Reduced
) -> WorkingState:
    """One ``dropped`` line for the identifiers a reduced result's stub could not carry.

    One line per result, not one per identifier: the list stays small, so it
    does not churn the state (each identifier is in the artifact it names).
    """
    if not hidden:
        return state
    return state.record_dropped(
        [f"{len(hidden)} identifiers of the result of {result.tool_call_id} (in {reduced.ref.id})"]
    )


# A value the model wrote as an argument is pinned when it is at most this long: a name, a
# command line, a short block; a whole file it wrote is in the workspace, not the state.
PINNED_ARGUMENT_CHARS = 300


def _pin_arguments(state: WorkingState, rolled: list[Message], acting: set[str]) -> WorkingState:
    """Pin the string values the model wrote as arguments to tools that act.

    A value already in a note or pin the state shows adds nothing (a note's
    own arguments are the note).
    """
    noted = [*(f.text for f in state.facts), *(d.text for d in state.decisions)]
    for message in rolled:
        for call in message.tool_calls:
            if call.name not in acting:
                continue
            for value in _strings(call.arguments):
                if 0 < len(value) <= PINNED_ARGUMENT_CHARS and not any(value in n for n in noted):
                    state = state.pin(value, source=f"your {call.name} call", step=0)
    return state


def _strings(value: Any) -> list[str]:
    """The string values in a call's arguments, nested ones too, in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


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
        self._snapshot: WorkingState | None = None
        self._snapshot_block: Block | None = None
        self._steps: list[dict[str, Any]] = []
        self._reduced: dict[str, Reduced] = {}  # tool call id -> its stored full text
        self._read = 0  # messages of the history the task keeps already read for ``salient``

    # -- the call ----------------------------------------------------------------------

    def build(self, request: ContextRequest) -> Prompt:
        actions: list[str] = []
        blocks = [self._system(request.system)]
        tools = self._tools(request, actions)
        blocks += [Block(Slot.TOOLS, t.schema_text, self.tok.count(t.schema_text)) for t in tools]
        if request.reference:
            blocks.append(self._reference(request.reference, actions))
        retrieved = self._retrieved(request.retrieved, actions) if request.retrieved else []
        offered = {t.name for t in tools}
        history, state = list(request.history), request.state
        fresh = _fresh(history)
        self._store_fresh(history, fresh)
        acting = {t.name for t in request.tools if t.keeps_arguments}
        state = self._salient(state, history, acting)
        tail = sum(self.tok.count_message(m) for m in history if not m.is_tool_result)
        room = self.budgets.results_room(sum(b.tokens for b in [*blocks, *retrieved]), tail)
        history, state = self._cut_fresh(history, fresh, state, offered, actions)
        history, state = self._clear_seen(history, fresh, state, offered, room, actions)
        state, history = self._roll(state, history, room, acting, actions)
        state, snapshot, changes = self._state_blocks(state, actions)
        blocks.append(snapshot)
        blocks += retrieved
        blocks += [
            Block(
                Slot.RESULTS if m.is_tool_result else Slot.TAIL, m.text(), self.tok.count_message(m)
            )
            for m in history
        ]
        if changes is not None:
            blocks.append(changes)
        prompt = Prompt(
            messages=self._messages(blocks, history),
            tools=tools,
            blocks=blocks,
            history=history,
            state=state,
            actions=actions,
        )
        self._remember(prompt)
        self._read = len(history)
        if prompt.total_tokens > self.budgets.ceiling:
            # The kill switch: never sent.
            raise ContextCeilingExceeded(
                prompt.total_tokens, self.budgets.ceiling, self._diagnose(prompt)
            )
        return prompt

    # -- slots ---------------------------------------------------------------------------

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
        tokens = sum(self.tok.count(t.schema_text) for t in tools)
        if tokens <= budget.tokens:
            return tools
        if budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.TOOLS, tokens, budget.tokens)
        ranked = sorted(tools, key=lambda t: not t.phases)  # stable: phase tools first
        kept, used = [], 0
        for tool in ranked:
            cost = self.tok.count(tool.schema_text)
            if used + cost <= budget.tokens:
                kept.append(tool)
                used += cost
        actions.append(f"tools pruned: {len(kept)} of {len(tools)} for phase {phase!r}")
        return [t for t in tools if t in kept]

    def _reference(self, text: str, actions: list[str]) -> Block:
        budget = self.budgets.slots[Slot.REFERENCE]
        # By pieces: a run's reference is new text, but most of its lines are not (the
        # goal, the recalled memory every run of a job and later jobs are shown).
        tokens = self.tok.count_pieces(text)
        if tokens <= budget.tokens:
            return Block(Slot.REFERENCE, text, tokens)
        if budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.REFERENCE, tokens, budget.tokens)
        ref = self.sink.put(text, kind="reference", title="reference context", trust=Trust.TRUSTED)
        mark = f"\n[truncated; full text: {ref.handle()}]"
        head = self.tok.truncate(text, max(0, budget.tokens - self.tok.count(mark))) + mark
        actions.append(f"reference truncated to {budget.tokens} tokens ({ref.id})")
        return Block(Slot.REFERENCE, head, self.tok.count(head))

    def _fit_state(self, state: WorkingState, actions: list[str]) -> WorkingState:
        """The state with every part within its budget (compacted if it had to be)."""
        budget = self.budgets.slots[Slot.STATE]
        if budget.overflow is Overflow.FAIL:
            tokens = state_tokens(self.tok, state)
            if tokens > budget.tokens:
                raise PromptTooLarge(Slot.STATE, tokens, budget.tokens)
            return state
        fitted, done = fit(self.tok, state, self.budgets.state, budget.tokens, self.sink)
        actions += done
        return fitted

    def _state_blocks(
        self, state: WorkingState, actions: list[str]
    ) -> tuple[WorkingState, Block, Block | None]:
        """The state the task keeps, its snapshot (cached) and what changed since, if anything.

        The snapshot is re-rendered only when the changes since it outgrow the
        ``updates`` block (or cannot be told as changes: a compaction's new
        index). Only then is the state compacted, so a part passing its budget
        never busts the cache by itself: until the next snapshot its new entries
        are in the small block after everything cached.
        """
        budget = self.budgets.slots[Slot.UPDATES]
        if self._snapshot is not None and self._snapshot_block is not None:
            lines = updates.changes(self._snapshot, state)
            if lines == []:
                return state, self._snapshot_block, None
            if lines is not None:
                text = updates.render(self._snapshot, state, lines)
                block = Block(Slot.UPDATES, text, self.tok.count_pieces(text))
                if block.tokens <= budget.tokens:
                    return state, self._snapshot_block, block
                if budget.overflow is Overflow.FAIL:
                    raise PromptTooLarge(Slot.UPDATES, block.tokens, budget.tokens)
                actions.append(f"state re-rendered: {block.tokens} tokens of changes")
        state = self._fit_state(state, actions)
        text = state.render()
        self._snapshot = state
        self._snapshot_block = Block(Slot.STATE, text, self.tok.count_pieces(text))
        return state, self._snapshot_block, None

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

    def _store(self, result: Message, call: ToolCall | None) -> Reduced:
        """The result's full text as an artifact, with the identifiers it names (once)."""
        key = result.tool_call_id or ""
        known = self._reduced.get(key)
        if known is not None:
            return known
        ref = self.sink.put(
            result.content,
            kind="tool-result",
            title=f"{result.name or 'tool'} result for call {result.tool_call_id}",
            source=f"tool:{result.name}",
            trust=Trust.UNTRUSTED,
        )
        # What the call was made with is in the tail already: the stub need not repeat it.
        named = extract(result.content, exclude=extract(call.arguments_json) if call else ())
        reduced = Reduced(ref, len(result.content.splitlines()), tuple(named))
        self._reduced[key] = reduced
        return reduced

    def _store_fresh(self, history: list[Message], fresh: set[int]) -> None:
        """Store each new result and read its identifiers once, the step it arrives.

        A clearing then only swaps texts: the work of reducing a result is
        spread over the steps results arrive, not piled on the step a batch
        is cleared (so a step's build time stays flat).
        """
        calls = {c.id: c for m in history for c in m.tool_calls}
        for i in sorted(fresh):
            if not _is_reduced(history[i]):
                self._store(history[i], calls.get(history[i].tool_call_id or ""))

    def _kept_whole(self, result: Message) -> bool:
        """No longer than a stub (``KEPT_WHOLE_TOKENS``): never cut or cleared."""
        return self.tok.count(result.content) <= KEPT_WHOLE_TOKENS

    def _salient(
        self, state: WorkingState, history: list[Message], acting: set[str]
    ) -> WorkingState:
        """Identifiers the model names again after a tool revealed them become salient.

        Named in its own words or in the arguments of a tool that acts; a
        reader's arguments are addresses (reading a path a listing showed is
        not naming it again). Read once per message: the messages after those
        of the history the task kept from the last call (all of them if it
        kept another).
        """
        new = history[self._read :] if len(history) >= self._read else history
        words = [m.content for m in new if m.role == "assistant"]
        words += [
            c.arguments_json
            for m in new
            if m.role == "assistant"
            for c in m.tool_calls
            if c.name in acting
        ]
        named = [n for text in words for n in extract(text)]
        if not named:
            return state
        known = set(state.identifiers)
        revealed = [
            n
            for n in named
            if n in known or any(n in r.identifiers for r in self._reduced.values())
        ]
        return state.keep_salient(revealed)

    def _cut_fresh(
        self,
        history: list[Message],
        fresh: set[int],
        state: WorkingState,
        offered: set[str],
        actions: list[str],
    ) -> tuple[list[Message], WorkingState]:
        """A batch of new results too large for the results slot: each keeps a head of its share.

        The head ends at a whole line; the mark after it names the lines not
        shown, the reader call that shows them and the identifiers of the
        full text (so one in the middle of a long file is still in sight).
        """
        budget = self.budgets.slots[Slot.RESULTS]
        sizes = {
            i: self.tok.count_message(history[i]) for i in fresh if not _is_reduced(history[i])
        }
        if sum(sizes.values()) <= budget.tokens:
            return history, state
        if budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.RESULTS, sum(sizes.values()), budget.tokens)
        # Results kept whole are not cut (a mark would be longer): the rest share what they leave.
        live = {i: n for i, n in sizes.items() if not self._kept_whole(history[i])}
        left = max(0, budget.tokens - sum(n for i, n in sizes.items() if i not in live))
        calls = {c.id: c for m in history for c in m.tool_calls}
        out = list(history)
        for i, cap in _shares(live, left).items():
            result = history[i]
            reduced = self._store(result, calls.get(result.tool_call_id or ""))
            room = cap - MESSAGE_OVERHEAD - self.budgets.stub_identifiers - _CUT_MARK_TOKENS
            head = self.tok.truncate(result.content, max(0, room))
            if "\n" in head:
                head = head[: head.rindex("\n")]
            kept_lines = len(head.splitlines())
            in_head = set(extract(head))
            rest = [n for n in reduced.identifiers if n not in in_head]
            shown, hidden = stubs.bounded(self.tok, rest, self.budgets.stub_identifiers)
            call = stubs.reader_call(reduced.ref, offered, kept_lines + 1, reduced.lines)
            mark = stubs.cut(reduced, kept_lines, shown, hidden, call)
            out[i] = result.model_copy(update={"content": head + mark, "reduced": "cut"})
            state = _record_hidden(state, result, hidden, reduced)
            actions.append(
                f"tool result {result.tool_call_id} cut to {kept_lines} of {reduced.lines} lines "
                f"before it was seen, to share the results slot ({reduced.ref.id})"
            )
        return out, state

    def _clear_seen(
        self,
        history: list[Message],
        fresh: set[int],
        state: WorkingState,
        offered: set[str],
        room: int,
        actions: list[str],
    ) -> tuple[list[Message], WorkingState]:
        """Replace results the model has seen by stubs, in batches (see ``ClearingPolicy``)."""
        policy = self.budgets.clearing
        total = sum(self.tok.count_message(m) for m in history if m.is_tool_result)
        if total <= (room if policy.trigger is None else policy.trigger):
            return history, state
        seen = [
            i
            for i, m in enumerate(history)
            if m.is_tool_result
            and i not in fresh
            and m.reduced != "cleared"
            and m.name not in policy.exclude_tools
            and not (m.reduced == "" and self._kept_whole(m))
        ]
        calls = {c.id: c for m in history for c in m.tool_calls}
        plan: list[tuple[int, Message, list[str], Reduced]] = []
        freed = 0
        # A clearing re-sends everything after the first cleared result uncached anyway,
        # so it clears every seen result but the ``keep`` most recent: one bust, then a
        # long run of calls whose prefix is stable.
        for i in seen[: max(0, len(seen) - policy.keep)]:
            result = history[i]
            reduced = self._store(result, calls.get(result.tool_call_id or ""))
            shown, hidden = stubs.bounded(
                self.tok, reduced.identifiers, self.budgets.stub_identifiers
            )
            call = stubs.reader_call(reduced.ref, offered, 1, reduced.lines)
            stub = result.model_copy(
                update={
                    "content": stubs.cleared(reduced, shown, hidden, call),
                    "reduced": "cleared",
                }
            )
            freed += self.tok.count_message(result) - self.tok.count_message(stub)
            plan.append((i, stub, hidden, reduced))
        if freed < policy.clear_at_least or not plan:
            return history, state
        cleared = list(history)
        for i, stub, hidden, reduced in plan:
            cleared[i] = stub
            state = _record_hidden(state, stub, hidden, reduced)
        actions.append(f"cleared {len(plan)} seen tool results ({freed} tokens)")
        return cleared, state

    def _roll(
        self,
        state: WorkingState,
        history: list[Message],
        room: int,
        acting: set[str],
        actions: list[str],
    ) -> tuple[WorkingState, list[Message]]:
        """Roll the oldest whole turns into the state while the tail or the results overflow
        (the results: the ``room`` this call leaves them).

        The turn the model answers now (the latest assistant turn and what
        follows it) is never rolled. Rolled turns go to a transcript artifact;
        the user's words in them are pinned verbatim, the identifiers they
        name (a reduced result's from its full text) are kept, and so are the
        values the model wrote as arguments to tools that act, verbatim
        (``_pin_arguments``). Rolling goes to half the overflowing budget, so
        the cache bust it costs is rare.
        """
        tail_budget = self.budgets.slots[Slot.TAIL]
        sizes = [self.tok.count_message(m) for m in history]
        tail = sum(n for n, m in zip(sizes, history, strict=True) if not m.is_tool_result)
        results = sum(sizes) - tail
        over_tail, over_results = tail > tail_budget.tokens, results > room
        if not (over_tail or over_results):
            return state, history
        if tail_budget.overflow is Overflow.FAIL:
            raise PromptTooLarge(Slot.TAIL, tail, tail_budget.tokens)
        fresh = sum(sizes[i] for i in _fresh(history))
        tail_goal = tail_budget.tokens // 2 if over_tail else tail_budget.tokens
        results_goal = (room + fresh) // 2 if over_results else room
        grouped = turns(history)
        last = max((i for i, m in enumerate(history) if m.role == "assistant"), default=-1)
        rolled: list[Message] = []
        while len(grouped) > 1 and (tail > tail_goal or results > results_goal):
            if len(rolled) + len(grouped[0]) > last:
                break  # the next turn holds the latest assistant message
            turn = grouped.pop(0)
            for m in turn:
                n = self.tok.count_message(m)
                results, tail = (results - n, tail) if m.is_tool_result else (results, tail - n)
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
        named: list[str] = []
        for m in rolled:
            reduced = self._reduced.pop(m.tool_call_id or "", None) if m.is_tool_result else None
            if reduced is not None:
                named += reduced.identifiers
            elif m.role != "user":  # the user's words are pinned whole
                named += [n for n in extract(m.text()) if not _ARTIFACT_ID.fullmatch(n)]
        said = [m.content for m in rolled if m.role == "user"]
        state = state.pin_said(said).keep_identifiers(named).add_artifact(ref)
        state = _pin_arguments(state, rolled, acting)
        actions.append(
            f"rolled {len(rolled)} messages into state ({ref.id}): "
            f"{len(said)} user turns pinned, {len(set(named))} identifiers kept"
        )
        return state, [m for turn in grouped for m in turn]

    # -- assembly, memory, diagnostics -------------------------------------------------------

    def _messages(self, blocks: list[Block], history: list[Message]) -> list[Message]:
        system = next(b.text for b in blocks if b.slot is Slot.SYSTEM)
        context = [b.text for b in blocks if b.slot in (Slot.REFERENCE, Slot.STATE, Slot.RETRIEVED)]
        # The changes come last: after everything a provider may have cached.
        changes = [Message(role="user", content=b.text) for b in blocks if b.slot is Slot.UPDATES]
        return [
            Message(role="system", content=system),
            Message(role="user", content="\n\n".join(context)),
            *history,
            *changes,
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
