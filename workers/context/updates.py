"""What changed in the working state since its snapshot: the volatile block.

The state's snapshot sits in the cached prefix and is re-rendered only when
this block outgrows its budget (or a compaction wrote a new index, which
happens only at a re-render). Until then every change shows here — a new
phase or goal too — in a small block after the cached prefix, in the very
next call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .working_state import WorkingState, entry_text

# Parts that only grow between snapshots (compaction, which shrinks them, re-snapshots).
_APPENDED = {
    "said": "user said",
    "decisions": "decision",
    "facts": "fact",
    "pins": "kept verbatim",
    "artifacts": "artifact",
    "salient": "identifiers to keep",
    "identifiers": "identifiers",
    "dropped": "dropped",
}


def _added(before: Sequence[Any], after: Sequence[Any]) -> list[Any] | None:
    """The entries appended to ``before``; None when it was not merely appended to."""
    if tuple(after[: len(before)]) != tuple(before):
        return None
    return list(after[len(before) :])


def changes(before: WorkingState, after: WorkingState) -> list[str] | None:
    """One line per change from ``before`` to ``after``; None if only a new snapshot can show it.

    An identifier kept again only moves within its list (the most recent
    last); it is in the snapshot already, so only new ones are shown.
    """
    if after.index != before.index:
        return None
    lines: list[str] = []
    if after.goal != before.goal:
        lines.append(f"goal (now): {after.goal}")
    if after.phase != before.phase:
        lines.append(f"phase = {after.phase}")
    for name, label in _APPENDED.items():
        if name == "salient":
            added = _added(before.salient, after.salient)
            if added is None:
                return None
            if added:
                lines.append(f"+ {label}: {', '.join(added)}")
            continue
        if name == "identifiers":
            known = set(before.identifiers)
            new = [i for i in after.identifiers if i not in known]
            if new:
                lines.append(f"+ {label}: {', '.join(new)}")
            continue
        added = _added(getattr(before, name), getattr(after, name))
        if added is None:
            return None
        for entry in added:
            if name in ("facts", "pins"):
                lines.append(f"+ {label}: {entry_text(entry)[2:]}")
            elif name == "decisions":
                lines.append(f"+ {label}: {entry.text}")
            elif name == "artifacts":
                lines.append(f"+ {label}: {entry.handle()}")
            else:
                lines.append(f"+ {label}: {entry}")
    for counter, value in after.progress.items():
        if before.progress.get(counter) != value:
            lines.append(f"progress.{counter} = {value}")
    for name, ref in after.refs.items():
        if before.refs.get(name) != ref:
            lines.append(f"refs.{name} = {ref.id}")
    opened = [q for q in after.open_questions if q not in before.open_questions]
    closed = [q for q in before.open_questions if q not in after.open_questions]
    lines += [f"+ open question: {q}" for q in opened]
    lines += [f"- resolved question: {q}" for q in closed]
    if after.next_action != before.next_action:
        lines.append(f"next action: {after.next_action or '(none)'}")
    return lines


def render(before: WorkingState, after: WorkingState, lines: list[str]) -> str:
    return f"STATE CHANGES since v{before.version} (now v{after.version})\n" + "\n".join(lines)
