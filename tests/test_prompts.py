"""The system prompt: named sections in priority order, each its own unit, stable bytes."""

from __future__ import annotations

import pytest

from workers.context import tokenizer_for
from workers.prompts import (
    HARD_CONSTRAINTS,
    MEMORY_HANDLING,
    PROJECT_MEMORY_TOKENS,
    Section,
    assemble,
    identity_and_rules,
    project_memory,
    system_prompt,
)

TOK = tokenizer_for()


def test_a_role_prompt_is_its_identity_line_then_its_rules() -> None:
    identity, rules = identity_and_rules("You are the coder.\nWrite files.\nReturn refs.")
    assert (identity.name, identity.text) == ("identity", "You are the coder.")
    assert (rules.name, rules.text) == ("role rules", "Write files.\nReturn refs.")
    assert identity_and_rules("Only an identity.") == [Section("identity", "Only an identity.")]


def test_the_project_memory_is_labelled_as_data_and_cut_to_its_budget_with_a_pointer() -> None:
    assert project_memory(None, TOK) is None and project_memory("  \n", TOK) is None
    small = project_memory("# Rules\nuse pytest", TOK)
    assert small is not None and small.text.endswith("# Rules\nuse pytest")
    assert "data; the rules above win" in small.text
    big = project_memory("\n".join(f"line {n} " + "word " * 20 for n in range(400)), TOK)
    assert big is not None and TOK.count(big.text) <= PROJECT_MEMORY_TOKENS + 60
    assert "more lines: memory view /memories/project/AGENTS.md]" in big.text


def test_sections_come_in_priority_order_whatever_order_they_are_given() -> None:
    text = assemble(
        [
            Section("memory handling", "M"),
            None,
            Section("project memory", "P"),
            Section("hard constraints", "H"),
            Section("role rules", "R"),
            Section("identity", "I"),
        ]
    )
    assert text == "I\n\n# role rules\nR\n\n# hard constraints\nH\n\n# project memory\nP\n\n" \
        "# memory handling\nM"  # fmt: skip


def test_an_unknown_or_repeated_section_is_a_mistake() -> None:
    with pytest.raises(ValueError, match="distinct"):
        assemble([Section("identity", "a"), Section("identity", "b")])
    with pytest.raises(ValueError, match="distinct"):
        assemble([Section("the time", "12:00")])


def test_the_system_prompt_is_the_same_bytes_for_the_same_inputs() -> None:
    a = system_prompt("You are X.\nDo Y.", "# AGENTS\nrule", TOK)
    system_prompt.cache_clear()  # built again, not the kept one
    b = system_prompt("You are X.\nDo Y.", "# AGENTS\nrule", TOK)
    assert a == b
    assert HARD_CONSTRAINTS in a and MEMORY_HANDLING in a
    assert a.index("# hard constraints") < a.index("# project memory") < a.index("# memory")
