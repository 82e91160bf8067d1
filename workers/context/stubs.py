"""The text a reduced tool result leaves in the context: its handle, its identifiers, a reader.

A result is reduced in two ways: cleared (after the model has seen it, only
the stub stays) or cut (a batch too large for the results slot keeps a head
of each result). Either way the stub carries the identifiers found in the
result's FULL text, up to a token bound, next to the handle of the artifact
holding it, and names the call — of a reader this phase actually offers —
that shows the rest.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from shared_state import ArtifactRef

from .tokens import Tokenizer

CLEARED_PREFIX = "[tool result cleared:"
CUT_MARK = "[cut before you saw the rest:"


@dataclass(frozen=True)
class Reduced:
    """A tool result whose full text is in an artifact, with the identifiers it names."""

    ref: ArtifactRef
    lines: int
    identifiers: tuple[str, ...]


def reader_call(ref: ArtifactRef, offered: Collection[str], start: int, end: int) -> str:
    """How to read lines ``start``..``end`` of the artifact: one call to a reader offered."""
    if "read_lines" in offered:
        return f'read it with read_lines(id="{ref.id}", start={start}, end={end})'
    if "grep_artifact" in offered:
        return f'search it with grep_artifact(id="{ref.id}", pattern="<what you need>")'
    return "no reader is offered in this phase"


def bounded(tok: Tokenizer, identifiers: Sequence[str], tokens: int) -> tuple[list[str], list[str]]:
    """The identifiers that fit in ``tokens`` (in order), and those that do not."""
    shown: list[str] = []
    used = 0
    for n, ident in enumerate(identifiers):
        cost = tok.count(ident) + 1  # and its separator
        if used + cost > tokens:
            return shown, list(identifiers[n:])
        shown.append(ident)
        used += cost
    return shown, []


def _listed(shown: Sequence[str], hidden: Sequence[str], ref: ArtifactRef) -> str:
    if not shown:
        return ""
    more = f" (+{len(hidden)} more in {ref.id})" if hidden else ""
    return f"; identifiers in it: {', '.join(shown)}{more}"


def cleared(reduced: Reduced, shown: Sequence[str], hidden: Sequence[str], call: str) -> str:
    ref = reduced.ref
    return (
        f"{CLEARED_PREFIX} {ref.id}, {ref.bytes} bytes, {reduced.lines} lines; "
        f"{call}{_listed(shown, hidden, ref)}]"
    )


def cut(
    reduced: Reduced, kept_lines: int, shown: Sequence[str], hidden: Sequence[str], call: str
) -> str:
    ref = reduced.ref
    return (
        f"\n{CUT_MARK} lines 1-{kept_lines} of {reduced.lines} shown, full text {ref.id}; "
        f"for the rest, {call}{_listed(shown, hidden, ref)}]"
    )
