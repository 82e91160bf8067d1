"""WorkingState: a task's structured memory, instead of a chat summary.

The goal is pinned and never summarized away; so are the user's turns
(``said``), verbatim. Counters, named artifact refs, the artifact list, the
phase, the identifiers kept from reduced results and rolled turns, and the
record of what left the context (``dropped``) are updated in code; only
decisions, open questions, facts and the next action come from the model
(through its ``note`` tool, ``tools.notes``), each with the step and source
it came from. Every change returns a new version (immutable), so a
checkpoint is the state itself. Artifacts are typed ``ArtifactRef``s, here
and in the checkpoint; ``render`` is the one place they become text (a
handle, a named ref's id), when a prompt is built.

Every part is bounded (``compaction.fit`` archives the oldest entries of a
part over its budget into the ``index`` artifact, leaving their count).
"""

from __future__ import annotations

import json
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
    "next_action",
    "artifacts",
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
    next_action: str = ""
    artifacts: tuple[ArtifactRef, ...] = ()  # what the task made or rolled away, oldest first
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
        """Keep identifiers, the most recently named last (compaction archives the oldest)."""
        found = list(dict.fromkeys(found))
        if not found or tuple(found) == self.identifiers[-len(found) :]:
            return self
        again = set(found)
        kept = tuple(i for i in self.identifiers if i not in again)
        return self._next(identifiers=(*kept, *found))

    def record_dropped(self, items: Iterable[str]) -> WorkingState:
        """Record what left the context; each item names the artifact that still holds it."""
        new = tuple(i for i in dict.fromkeys(items) if i not in self.dropped)
        return self._next(dropped=(*self.dropped, *new)) if new else self

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
        resolved = set(resolved_questions)
        return self._next(
            decisions=(*self.decisions, *(Decision(text=d, step=step) for d in decisions)),
            open_questions=tuple(
                q for q in (*self.open_questions, *open_questions) if q not in resolved
            ),
            facts=(*self.facts, *(Fact(text=t, source=s, step=step) for t, s in facts)),
            next_action=self.next_action if next_action is None else next_action,
        )

    # -- rendering ------------------------------------------------------------------------

    def render(self) -> str:
        """A stable, compact text for the prompt (same state, same bytes).

        An artifact shows as its one-line handle, a named ref as its id. Text is
        in the writer's own characters (``Zoë``, ``東京``), not JSON escapes: the
        model reads what was said, and its tokens are counted as it is sent.
        """
        shown = {n for n in RENDERED if n in ("goal", "phase") or getattr(self, n)}
        plain = self.model_dump(mode="json", include=shown - {"artifacts", "refs"})
        plain["artifacts"] = [r.handle() for r in self.artifacts]
        plain["refs"] = {name: r.id for name, r in self.refs.items()}
        ordered = {n: plain[n] for n in RENDERED if n in shown}
        return (
            f"WORKING STATE (v{self.version})\n{json.dumps(ordered, indent=0, ensure_ascii=False)}"
        )
