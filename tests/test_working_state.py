"""WorkingState: code-owned fields, model-owned fields, versions, identifiers."""

from __future__ import annotations

import pytest

from shared_state import MemoryArtifacts
from workers.context import StateBudget, WorkingState, extract_identifiers, fit_state, tokenizer_for
from workers.errors import StateCompactionStuck

TOK = tokenizer_for()


def test_every_change_is_a_new_version_and_the_goal_is_pinned() -> None:
    s0 = WorkingState(goal="migrate billing")
    s1 = s0.count("files").count("files").with_phase("build")
    s2 = s1.apply_model_update(
        step=3, decisions=["use v2"], open_questions=["which region?"], facts=[("f", "tool:x")]
    )
    s3 = s2.apply_model_update(step=4, resolved_questions=["which region?"])
    assert (s0.version, s1.version, s3.version) == (0, 3, 5)
    assert s1.progress == {"files": 2} and s1.phase == "build"
    assert s3.open_questions == () and s3.decisions[0].step == 3
    assert s3.facts[0].source == "tool:x"
    assert s3.goal == "migrate billing" and "migrate billing" in s3.render()
    assert s0.progress == {}  # immutable


def test_render_is_stable_for_the_same_state() -> None:
    state = WorkingState(goal="g").count("a").apply_model_update(step=1, facts=[("x", "y")])
    assert state.render() == state.model_copy().render()


def test_text_reaches_the_model_in_the_writers_own_characters() -> None:
    said = "Sign it as Zoë Müller-Łukasiewicz, for 東京 (Straße 5, naïve café)"
    state = WorkingState(goal="g").pin_said([said])
    shown = state.render()
    assert said in shown and "\\u" not in shown
    # Counted as sent: the escapes of each non-ASCII character would cost more tokens.
    escaped = said.encode("ascii", "backslashreplace").decode()
    assert TOK.count(shown) < TOK.count(shown.replace(said, escaped))


def test_compaction_archives_old_fields_and_keeps_their_identifiers() -> None:
    sink = MemoryArtifacts()
    state = WorkingState(goal="g").apply_model_update(
        step=1,
        decisions=[f"decision {i} about src/pkg/mod_{i}.py" for i in range(8)],
        facts=[(f"order {7_740_000 + i}", "t") for i in range(8)],
    )
    compacted, actions = fit_state(TOK, state, StateBudget(notes=120), 2_000, sink)
    assert 0 < len(compacted.decisions) < 8 and 0 < len(compacted.facts) < 8
    assert "src/pkg/mod_0.py" in compacted.salient and "7740000" in compacted.salient
    assert compacted.index in actions[0] and "state compacted" in actions[-1]
    assert "src/pkg/mod_0.py" in sink.text(compacted.index)


def test_every_part_of_the_state_stays_within_its_budget_over_2000_steps() -> None:
    sink = MemoryArtifacts()
    budget = StateBudget()
    state = WorkingState(goal="audit the billing service")
    for step in range(2_000):
        state = state.keep_identifiers([f"src/mod_{step}/f.py", f"inv_{step:04d}ab"])
        ref = sink.put(f"result {step}", kind="tool-result", title=f"step {step}")
        state = state.add_artifact(ref).record_dropped([f"ACCT-{step}X9 (in {ref.id})"])
        state, _ = fit_state(TOK, state, budget, 2_000, sink)
    assert TOK.count(state.render()) <= 2_000
    assert state.archived["identifiers"] + len(state.identifiers) == 4_000
    assert state.archived["artifacts"] + len(state.artifacts) == 2_000
    assert state.index and "src/mod_1999/f.py" in state.identifiers


def test_a_compaction_that_cannot_shrink_the_state_raises() -> None:
    state = WorkingState(goal="g " * 3_000)  # the goal is pinned: nothing can be archived
    with pytest.raises(StateCompactionStuck):
        fit_state(TOK, state, StateBudget(), 2_000, MemoryArtifacts())


def test_identifiers_are_extracted_in_order_without_duplicates() -> None:
    text = "ACCT-88412 wrote src/app/main.py at 9f3c2a71be04d8e1; ACCT-88412 again, order 77400125"
    assert extract_identifiers(text) == [
        "ACCT-88412",
        "src/app/main.py",
        "9f3c2a71be04d8e1",
        "77400125",
    ]


def test_identifiers_of_shapes_no_pattern_was_written_for_are_extracted_whole() -> None:
    text = (
        "account ACCT-7Q2X9 and 3f2b8c1e-9a4d-4e7b-b1c2-5d6e7f8a9b0c, invoice inv_2f9c1e, "
        "release v2.14.0-rc.3, total €1.234,56 at 2026-03-07T14:05Z, "
        "mail ops@acme.io via https://acme.io/x?y=1; sha 4e1f0c2; not utf-8 nor step_2"
    )
    assert extract_identifiers(text) == [
        "ACCT-7Q2X9",
        "3f2b8c1e-9a4d-4e7b-b1c2-5d6e7f8a9b0c",
        "inv_2f9c1e",
        "v2.14.0-rc.3",
        "€1.234,56",
        "2026-03-07T14:05Z",
        "ops@acme.io",
        "https://acme.io/x?y=1",
        "4e1f0c2",
    ]
