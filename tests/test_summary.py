"""Summaries stay under their token cap: as written, condensed, or cut with a ref."""

from __future__ import annotations

from shared_state import ArtifactRef, MemoryArtifacts
from workers.context import tokenizer_for
from workers.summary import Summary, capped

TOK = tokenizer_for()
NOTES = MemoryArtifacts().put("notes", kind="note", title="notes")


def note(i: int) -> ArtifactRef:
    return MemoryArtifacts().put(f"note {i}", kind="note", title=f"note number {i}")


LONG = " ".join(f"finding {i}: the parser mishandles case {i} in module m{i}." for i in range(400))


def draft(text: str, cap: int = 300) -> Summary:
    return Summary(task_id="c-1", name="probe", kind="subagent", text=text, cap=cap,
                   refs=(NOTES,))  # fmt: skip


def test_a_short_answer_is_kept_as_is_with_its_token_count() -> None:
    got = capped(draft("all good"), tok=TOK, sink=MemoryArtifacts())
    assert got.text == "all good" and not got.condensed and not got.full_text
    assert got.tokens == TOK.count(got.render()) <= got.cap


def test_a_long_answer_is_condensed_by_the_model_when_that_fits() -> None:
    asked: list[int] = []

    def condense(text: str, tokens: int) -> str:
        asked.append(tokens)
        return "the parser mishandles 400 cases; see the note"

    got = capped(draft(LONG), tok=TOK, sink=MemoryArtifacts(), condense=condense)
    assert got.condensed and got.text.startswith("the parser") and got.tokens <= got.cap
    assert asked and asked[0] < got.cap  # room left for the header and refs


def test_an_answer_still_over_the_cap_is_cut_with_a_ref_to_the_full_text() -> None:
    sink = MemoryArtifacts()
    got = capped(draft(LONG), tok=TOK, sink=sink, condense=lambda text, tokens: text)
    assert not got.condensed and got.full_text
    assert TOK.count(got.render()) == got.tokens <= got.cap
    assert got.text.startswith(LONG[:100]) and got.full_text in got.text
    assert sink.text(got.full_text).startswith(LONG)
    assert got.refs == draft(LONG).refs  # exact material stays reachable


def test_refs_that_would_crowd_out_the_text_are_kept_in_the_full_text_only() -> None:
    refs = tuple(note(i) for i in range(40))
    sink = MemoryArtifacts()
    many = draft(LONG, cap=200).model_copy(update={"refs": refs})
    got = capped(many, tok=TOK, sink=sink)
    assert got.tokens == TOK.count(got.render()) <= 200
    assert 0 < len(got.refs) < len(refs) and got.refs == refs[: len(got.refs)]
    assert all(r.handle() in sink.text(got.full_text) for r in refs)
