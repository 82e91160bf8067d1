"""WorkingState: code-owned fields, model-owned fields, versions, identifiers."""

from __future__ import annotations

from shared_state import MemoryArtifacts
from workers.context import WorkingState, extract_identifiers


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


def test_compaction_archives_old_fields_and_keeps_their_identifiers() -> None:
    sink = MemoryArtifacts()
    state = WorkingState(goal="g").apply_model_update(
        step=1,
        decisions=[f"decision {i} about src/pkg/mod_{i}.py" for i in range(8)],
        facts=[(f"order {7_740_000 + i}", "t") for i in range(8)],
    )
    compacted = state.compact(sink, keep=2)
    assert len(compacted.decisions) == 2 and len(compacted.facts) == 2
    assert "src/pkg/mod_0.py" in compacted.identifiers and "7740000" in compacted.identifiers
    assert any(h.startswith("[artifact a-") for h in compacted.artifacts)


def test_identifiers_are_extracted_in_order_without_duplicates() -> None:
    text = "ACCT-88412 wrote src/app/main.py at 9f3c2a71be04d8e1; ACCT-88412 again, order 77400125"
    assert extract_identifiers(text) == [
        "ACCT-88412",
        "src/app/main.py",
        "9f3c2a71be04d8e1",
        "77400125",
    ]
