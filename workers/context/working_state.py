"""WorkingState: a task's structured memory, instead of a chat summary.

The goal is pinned and never summarized away. Counters, named artifact refs,
the artifact list, the phase and the identifiers kept by compaction are
updated in code; only decisions, open questions and facts come from the
model, each with the step and source it came from. Every change returns a
new version (immutable), so a checkpoint is the state itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared_state import ArtifactRef, ArtifactSink, Trust

from .identifiers import extract


class Fact(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    source: str = ""  # a tool result, an artifact id, a file
    step: int = 0


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    step: int = 0


class WorkingState(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = 0
    goal: str
    phase: str = "start"
    progress: dict[str, int] = Field(default_factory=dict)
    refs: dict[str, str] = Field(default_factory=dict)  # named artifact ids: "features" -> a-...
    decisions: tuple[Decision, ...] = ()
    open_questions: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    artifacts: tuple[str, ...] = ()  # handles, one line each
    identifiers: tuple[str, ...] = ()  # kept by compaction from rolled-up turns
    next_action: str = ""
    dropped: tuple[str, ...] = ()  # identifiers compaction could not keep (recorded, not hidden)

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

    def with_ref(self, name: str, artifact_id: str) -> WorkingState:
        if self.refs.get(name) == artifact_id:
            return self
        return self._next(refs={**self.refs, name: artifact_id})

    def add_artifact(self, ref: ArtifactRef) -> WorkingState:
        handle = ref.handle()
        return self if handle in self.artifacts else self._next(artifacts=(*self.artifacts, handle))

    def keep_identifiers(self, found: Iterable[str]) -> WorkingState:
        new = tuple(i for i in dict.fromkeys(found) if i not in self.identifiers)
        return self._next(identifiers=(*self.identifiers, *new)) if new else self

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

    # -- rendering and compaction ---------------------------------------------------------

    def render(self) -> str:
        """A stable, compact text for the prompt (same state, same bytes)."""
        doc: dict[str, Any] = {"goal": self.goal, "phase": self.phase}
        for name in ("progress", "refs", "decisions", "open_questions", "facts", "artifacts"):
            value = getattr(self, name)
            if value:
                doc[name] = value
        if self.identifiers:
            doc["identifiers"] = self.identifiers
        if self.next_action:
            doc["next_action"] = self.next_action
        plain = self.model_dump(mode="json", include=set(doc))
        ordered = {k: plain[k] for k in doc}
        return f"WORKING STATE (v{self.version})\n{json.dumps(ordered, indent=0)}"

    def compact(self, sink: ArtifactSink, *, keep: int = 5) -> WorkingState:
        """Archive the oldest decisions and facts into an artifact, keeping the newest.

        The archive's handle stays in ``artifacts``; identifiers named in what
        was archived stay in ``identifiers`` — nothing named is lost.
        """
        old_decisions, old_facts = self.decisions[:-keep], self.facts[:-keep]
        if not old_decisions and not old_facts:
            return self
        archive = json.dumps(
            {
                "decisions": [d.model_dump() for d in old_decisions],
                "facts": [f.model_dump() for f in old_facts],
            },
            indent=1,
        )
        ref = sink.put(
            archive,
            kind="state-archive",
            title=f"state v{self.version}: {len(old_decisions)} decisions, {len(old_facts)} facts",
            source="working-state",
            trust=Trust.TRUSTED,
        )
        kept = self.keep_identifiers(extract(archive))
        return kept._next(
            decisions=self.decisions[-keep:] if keep else (),
            facts=self.facts[-keep:] if keep else (),
        ).add_artifact(ref)
