"""Keeping the working state within its budget, part by part.

Each part of the state has its own budget (``StateBudget``). A part over it
moves its oldest entries into an index artifact until it is at half its
budget, leaving a count in ``archived`` and the index's id in ``index``
(each index names the one before it, so the chain holds everything). Before
that, identifiers of one shape (a ticket, a version, a URL per file read)
collapse into their newest with a count (``_families``), so a name unlike the
others outlives a flood of alike ones. What the user said, and the pinned
spans, are archived only when they cannot fit, and then each is also listed
in ``dropped``: a visible loss, never a silent one; archived notes leave one
line there too. Identifiers named in archived notes, user turns and pins
stay, as salient ones. Of the model's notes, facts and decisions are
archived; open questions and the next action stay in view, bounded when they
are written (``unarchived_notes_tokens``).

The engine compacts only when it re-renders the state's snapshot (its
changes outgrew their block), so compaction never busts the cache by itself.
A compaction that does not shrink the state, or leaves it over the slot's
budget, raises ``StateCompactionStuck``: it is a bug, not a log line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from shared_state import ArtifactRef, ArtifactSink, Trust

from ..errors import StateCompactionStuck
from .budgets import StateBudget
from .identifiers import extract
from .tokens import Tokenizer
from .working_state import WorkingState, entry_text

# Parts archived oldest first, in this order (archived notes pin identifiers first).
_LISTS = ("said", "pins", "salient", "identifiers", "artifacts")


def state_tokens(tok: Tokenizer, state: WorkingState) -> int:
    """The rendered state's tokens, counted by pieces so unchanged lines cost nothing."""
    return tok.count_pieces(state.render())


def unarchived_notes_tokens(tok: Tokenizer, state: WorkingState) -> int:
    """Tokens of the notes compaction never archives: the open questions and the next action.

    They stay in view until the model resolves or replaces them, so whoever
    writes them keeps them within the notes budget (the ``note`` tool does).
    """
    return _size(tok, [*state.open_questions, state.next_action])


def _size(tok: Tokenizer, entries: Sequence[Any]) -> int:
    return sum(tok.count(_line(e)) + 1 for e in entries)


def _line(entry: Any) -> str:
    """An entry as the rendered state shows it, for its size."""
    return entry_text(entry)


def _oldest(tok: Tokenizer, entries: Sequence[Any], budget: int) -> int:
    """How many of the oldest entries to archive to bring the part to half its budget."""
    if _size(tok, entries) <= budget:
        return 0
    size, n = _size(tok, entries), 0
    while n < len(entries) and size > budget // 2:
        size -= tok.count(_line(entries[n])) + 1
        n += 1
    return n


def _notes(tok: Tokenizer, state: WorkingState, budget: int) -> tuple[int, int]:
    """How many of the oldest decisions and facts to archive (the model's notes)."""
    notes = [*state.decisions, *state.facts, *state.open_questions, state.next_action]
    if _size(tok, notes) <= budget:
        return 0, 0
    size = _size(tok, notes)
    decisions = facts = 0
    # Alternate, oldest first, so neither kind is emptied for the other.
    while size > budget // 2 and (decisions < len(state.decisions) or facts < len(state.facts)):
        if decisions < len(state.decisions) and (
            facts >= len(state.facts)
            or (state.decisions[decisions].step, decisions) <= (state.facts[facts].step, facts)
        ):
            size -= tok.count(_line(state.decisions[decisions])) + 1
            decisions += 1
        else:
            size -= tok.count(_line(state.facts[facts])) + 1
            facts += 1
    return decisions, facts


# A name's shape: each run of digits a 9, each run of letters an a (``BILL-4017`` and
# ``TASK-88`` are ``a-9``; ``services/ledger/cache_12.py`` is ``a/a/a_9.a``).
_RUNS = re.compile(r"(\d+)|([^\W\d_]+)")
_FAMILY = re.compile(r"^(\S+) \(\+(\d+) like it, archived\)$")
FAMILY_SIZE = 3  # names of one shape that make a family


def _shape(name: str) -> str:
    return _RUNS.sub(lambda m: "9" if m[1] else "a", name)


def _families(identifiers: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
    """Names of one shape collapsed into their newest, with a count; and the members that left.

    A flood of generated names is mostly such families (one ticket, version
    or URL per file read): collapsing them keeps room for the names unlike
    any other, which a recency rule would push out with the flood.
    """
    groups: dict[str, list[tuple[str, int]]] = {}
    for name in identifiers:
        family = _FAMILY.match(name)
        head, count = (family[1], int(family[2])) if family else (name, 0)
        groups.setdefault(_shape(head), []).append((head, count))
    left: list[str] = []
    keep: dict[str, str] = {}
    for shape, group in groups.items():
        if len(group) < FAMILY_SIZE:
            continue
        newest, _ = group[-1]
        total = sum(count + 1 for _, count in group) - 1
        keep[shape] = f"{newest} (+{total} like it, archived)"
        left += [head for head, _ in group[:-1]]
    if not left:
        return tuple(identifiers), []
    collapsed: list[str] = []
    for name in identifiers:
        family = _FAMILY.match(name)
        shape = _shape(family[1] if family else name)
        if shape not in keep:
            collapsed.append(name)
        elif (family[1] if family else name) == keep[shape].split(" ", 1)[0]:
            collapsed.append(keep[shape])
    return tuple(dict.fromkeys(collapsed)), left


def _notes_line(notes: list[Any], index: str) -> str:
    """One ``dropped`` line for the notes a compaction archived: how many, of which steps."""
    steps = sorted({n.step for n in notes})
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    return f"{len(notes)} earlier notes of {span} (in {index}; their identifiers kept)"


def _plain(entry: Any) -> Any:
    if isinstance(entry, ArtifactRef):
        # Typed in the index too; the preview is left to the artifact itself.
        return entry.model_dump(mode="json", exclude={"preview"})
    return entry if isinstance(entry, str) else entry.model_dump(mode="json")


def _index(
    state: WorkingState, moved: dict[str, list[Any]], sink: ArtifactSink
) -> tuple[WorkingState, str]:
    """Write archived entries to a new index artifact (naming the previous one)."""
    doc: dict[str, Any] = {"previous": state.index, "state_version": state.version}
    doc |= {part: [_plain(e) for e in entries] for part, entries in moved.items()}
    counts = ", ".join(f"{len(v)} {part}" for part, v in moved.items())
    ref = sink.put(
        json.dumps(doc, indent=1, ensure_ascii=False),
        kind="state-index",
        title=f"state v{state.version} archive: {counts}",
        source="working-state",
        trust=Trust.TRUSTED,
    )
    archived = dict(state.archived)
    for part, entries in moved.items():
        archived[part] = archived.get(part, 0) + len(entries)
    return state.model_copy(update={"archived": archived, "index": ref.id}), ref.id


def _compact_once(
    tok: Tokenizer, state: WorkingState, budget: StateBudget, sink: ArtifactSink
) -> tuple[WorkingState, list[str]]:
    moved: dict[str, list[Any]] = {}
    decisions, facts = _notes(tok, state, budget.notes)
    if decisions or facts:
        moved["decisions"] = list(state.decisions[:decisions])
        moved["facts"] = list(state.facts[:facts])
        archived_text = json.dumps(
            [_plain(e) for v in moved.values() for e in v], ensure_ascii=False
        )
        state = state.model_copy(
            update={"decisions": state.decisions[decisions:], "facts": state.facts[facts:]}
        ).keep_salient(extract(archived_text))
    if _size(tok, state.identifiers) > budget.identifiers:
        collapsed, members = _families(state.identifiers)
        if members:
            moved["identifiers"] = members
            state = state.model_copy(update={"identifiers": collapsed})
    for part in _LISTS:
        entries = getattr(state, part)
        n = _oldest(tok, entries, getattr(budget, part))
        if n:
            moved[part] = [*moved.get(part, []), *entries[:n]]
            state = state.model_copy(update={part: entries[n:]})
            if part in ("said", "pins"):  # the words leave the view; the names in them stay
                texts = [e if isinstance(e, str) else e.text for e in moved[part]]
                state = state.keep_salient(extract("\n".join(texts)))
    moved = {part: entries for part, entries in moved.items() if entries}
    actions: list[str] = []
    if moved:
        state, index = _index(state, moved, sink)
        counts = ", ".join(f"{len(v)} {part}" for part, v in moved.items())
        actions.append(f"state archived into {index}: {counts}")
        notes = [*moved.get("decisions", []), *moved.get("facts", [])]
        lost = [_notes_line(notes, index)] if notes else []
        lost += [f"user turn {t[:60]!r} (in {index})" for t in moved.get("said", [])]
        lost += [f"kept span {p.text[:60]!r} (in {index})" for p in moved.get("pins", [])]
        if lost:
            # Archived, not deleted, but no longer in front of the model: say so.
            state = state.record_dropped(lost)
            actions.append(f"notes, user turns or pins over their budget, in {index}")
    n = _oldest(tok, state.dropped, budget.dropped)
    if n:
        old, kept = list(state.dropped[:n]), state.dropped[n:]
        state, index = _index(state.model_copy(update={"dropped": kept}), {"dropped": old}, sink)
        actions.append(f"state archived into {index}: {n} dropped")
    return state, actions


def fit(
    tok: Tokenizer, state: WorkingState, budget: StateBudget, slot: int, sink: ArtifactSink
) -> tuple[WorkingState, list[str]]:
    """The state with every part within its budget, and what was archived to get there."""
    before = state_tokens(tok, state)
    compacted, actions = _compact_once(tok, state, budget, sink)
    if not actions:
        if before > slot:
            raise StateCompactionStuck(before, before, slot)
        return state, []
    after = state_tokens(tok, compacted)
    if after >= before or after > slot:
        raise StateCompactionStuck(before, after, slot)
    compacted = compacted.model_copy(update={"version": state.version + 1})
    return compacted, [*actions, f"state compacted: {before} -> {after} tokens"]
