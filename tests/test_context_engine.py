"""The context engine: every slot's overflow, clearing, the kill switch, cache order."""

from __future__ import annotations

import hashlib
import json

import pytest

from shared_state import MemoryArtifacts
from workers.context import (
    DEFAULT_BUDGETS,
    CallLedger,
    ClearingPolicy,
    ContextEngine,
    ContextRequest,
    Message,
    Overflow,
    Retrieved,
    Slot,
    SlotBudget,
    ToolCall,
    ToolSpec,
    WorkingState,
    tokenizer_for,
    turns,
)
from workers.context import engine as engine_module
from workers.context.stubs import CUT_MARK
from workers.errors import ContextCeilingExceeded, PromptTooLarge

TOK = tokenizer_for()
SYSTEM = "You are a careful agent. Follow the rules."


def words(n: int, seed: str = "w") -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


def step(i: int, result: str, tool: str = "fetch") -> list[Message]:
    call = ToolCall(id=f"c{i}", name=tool, arguments={"i": i})
    return [
        Message(role="assistant", content=f"step {i}", tool_calls=(call,)),
        Message(role="tool", content=result, tool_call_id=call.id, name=tool),
    ]


def budgets(**changes):
    return DEFAULT_BUDGETS.model_copy(update=changes)


def slot(tokens: int, overflow: Overflow) -> SlotBudget:
    return SlotBudget(tokens=tokens, overflow=overflow)


def request(history=(), state=None, **kw) -> ContextRequest:
    return ContextRequest(
        system=kw.pop("system", SYSTEM),
        tools=kw.pop("tools", []),
        state=state or WorkingState(goal="ship it"),
        history=list(history),
        **kw,
    )


def test_an_oversized_system_prompt_fails_hard() -> None:
    engine = ContextEngine(MemoryArtifacts())
    with pytest.raises(PromptTooLarge) as err:
        engine.build(request(system=words(4_000)))
    assert err.value.slot == Slot.SYSTEM


def test_tools_are_those_of_the_current_phase_and_pruned_to_fit() -> None:
    tools = [
        ToolSpec("read", "read a file " + words(300), {}),
        ToolSpec("fetch", "fetch " + words(300), {}, phases=frozenset({"research"})),
        ToolSpec("write", "write " + words(300), {}, phases=frozenset({"build"})),
    ]
    engine = ContextEngine(MemoryArtifacts())
    state = WorkingState(goal="g", phase="research")
    assert [t.name for t in engine.build(request(tools=tools, state=state)).tools] == [
        "read",
        "fetch",
    ]
    one_tool = slot(TOK.count(tools[1].schema_text) + 10, Overflow.PRUNE_TOOLS)
    small = budgets(slots={**DEFAULT_BUDGETS.slots, Slot.TOOLS: one_tool})
    prompt = ContextEngine(MemoryArtifacts(), budgets=small).build(
        request(tools=tools, state=state)
    )
    assert [t.name for t in prompt.tools] == ["fetch"]  # the phase's own tool comes first
    assert any("tools pruned" in a for a in prompt.actions)


def test_an_oversized_state_is_compacted_into_an_index_artifact() -> None:
    sink = MemoryArtifacts()
    state = WorkingState(goal="g").apply_model_update(
        step=1, facts=[(f"fact {i}: ACCT-{10_000 + i} " + words(40), "t") for i in range(40)]
    )
    prompt = ContextEngine(sink).build(request(state=state))
    notes = sum(TOK.count(f.model_dump_json()) for f in prompt.state.facts)
    assert 0 < len(prompt.state.facts) < 40 and notes <= DEFAULT_BUDGETS.state.notes
    assert prompt.state.goal == "g" and prompt.state.archived["facts"] == 40 - len(
        prompt.state.facts
    )
    (index,) = [r for r in sink.refs() if r.kind == "state-index"]
    assert prompt.state.index == index.id and "ACCT-10000" in sink.text(index.id)
    # The ids of archived notes stay salient, the newest in view (older ones in the index).
    assert f"ACCT-{10_000 + prompt.state.archived['facts'] - 1}" in prompt.state.salient


def test_a_large_result_the_model_has_not_seen_stays_whole() -> None:
    sink = MemoryArtifacts()
    page = words(3_000, "p")
    assert TOK.count(page) > 1_000
    prompt = ContextEngine(sink).build(request(step(1, page)))
    assert prompt.history[1].content == page and CUT_MARK not in prompt.text()


def test_two_results_of_one_turn_are_both_whole_in_the_next_call() -> None:
    calls = (ToolCall(id="a", name="fetch"), ToolCall(id="b", name="fetch"))
    older = [m for i in range(8) for m in step(i, words(1_500, f"old{i}"))]  # past the room
    history = [
        *older,
        Message(role="assistant", content="both", tool_calls=calls),
        Message(role="tool", content=words(1_500, "A"), tool_call_id="a", name="fetch"),
        Message(role="tool", content=words(1_500, "B"), tool_call_id="b", name="fetch"),
    ]
    prompt = ContextEngine(MemoryArtifacts()).build(request(history))
    assert [m.content for m in prompt.history[-2:]] == [words(1_500, "A"), words(1_500, "B")]
    assert any(m.content.startswith("[tool result cleared:") for m in prompt.history)


def test_a_batch_over_the_results_slot_is_cut_to_shares_with_a_reader_for_the_rest() -> None:
    sink = MemoryArtifacts()
    lines = [f"line {n}: " + words(12, f"l{n}_") for n in range(1, 501)]
    lines[400] = "line 401: account ACCT-7Q2X9 owns 3f2b8c1e-9a4d-4e7b-b1c2-5d6e7f8a9b0c"
    text = "\n".join(lines)
    calls = (ToolCall(id="a", name="read_file"), ToolCall(id="b", name="read_file"))
    history = [
        Message(role="assistant", content="read both", tool_calls=calls),
        Message(role="tool", content=text, tool_call_id="a", name="read_file"),
        Message(role="tool", content=words(100), tool_call_id="b", name="read_file"),
    ]
    reader = ToolSpec("read_lines", "read lines", {"type": "object"})
    prompt = ContextEngine(sink).build(request(history, tools=[reader]))
    cut = prompt.history[1].content
    assert prompt.history[2].content == words(100)  # the small one stays whole
    assert TOK.count_messages(prompt.history[1:]) <= DEFAULT_BUDGETS.tokens(Slot.RESULTS)
    (ref,) = [r for r in sink.refs() if r.id in cut]
    assert sink.text(ref.id) == text
    shown = int(cut.split("shown")[0].split("lines 1-")[1].split(" ")[0])
    assert f'read_lines(id="{ref.id}", start={shown + 1}, end=500)' in cut
    # Identifiers from the part not shown are in the mark, whole.
    assert "ACCT-7Q2X9" in cut and "3f2b8c1e-9a4d-4e7b-b1c2-5d6e7f8a9b0c" in cut


def test_an_oversized_reference_keeps_a_head_and_the_handle_of_the_full_text() -> None:
    sink = MemoryArtifacts()
    reference = words(5_000, "spec")
    prompt = ContextEngine(sink).build(request(reference=reference))
    (block,) = [b for b in prompt.blocks if b.slot is Slot.REFERENCE]
    assert block.tokens <= DEFAULT_BUDGETS.tokens(Slot.REFERENCE)
    (ref,) = sink.refs()
    assert ref.id in block.text and sink.text(ref.id) == reference


def test_retrieved_items_drop_the_lowest_scored_first() -> None:
    n = DEFAULT_BUDGETS.tokens(Slot.RETRIEVED) // 5  # words: about 2.2 tokens each
    items = [Retrieved(words(n, s), score) for s, score in (("a", 0.9), ("b", 0.1), ("c", 0.5))]
    assert (
        2 * TOK.count(items[0].text)
        < DEFAULT_BUDGETS.tokens(Slot.RETRIEVED)
        < 3 * TOK.count(items[0].text)
    )
    prompt = ContextEngine(MemoryArtifacts()).build(request(retrieved=items))
    kept = [b.text[:2] for b in prompt.blocks if b.slot is Slot.RETRIEVED]
    assert kept == ["a0", "c0"]


def index_chain(sink: MemoryArtifacts, index: str) -> str:
    """Everything the state's index artifacts hold, following each to the one before."""
    text = ""
    while index:
        part = sink.text(index)
        text += part
        index = json.loads(part)["previous"]
    return text


def test_the_tail_rolls_whole_turns_into_state_keeping_every_identifier() -> None:
    sink = MemoryArtifacts()
    history = []
    for i in range(60):
        history += step(i, f"ok {i}")
        history.append(
            Message(role="assistant", content=f"note src/mod_{i}/file_{i}.py " + words(60))
        )
    prompt = ContextEngine(sink).build(request(history))
    assert len(prompt.history) < len(history)
    rolled = history[: len(history) - len(prompt.history)]
    named = [f"src/mod_{i}/file_{i}.py" for i in range(60)]
    kept = prompt.state.render() + index_chain(sink, prompt.state.index)
    left = {n for n in named if any(n in m.text() for m in rolled)}
    assert left and {n for n in named if n in kept} >= left
    assert prompt.state.dropped == ()
    # Whole turns: every remaining tool result still follows its call.
    for turn in turns(prompt.history):
        if turn[0].tool_calls:
            assert [m.tool_call_id for m in turn[1:]] == [c.id for c in turn[0].tool_calls]
    assert prompt.history[0].role != "tool"


def test_what_the_user_said_is_pinned_verbatim_when_its_turn_rolls() -> None:
    sink = MemoryArtifacts()
    decision = "Use the staging bucket, not prod. Cap it at 4,750 requests per minute."
    history = [Message(role="user", content=decision)]
    engine = ContextEngine(sink)
    state = WorkingState(goal="audit")
    rolled_at = None
    for i in range(1_000):
        history += step(i, words(300, f"r{i}_"))
        prompt = engine.build(request(history, state=state))
        history, state = prompt.history, prompt.state
        if rolled_at is None and all(m.content != decision for m in history):
            rolled_at = i
        if rolled_at is not None and i >= rolled_at + 100:
            break
    assert rolled_at is not None and i == rolled_at + 100  # its turn rolled long ago
    assert decision in prompt.text() and decision in state.said


def test_a_user_turn_over_its_budget_is_a_visible_loss() -> None:
    sink = MemoryArtifacts()
    speech = "Remember this: " + words(2_000, "u")
    history = [Message(role="user", content=speech)]
    history += [m for i in range(12) for m in step(i, words(200, f"r{i}"))]
    history += [Message(role="assistant", content=words(3_000, "t"))]
    history += step(99, "last")
    prompt = ContextEngine(sink).build(request(history))
    assert speech not in prompt.text()
    (lost,) = [d for d in prompt.state.dropped if d.startswith("user turn")]
    assert prompt.state.index in lost and speech in index_chain(sink, prompt.state.index)
    assert any("notes, user turns or pins over their budget" in a for a in prompt.actions)


def test_the_kill_switch_fires_before_a_call_over_the_ceiling_with_a_diagnostic() -> None:
    sink = MemoryArtifacts()
    tiny = budgets(ceiling=DEFAULT_BUDGETS.target_total, target_total=5_000)
    items = [Retrieved(words(DEFAULT_BUDGETS.tokens(Slot.RETRIEVED) // 3, s), 1.0) for s in "abc"]
    history = [m for i in range(3) for m in step(i, words(900, f"r{i}"))]
    engine = ContextEngine(sink, budgets=tiny.model_copy(update={"ceiling": 6_000}))
    with pytest.raises(ContextCeilingExceeded) as err:
        engine.build(request(history, retrieved=items))
    report = json.loads(sink.text(err.value.diagnostic.id))
    assert report["total_tokens"] > report["ceiling"] == 6_000
    assert report["slots"]["retrieved"] > 0 and report["largest_items"]
    assert report["last_steps"]


def _clearing(history, policy: ClearingPolicy):
    sink = MemoryArtifacts()
    engine = ContextEngine(sink, budgets=budgets(clearing=policy))
    return engine.build(request(history)), sink


def test_clearing_honours_trigger_keep_clear_at_least_and_exclude() -> None:
    history = [m for i in range(6) for m in step(i, words(200, f"r{i}"))]
    history += step(6, words(200, "x"), tool="notes")
    prompt, sink = _clearing(history, ClearingPolicy(trigger=100_000))
    assert prompt.history == history  # under the trigger: nothing cleared
    prompt, _ = _clearing(history, ClearingPolicy(trigger=1_000, clear_at_least=50_000))
    assert prompt.history == history  # could not free enough to be worth a cache bust
    policy = ClearingPolicy(
        trigger=1_000, keep=2, clear_at_least=500, exclude_tools=frozenset({"notes"})
    )
    prompt, sink = _clearing(history, policy)
    cleared = [m for m in prompt.history if m.content.startswith("[tool result cleared:")]
    assert cleared and all(m.name == "fetch" for m in cleared)
    results = [m for m in prompt.history if m.role == "tool"]
    assert results[-1].content == words(200, "x")  # excluded tool, never cleared
    assert results[-2].content == words(200, "r5")  # kept: among the two most recent
    for stub in cleared:
        ref_id = stub.content.split()[3].rstrip(",")
        assert f'read it with grep_artifact(id="{ref_id}"' not in stub.content
        assert "no reader is offered in this phase" in stub.content
        original = next(m for m in history if m.tool_call_id == stub.tool_call_id)
        assert sink.text(ref_id) == original.content
    # Nothing orphaned: each result still follows its own call, in place.
    assert [m.tool_call_id for m in prompt.history] == [m.tool_call_id for m in history]


def test_the_prefix_stays_byte_identical_when_only_state_and_results_change() -> None:
    engine = ContextEngine(MemoryArtifacts())
    tools = [ToolSpec("fetch", "fetch a page", {"type": "object"})]
    ledger = CallLedger()
    state, history = WorkingState(goal="g"), []
    hashes, busts = set(), []
    for i in range(8):
        state = state.count("steps").apply_model_update(step=i, facts=[(f"f{i}", "t")])
        history += step(i, f"short result {i}")
        prompt = engine.build(request(history, state=state, tools=tools, reference="ref text"))
        history, state = prompt.history, prompt.state
        hashes.add(prompt.prefix_hash())
        busts.append(ledger.record_prompt(prompt, step=i, output_tokens=10).bust)
    assert len(hashes) == 1
    assert busts == [""] * 8
    assert ledger.totals()["cacheable_share"] > 0.5


def test_a_prefix_is_hashed_once_however_many_calls_send_it() -> None:
    """The stable slots' SHA-256 is taken once per distinct prefix, not once per call; a
    changed reference is a new prefix, hashed once more."""
    digest = engine_module._prefix_digest
    digest.cache_clear()  # another test's prefix is not this one's
    engine = ContextEngine(MemoryArtifacts())
    tools = [ToolSpec("fetch", "fetch a page", {"type": "object"})]
    state, history = WorkingState(goal="g"), []
    seen = []
    for i in range(6):
        history += step(i, f"short result {i}")
        reference = "ref text" if i < 3 else "another reference"
        prompt = engine.build(request(history, state=state, tools=tools, reference=reference))
        history = prompt.history
        seen.append(prompt.prefix_hash())
        text = "\x00".join(
            b.text for b in prompt.blocks if b.slot in (Slot.SYSTEM, Slot.TOOLS, Slot.REFERENCE)
        )
        assert seen[-1] == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert len(set(seen[:3])) == 1 and len(set(seen[3:])) == 1 and seen[0] != seen[3]
    assert (digest.cache_info().misses, digest.cache_info().hits) == (2, 4)


def test_a_state_update_shows_in_the_very_next_call_and_the_prefix_is_unchanged() -> None:
    engine = ContextEngine(MemoryArtifacts())
    ledger = CallLedger()
    state, history = WorkingState(goal="g"), step(0, "r")
    first = engine.build(request(history, state=state))
    ledger.record_prompt(first, step=1, output_tokens=1)
    state = first.state.apply_model_update(step=2, facts=[("the bucket is rf-staging-7", "t")])
    history = [*first.history, *step(1, "r1")]
    second = engine.build(request(history, state=state))
    record = ledger.record_prompt(second, step=2, output_tokens=1)
    assert second.messages[-1].content.startswith("STATE CHANGES")
    assert "the bucket is rf-staging-7" in second.messages[-1].content
    before = [b.text for b in first.blocks if b.slot is not Slot.UPDATES]
    assert [b.text for b in second.blocks][: len(before)] == before  # byte-identical prefix
    assert record.bust == ""


def test_changes_over_their_budget_re_render_the_state_as_a_recorded_cache_bust() -> None:
    engine = ContextEngine(MemoryArtifacts())
    ledger = CallLedger()
    state, history = WorkingState(goal="g"), []
    causes = []
    for i in range(30):
        state = state.apply_model_update(step=i, facts=[(f"fact {i} " + words(8), "t")])
        history += step(i, "r")
        prompt = engine.build(request(history, state=state))
        history, state = prompt.history, prompt.state
        causes.append(ledger.record_prompt(prompt, step=i, output_tokens=1).bust)
        changes = sum(b.tokens for b in prompt.blocks if b.slot is Slot.UPDATES)
        assert changes <= DEFAULT_BUDGETS.tokens(Slot.UPDATES)
    # Re-rendered only when the changes outgrew their block: a few busts, not one a call.
    assert 0 < causes.count("state changed") < 5


def test_a_clearing_takes_every_seen_result_but_the_kept_ones_in_one_batch() -> None:
    history = [m for i in range(6) for m in step(i, words(400, f"r{i}"))]
    history += step(6, words(400, "new"))
    policy = ClearingPolicy(trigger=1_000, keep=1, clear_at_least=500)
    prompt, _ = _clearing(history, policy)
    results = [m for m in prompt.history if m.role == "tool"]
    # Far more than the trigger needs is cleared: all but the kept one and the unseen one.
    assert all(m.content.startswith("[tool result cleared:") for m in results[:5])
    assert results[5].content == words(400, "r5") and results[6].content == words(400, "new")


def test_a_new_result_is_stored_with_its_identifiers_the_step_it_arrives() -> None:
    sink = MemoryArtifacts()
    policy = ClearingPolicy(trigger=200, keep=0, clear_at_least=100)
    engine = ContextEngine(sink, budgets=budgets(clearing=policy))
    text = words(150) + "\nreconciled against ACCT-7Q2X9 (do not change)\n" + words(150, "z")
    history = step(0, text)
    prompt = engine.build(request(history))
    assert prompt.history == history  # shown whole: the model has not seen it
    (stored,) = [r for r in sink.refs() if r.kind == "tool-result"]
    assert sink.text(stored.id) == text
    # The clearing a step later only swaps in the stub of what was stored then.
    prompt = engine.build(request([*prompt.history, *step(1, "short")]))
    stub = prompt.history[1].content
    assert stub.startswith("[tool result cleared:") and stored.id in stub and "ACCT-7Q2X9" in stub
    assert len([r for r in sink.refs() if r.kind == "tool-result"]) == 2  # none stored twice


def test_a_result_no_longer_than_a_stub_is_never_cleared_and_still_stored() -> None:
    """Clearing it would free nothing (a stub is as long): it stays in the context
    verbatim through a clearing of the results around it, and is stored all the same (the
    job's record of what its model was told); an identifier it revealed is one a tool
    revealed when the model names it."""
    sink = MemoryArtifacts()
    policy = ClearingPolicy(trigger=200, keep=0, clear_at_least=100)
    engine = ContextEngine(sink, budgets=budgets(clearing=policy))
    short = "wrote ledger ACCT-7Q2X9 (120 bytes)"
    assert engine.tok.count(short) <= engine_module.KEPT_WHOLE_TOKENS
    prompt = engine.build(request(step(0, short)))
    prompt = engine.build(request([*prompt.history, *step(1, words(300))], state=prompt.state))
    # The model answers both and names what the first revealed: a clearing takes every
    # result it has seen, but the short one.
    call = ToolCall(id="c2", name="fetch", arguments={"i": 2})
    later = [
        *prompt.history,
        Message(role="assistant", content="now checking ACCT-7Q2X9", tool_calls=(call,)),
        Message(role="tool", content="ok", tool_call_id="c2", name="fetch"),
    ]
    prompt = engine.build(request(later, state=prompt.state))
    short_result, long_result, _ = [m for m in prompt.history if m.role == "tool"]
    assert long_result.reduced == "cleared"
    assert short_result.content == short and short_result.reduced == ""  # verbatim
    stored = [sink.text(r.id) for r in sink.refs() if r.kind == "tool-result"]
    assert stored == [short, words(300), "ok"]
    assert "ACCT-7Q2X9" in prompt.state.salient


def test_a_batch_over_the_results_slot_cuts_its_long_results_not_its_short_ones() -> None:
    """A short result's share of a crowded slot could be smaller than it: a cut mark would
    make it longer. It stays whole; the long ones share what it leaves."""
    sink = MemoryArtifacts()
    results = {**DEFAULT_BUDGETS.slots, Slot.RESULTS: slot(150, Overflow.TRUNCATE_TO_ARTIFACT)}
    engine = ContextEngine(sink, budgets=budgets(slots=results))
    short = "wrote ledger ACCT-7Q2X9 (120 bytes)"
    calls = tuple(ToolCall(id=f"c{n}", name="fetch", arguments={"n": n}) for n in range(12))
    history = [
        Message(role="assistant", content="fetch them all", tool_calls=calls),
        Message(role="tool", content=short, tool_call_id="c0", name="fetch"),
        *(
            Message(role="tool", content=words(40, f"r{n}_"), tool_call_id=f"c{n}", name="fetch")
            for n in range(1, 12)
        ),
    ]
    prompt = engine.build(request(history))
    kept, *others = [m for m in prompt.history if m.role == "tool"]
    assert kept.content == short and kept.reduced == ""
    assert all(m.reduced == "cut" for m in others)


def test_a_result_is_known_reduced_by_its_mark_not_by_text_that_looks_like_a_stub() -> None:
    lookalike = "[tool result cleared: not really; " + words(300, "real") + "]"
    history = [m for i in range(6) for m in step(i, lookalike if i == 0 else words(300, f"r{i}"))]
    policy = ClearingPolicy(trigger=1_000, keep=1, clear_at_least=500)
    prompt, sink = _clearing(history, policy)
    first = prompt.history[1]
    assert first.reduced == "cleared" and first.content != lookalike  # cleared like any other
    (stored,) = [r for r in sink.refs() if r.id in first.content]
    assert sink.text(stored.id) == lookalike
    assert [m.reduced for m in prompt.history if m.role == "tool"][-1] == ""  # the kept one
