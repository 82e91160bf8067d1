"""WorkingState: a task's structured memory, instead of a chat summary.

The goal is pinned and never summarized away; so are the user's turns
(``said``), verbatim. What the state keeps is chosen by what it is, not by how
recent it is: identifiers the user named, or the model named again after a
tool revealed them, are ``salient`` and have their own budget, so a flood of
new names from tool results (``identifiers``, newest kept) cannot push them
out. Counters, named artifact refs, the artifact list, the phase, the
identifiers kept from reduced results and rolled turns, and the record of
what left the context (``dropped``) are updated in code; only decisions, open
questions, facts, pins (verbatim spans: quotes checked in their source) and
the next action come from the model (through its ``note`` tool,
``tools.notes``), each with the step and source it came from; the engine
also pins the values the model wrote as arguments to tools that act. Every
change returns a new version (immutable), so a checkpoint is the state
itself. Artifacts are typed ``ArtifactRef``s, here and in the checkpoint;
``render`` is the one place they become text (a handle, a named ref's id),
when a prompt is built.

Every part is bounded (``compaction.fit`` archives the oldest entries of a
part over its budget into the ``index`` artifact, leaving their count).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared_state import ArtifactRef


class Fact(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    source: str = ""  # a tool result, an artifact id, a file
    step: int = 0


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    step: int = 0


class Pin(BaseModel):
    """A verbatim span kept whole, whatever its shape: a quote the model took from a source
    (checked verbatim there), or a value the model itself wrote as a tool's argument."""

    model_config = ConfigDict(frozen=True)

    text: str
    source: str  # an artifact id, a file, "user", or "your <tool> call"
    step: int = 0


# The order parts render in: stable, pinned parts first.
RENDERED = (
    "goal",
    "said",
    "phase",
    "progress",
    "refs",
    "decisions",
    "open_questions",
    "facts",
    "pins",
    "next_action",
    "artifacts",
    "salient",
    "identifiers",
    "dropped",
    "archived",
    "index",
)


class WorkingState(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = 0
    goal: str
    said: tuple[str, ...] = ()  # the user's turns, verbatim
    phase: str = "start"
    progress: dict[str, int] = Field(default_factory=dict)
    refs: dict[str, ArtifactRef] = Field(default_factory=dict)  # named artifacts: "features"
    decisions: tuple[Decision, ...] = ()
    open_questions: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    pins: tuple[Pin, ...] = ()  # verbatim spans, oldest first (see ``pin``)
    next_action: str = ""
    artifacts: tuple[ArtifactRef, ...] = ()  # what the task made or rolled away, oldest first
    # Identifiers kept for what they are, not how recent: named by the user, or named again
    # by the model after a tool revealed them. Tool results never add to it.
    salient: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()  # from reduced results and rolled turns, oldest first
    dropped: tuple[str, ...] = ()  # what left the context, each with the artifact holding it
    archived: dict[str, int] = Field(default_factory=dict)  # entries moved into ``index``, by part
    index: str = ""  # the latest index artifact (it names the one before it)

    def _next(self, **changes: Any) -> WorkingState:
        return self.model_copy(update={**changes, "version": self.version + 1})

    # -- updates made in code ------------------------------------------------------

    def with_phase(self, phase: str) -> WorkingState:
        return self if phase == self.phase else self._next(phase=phase)

    def count(self, counter: str, by: int = 1) -> WorkingState:
        return self._next(progress={**self.progress, counter: self.progress.get(counter, 0) + by})

    def with_progress(self, counter: str, value: int) -> WorkingState:
        if self.progress.get(counter) == value:
            return self
        return self._next(progress={**self.progress, counter: value})

    def with_goal(self, goal: str) -> WorkingState:
        """The goal as the job states it now (a resumed job's may be new)."""
        return self if goal == self.goal else self._next(goal=goal)

    def without_ref(self, name: str) -> WorkingState:
        if name not in self.refs:
            return self
        return self._next(refs={k: v for k, v in self.refs.items() if k != name})

    def with_ref(self, name: str, ref: ArtifactRef) -> WorkingState:
        if self.refs.get(name) == ref:
            return self
        return self._next(refs={**self.refs, name: ref})

    def add_artifact(self, ref: ArtifactRef) -> WorkingState:
        if any(r.id == ref.id for r in self.artifacts):
            return self  # the same content (ids are content hashes): listed once
        return self._next(artifacts=(*self.artifacts, ref))

    def of_kind(self, kind: str) -> list[ArtifactRef]:
        """The artifacts of one kind, oldest first."""
        return [r for r in self.artifacts if r.kind == kind]

    def pin_said(self, turns: Iterable[str]) -> WorkingState:
        """Pin what the user said, verbatim (``compaction.fit`` keeps it within budget)."""
        new = tuple(t for t in turns if t and t not in self.said)
        return self._next(said=(*self.said, *new)) if new else self

    def keep_identifiers(self, found: Iterable[str]) -> WorkingState:
        """Keep identifiers, the most recently named last (compaction archives the oldest).

        One already salient stays there, and is not listed twice.
        """
        salient = set(self.salient)
        found = [i for i in dict.fromkeys(found) if i not in salient]
        if not found or tuple(found) == self.identifiers[-len(found) :]:
            return self
        again = set(found)
        kept = tuple(i for i in self.identifiers if i not in again)
        return self._next(identifiers=(*kept, *found))

    def keep_salient(self, found: Iterable[str]) -> WorkingState:
        """Keep identifiers for what they are (see ``salient``): moved out of ``identifiers``,
        where a flood of new names from tool results would push them out."""
        known = set(self.salient)
        new = [i for i in dict.fromkeys(found) if i not in known]
        if not new:
            return self
        moved = set(new)
        return self._next(
            salient=(*self.salient, *new),
            identifiers=tuple(i for i in self.identifiers if i not in moved),
        )

    def record_dropped(self, items: Iterable[str]) -> WorkingState:
        """Record what left the context; each item names the artifact that still holds it."""
        new = tuple(i for i in dict.fromkeys(items) if i not in self.dropped)
        return self._next(dropped=(*self.dropped, *new)) if new else self

    def pin(self, text: str, *, source: str, step: int, replaces: str = "") -> WorkingState:
        """Keep ``text`` verbatim; merged with the pins it holds or that hold it.

        A pin inside one already kept adds nothing; one that holds kept pins
        takes their place. ``replaces`` names a value this one corrects: every
        pin holding it leaves, and ``dropped`` says it was superseded.
        """
        if not text or (not replaces and any(text in p.text for p in self.pins)):
            return self
        kept = tuple(p for p in self.pins if p.text not in text)
        superseded = [p for p in kept if replaces and replaces in p.text]
        kept = tuple(p for p in kept if p not in superseded)
        if not any(text in p.text for p in kept):
            kept = (*kept, Pin(text=text, source=source, step=step))
        moved = self._next(pins=kept)
        return moved.record_dropped(
            f"superseded at step {step}: {p.text[:80]!r} (now: {text[:80]!r})" for p in superseded
        )

    # -- what the model may add ------------------------------------------------------

    def apply_model_update(
        self,
        *,
        step: int,
        decisions: Iterable[str] = (),
        open_questions: Iterable[str] = (),
        resolved_questions: Iterable[str] = (),
        facts: Iterable[tuple[str, str]] = (),
        next_action: str | None = None,
    ) -> WorkingState:
        """The model's notes written in (merged with those they repeat, see ``_merged``)."""
        resolved = set(resolved_questions)
        return self._next(
            decisions=_merged(self.decisions, [Decision(text=d, step=step) for d in decisions]),
            open_questions=tuple(
                q for q in (*self.open_questions, *open_questions) if q not in resolved
            ),
            facts=_merged(self.facts, [Fact(text=t, source=s, step=step) for t, s in facts]),
            next_action=self.next_action if next_action is None else next_action,
        )

    # -- rendering ------------------------------------------------------------------------

    def render(self) -> str:
        """A stable, compact text for the prompt (same state, same bytes).

        Every entry is shown as written — in the writer's own characters
        (``Zoë``, ``東京``), quotes, backslashes and line breaks included, never
        JSON escapes — so a span kept verbatim reaches the model verbatim, and
        its tokens are counted as it is sent. An artifact shows as its one-line
        handle, a named ref as its id.
        """
        lines = [f"WORKING STATE (v{self.version})"]
        for part in RENDERED:
            value = getattr(self, part)
            if part not in ("goal", "phase") and not value:
                continue
            label = _LABELS.get(part, part.replace("_", " "))
            if isinstance(value, tuple) and part in _INLINE:
                lines.append(f"{label}: {', '.join(value)}")
            elif isinstance(value, tuple):
                lines.append(f"{label}:")
                lines += [entry_text(e) for e in value]
            elif isinstance(value, dict):
                shown = {k: v.id if isinstance(v, ArtifactRef) else v for k, v in value.items()}
                lines.append(f"{label}: {', '.join(f'{k}={v}' for k, v in shown.items())}")
            else:
                lines.append(f"{label}: {value}")
        return "\n".join(lines)


def _merged(kept: tuple[Any, ...], new: list[Any]) -> tuple[Any, ...]:
    """Notes merged, never dropped: a new note already held in a kept one adds nothing, and
    one that holds kept ones takes their place (it says all they said)."""
    out = list(kept)
    for note in new:
        if any(note.text in k.text for k in out):
            continue
        out = [k for k in out if k.text not in note.text]
        out.append(note)
    return tuple(out)


# How a part is labelled in ``render``, where its name alone would say less.
_LABELS = {
    "said": "the user said",
    "pins": "kept verbatim",
    "salient": "identifiers to keep",
    "index": "archive (older entries)",
}
_INLINE = ("salient", "identifiers")  # lists of short names: one line, comma-separated


def entry_text(entry: Any) -> str:
    """One entry of a list part as ``render`` shows it: ``- `` and the text as written.

    A text of several lines stands between ``<<<`` and ``>>>`` lines, its own
    lines untouched (no indent added), so it is verbatim in the prompt.
    """
    if isinstance(entry, ArtifactRef):
        return f"- {entry.handle()}"
    if isinstance(entry, str):
        head, text = "-", entry
    elif isinstance(entry, Fact | Pin):
        step = f"step {entry.step}, " if entry.step else ""
        head, text = f"- [{step}{entry.source or 'no source'}]", entry.text
    else:  # a decision
        head, text = f"- [step {entry.step}]", entry.text
    if "\n" in text:
        return f"{head}\n<<<\n{text}\n>>>"
    return f"{head} {text}"
