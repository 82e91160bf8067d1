"""The ``note`` tool: the model writes the fuzzy parts of its working state.

A note is a fact with its source, a decision, an open question, the
resolution of one, or the next action — the parts of ``WorkingState`` only
the model can know. Everything else (counters, named refs, artifacts,
identifiers, ``said``, ``dropped``, the phase) is computed in code: ``Note``
has no field that reaches it and refuses any extra argument, so the model
cannot corrupt it.

Notes are bounded, and a note that does not fit is a tool error, never a
silent cut: a text over ``MAX_NOTE_CHARS`` is refused; facts and decisions
are archived by the state's compaction like any of its parts; open questions
and the next action, which compaction keeps in view, are refused once they
would take more than the room they are given (half the notes budget).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from shared_state.redact import redact

from ..context.compaction import unarchived_notes_tokens
from ..context.tokens import Tokenizer
from ..context.working_state import WorkingState
from ..errors import ToolRefused

MAX_NOTE_CHARS = 300
USER = "user"  # the source of a fact the user (the brief, the goal) stated
ARTIFACT_ID = re.compile(r"a-[0-9a-f]{16}")

DESCRIPTION = (
    "Write into your working state, shown to you in every call: a fact (with its source), "
    "a decision, an open question, resolve_question (text: the open question, exactly) or "
    "next_action (replaces the last). Counters and artifact lists are kept for you."
)


class Note(BaseModel):
    """One note for the working state (no other part of it can be written)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["fact", "decision", "question", "resolve_question", "next_action"]
    # A model may copy a key it saw into a note: masked here, where it enters the state
    # (an open question and the text that resolves it are masked alike, so they still match).
    text: Annotated[str, AfterValidator(redact)] = Field(min_length=1, max_length=MAX_NOTE_CHARS)
    source: str = Field(
        default="",
        max_length=200,
        description='a fact\'s source: an artifact id a-..., a workspace file path, or "user"',
    )

    @model_validator(mode="after")
    def _source_for_facts(self) -> Note:
        if self.kind == "fact" and not self.source:
            raise ValueError('a fact needs its source: an artifact id, a file path or "user"')
        if self.kind != "fact" and self.source:
            raise ValueError(f"only a fact has a source, not a {self.kind}")
        return self


def write(state: WorkingState, note: Note, *, step: int, tok: Tokenizer, room: int) -> WorkingState:
    """The state with ``note`` written into its model-owned parts; ToolRefused if it cannot be.

    ``room`` is how many tokens the open questions and the next action may
    take together (as compaction counts them).
    """
    if note.kind == "resolve_question" and note.text not in state.open_questions:
        shown = "; ".join(state.open_questions) or "none"
        raise ToolRefused(f"no open question {note.text!r}; open: {shown}")
    if note.kind == "question" and note.text in state.open_questions:
        raise ToolRefused(f"already open: {note.text!r}")
    written = state.apply_model_update(
        step=step,
        facts=[(note.text, note.source)] if note.kind == "fact" else (),
        decisions=[note.text] if note.kind == "decision" else (),
        open_questions=[note.text] if note.kind == "question" else (),
        resolved_questions=[note.text] if note.kind == "resolve_question" else (),
        next_action=note.text if note.kind == "next_action" else None,
    )
    if note.kind in ("question", "next_action"):
        tokens = unarchived_notes_tokens(tok, written)
        if tokens > room:
            raise ToolRefused(
                f"open questions and the next action would take {tokens} tokens, over their "
                f"{room}: resolve a question or write a shorter one"
            )
    return written
