"""What a finished task hands back to its parent: a typed Summary under a hard token cap.

A subagent's answer comes back condensed, never as its transcript. The cap
(default 1,500 tokens) holds for the whole rendered summary: an answer over
it is stored whole as an artifact the summary points to, then condensed once
more by the summary model (when the fleet has one: ``--summary-model``); if
that is still over (or the call fails, or there is no summary model), it is
cut.
Refs that would leave less than half the cap for text are kept only in the
stored whole. Exact material (code, tables) travels as typed artifact refs,
rendered as handles only where the summary is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared_state import ArtifactRef, ArtifactSink, Trust

from .context import Tokenizer

DEFAULT_CAP = 1_500
CUT_MARK = "[cut to fit the summary cap; full text: {id}]"


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_id: str
    name: str
    kind: Literal["task", "subagent"]
    text: str
    refs: tuple[ArtifactRef, ...] = ()
    cap: int
    tokens: int = 0  # of render(), always <= cap
    condensed: bool = False
    full_text: str = ""  # artifact id of the whole answer (and refs), when it did not fit

    def render(self) -> str:
        refs = self.refs_text()
        return f"{self.kind} {self.name} ({self.task_id}):\n{self.text}" + (
            f"\nrefs:\n{refs}" if refs else ""
        )

    def refs_text(self) -> str:
        """The refs as the model reads them: one handle a line."""
        return "\n".join(r.handle() for r in self.refs)


def capped(
    draft: Summary,
    *,
    tok: Tokenizer,
    sink: ArtifactSink,
    condense: Callable[[str, int], str] | None = None,
) -> Summary:
    """``draft`` within its cap: as is, condensed by the model, or cut with a ref."""

    def fits(s: Summary) -> Summary | None:
        n = tok.count(s.render())
        return s.model_copy(update={"tokens": n}) if n <= s.cap else None

    if (done := fits(draft)) is not None:
        return done
    full = sink.put(
        draft.text + ("\nrefs:\n" + draft.refs_text() if draft.refs else ""),
        kind="text",
        title=f"full answer of {draft.kind} {draft.name}",
        source=f"task:{draft.task_id}",
        trust=Trust.UNTRUSTED,
    )
    draft = draft.model_copy(update={"full_text": full.id})
    # Refs are kept while they leave room for text; the rest are in the full text.
    while draft.refs and tok.count(draft.model_copy(update={"text": ""}).render()) > draft.cap // 2:
        draft = draft.model_copy(update={"refs": draft.refs[:-1]})
    overhead = tok.count(draft.model_copy(update={"text": ""}).render())
    room = max(0, draft.cap - overhead)
    if condense is not None:
        shorter = draft.model_copy(update={"text": condense(draft.text, room), "condensed": True})
        if shorter.text and (done := fits(shorter)) is not None:
            return done
    mark = "\n" + CUT_MARK.format(id=full.id)
    keep = room - tok.count(mark)
    while keep >= 0:
        cut = draft.model_copy(update={"text": tok.truncate(draft.text, keep) + mark})
        if (done := fits(cut)) is not None:
            return done
        keep -= 8  # token boundaries shift a little where text is cut: trim until it fits
    raise ValueError(f"a summary cap of {draft.cap} tokens cannot hold even its refs")
