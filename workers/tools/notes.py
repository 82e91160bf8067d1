"""The ``note`` tool: the model writes the fuzzy parts of its working state.

A note is a fact with its source, a decision, an open question, the
resolution of one, or the next action — the parts of ``WorkingState`` only
the model can know. Everything else (counters, named refs, artifacts,
identifiers, ``said``, ``dropped``, the phase) is computed in code: ``Note``
has no field that reaches it and refuses any extra argument, so the model
cannot corrupt it.

A ``quote`` pins a span of a source verbatim — a multi-line block, a command
line with its flags, a ``#``-ticket, a cron line, text in any script — so it
stays in front of the model as written, whatever its shape; whoever takes the
note checks that the span is in the source, word for word (``verbatim_in``).
A quote may name the value it ``replaces`` (a corrected one): that pin leaves
and the state records it as superseded.

Notes are bounded, and a note that does not fit is a tool error, never a
silent cut: a text over ``MAX_NOTE_CHARS`` (a quote: ``MAX_QUOTE_CHARS``) is
refused; facts, decisions and pins are archived by the state's compaction
like any of its parts (an archived pin is listed as such, never silently
gone); open questions and the next action, which compaction keeps in view,
are refused once they would take more than the room they are given (half the
notes budget).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shared_state.redact import redact

from ..context.compaction import unarchived_notes_tokens
from ..context.tokens import Tokenizer
from ..context.working_state import WorkingState
from ..errors import ToolRefused

MAX_NOTE_CHARS = 300
MAX_QUOTE_CHARS = 1_000  # a quote may be a block of a few lines
USER = "user"  # the source of a fact the user (the brief, the goal) stated
ARTIFACT_ID = re.compile(r"a-[0-9a-f]{16}")

DESCRIPTION = (
    "Write into your working state, shown to you in every call: a fact (with its source), "
    "a decision, an open question, resolve_question (text: the open question, exactly), "
    "next_action (replaces the last), or a quote: a span copied exactly from its source "
    '(an artifact id, a workspace file or "user"), kept verbatim, any shape or length up to '
    f"{MAX_QUOTE_CHARS} characters; a quote's replaces names an earlier value it corrects. "
    "Counters and artifact lists are kept for you."
)


class Note(BaseModel):
    """One note for the working state (no other part of it can be written)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["fact", "decision", "question", "resolve_question", "next_action", "quote"]
    # A model may copy a key it saw into a note: masked here, where it enters the state
    # (an open question and the text that resolves it are masked alike, so they still match).
    text: Annotated[str, AfterValidator(redact)] = Field(min_length=1, max_length=MAX_QUOTE_CHARS)
    source: str = Field(
        default="",
        max_length=200,
        description="a fact's or quote's source: an artifact id a-..., a workspace file "
        'path, or "user"',
    )
    replaces: str = Field(
        default="", max_length=MAX_NOTE_CHARS, description="a quote: the earlier value it corrects"
    )

    @field_validator("text")
    @classmethod
    def _short_unless_a_quote(cls, text: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if kind != "quote" and len(text) > MAX_NOTE_CHARS:
            raise ValueError(
                f"a {kind} is at most {MAX_NOTE_CHARS} characters (a quote "
                f"{MAX_QUOTE_CHARS}): write a shorter one"
            )
        return text

    @model_validator(mode="after")
    def _source_for_facts(self) -> Note:
        sourced = ("fact", "quote")
        if self.kind in sourced and not self.source:
            raise ValueError(
                f'a {self.kind} needs its source: an artifact id, a file path or "user"'
            )
        if self.kind not in sourced and self.source:
            raise ValueError(f"only a fact or a quote has a source, not a {self.kind}")
        if self.kind != "quote" and self.replaces:
            raise ValueError(f"only a quote replaces an earlier value, not a {self.kind}")
        return self


def verbatim_in(note: Note, source_text: str) -> None:
    """A quote's text is in its source word for word; ToolRefused naming the first line
    that is not (whitespace at the ends of the quote aside, as a model copies it)."""
    span = note.text.strip()
    if span in source_text:
        return
    missing = next((line for line in span.splitlines() if line.strip() not in source_text), span)
    raise ToolRefused(
        f"the quote is not in {note.source} word for word (from {missing[:80]!r}): "
        "copy it exactly, or write a fact"
    )


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
    if note.kind == "quote":
        return state.pin(note.text.strip(), source=note.source, step=step, replaces=note.replaces)
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
