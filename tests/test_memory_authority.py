"""Authority: which version of a claim holds, row by row of the README's table, on a real server.

Each row: the scope, the earlier and the later source, and which one holds
afterwards. A temporary value shadows the lasting one until it expires, and
the lasting one then holds again — with no write, by Redis time.
"""

from __future__ import annotations

import re
import time

import pytest

from shared_state import JobSpec, Scenario, State, keys
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory.recall import Recall

ALICE = MemoryContext(tenant="acme", user="alice", job="j-1", task="t-1", actor="test")

# (scope, earlier source, later source, which holds, the other's status): the README's table.
ROWS = [
    # A person is the authority on themselves: their correction beats an earlier check.
    ("user:alice:", SourceKind.VERIFIER, SourceKind.USER, "later", "superseded"),
    # ... and a later check beats their earlier word, as anywhere.
    ("user:alice:", SourceKind.USER, SourceKind.VERIFIER, "later", "superseded"),
    # Nobody else's later word, in their scope, beats what they said.
    ("user:alice:", SourceKind.USER, SourceKind.SYSTEM, "earlier", "contested"),
    # About the project, the user's assertion does not overturn a passing check.
    ("app:", SourceKind.VERIFIER, SourceKind.USER, "earlier", "contested"),
    # A verified check about the code beats an agent's claim, before or after it.
    ("job:j-1:", SourceKind.VERIFIER, SourceKind.AGENT, "earlier", "contested"),
    ("job:j-1:", SourceKind.AGENT, SourceKind.VERIFIER, "later", "superseded"),
    # The user's word beats an agent's; an agent's beats tool or web content.
    ("job:j-1:", SourceKind.USER, SourceKind.AGENT, "earlier", "contested"),
    ("job:j-1:", SourceKind.TOOL, SourceKind.AGENT, "later", "superseded"),
    # Equal authority: the later one.
    ("job:j-1:", SourceKind.AGENT, SourceKind.AGENT, "later", "superseded"),
]


@pytest.fixture
def store(state: State) -> MemoryStore:
    return MemoryStore(state.client)


def claim(text: str, scope: str, source: SourceKind, **kw: object) -> Claim:
    return Claim(scope=Scope.parse(scope), text=text, key="editor", source_kind=source,
                 source_ref="test", **kw)  # fmt: skip


@pytest.mark.parametrize(("scope", "earlier", "later", "holds", "other"), ROWS)
def test_every_row_of_the_authority_table_holds(
    store: MemoryStore,
    scope: str,
    earlier: SourceKind,
    later: SourceKind,
    holds: str,
    other: str,
) -> None:
    first = store.write(ALICE, claim("the editor is vim", scope, earlier))
    second = store.write(ALICE, claim("the editor is emacs", scope, later))
    winner, loser = (second, first) if holds == "later" else (first, second)
    current = store.current(ALICE, Scope.parse(scope), "editor")
    assert current is not None and current.id == winner.id
    assert store.get(ALICE, loser.id).status == other
    hits = Recall(store).search(ALICE, "which editor", k=5, ranking="keyword")
    assert [h.item.id for h in hits] == [winner.id]  # recall serves the one that holds


def _wait_until_expired(store: MemoryStore, item_id: str) -> None:
    until = store.get(ALICE, item_id).valid_until
    deadline = time.monotonic() + 10
    while store.now_ms() < until and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.now_ms() >= until


def test_an_expired_temporary_value_brings_back_the_previous_one(
    store: MemoryStore, state: State
) -> None:
    lasting = store.write(ALICE, claim("the editor is vim", "user:alice:", SourceKind.USER))
    temporary = store.write(
        ALICE, claim("the editor is nano this week", "user:alice:", SourceKind.USER, valid_for_s=1)
    )
    scope = Scope.parse("user:alice:")
    recall = Recall(store)
    assert store.current(ALICE, scope, "editor").id == temporary.id
    assert [h.item.id for h in recall.search(ALICE, "editor", ranking="keyword")] == [temporary.id]
    shadowed = store.get(ALICE, lasting.id)
    assert shadowed.status == "current" and shadowed.shadowed_until == temporary.valid_until
    _wait_until_expired(store, temporary.id)
    # Nothing was written: Redis's clock passed the temporary value's end.
    assert store.current(ALICE, scope, "editor").id == lasting.id
    assert [h.item.id for h in recall.search(ALICE, "editor", ranking="keyword")] == [lasting.id]
    # The next write settles against the value that holds again.
    weaker = store.write(ALICE, claim("the editor is ed", "user:alice:", SourceKind.SYSTEM))
    assert weaker.status == "contested"
    assert store.current(ALICE, scope, "editor").id == lasting.id


def test_a_new_lasting_value_replaces_the_shadowed_one_for_good(store: MemoryStore) -> None:
    old = store.write(ALICE, claim("the editor is vim", "user:alice:", SourceKind.USER))
    temporary = store.write(
        ALICE, claim("the editor is nano this week", "user:alice:", SourceKind.USER, valid_for_s=1)
    )
    new = store.write(ALICE, claim("the editor is helix", "user:alice:", SourceKind.USER))
    statuses = {i.id: i.status for i in store.history(ALICE, Scope.parse("user:alice:"), "editor")}
    assert statuses == {old.id: "superseded", temporary.id: "superseded", new.id: "current"}
    _wait_until_expired(store, temporary.id)
    assert store.current(ALICE, Scope.parse("user:alice:"), "editor").id == new.id


def test_forgetting_the_temporary_value_lets_the_shadowed_one_hold_at_once(
    store: MemoryStore, state: State
) -> None:
    lasting = store.write(ALICE, claim("the editor is vim", "user:alice:", SourceKind.USER))
    temporary = store.write(
        ALICE, claim("the editor is nano for now", "user:alice:", SourceKind.USER, valid_for_s=60)
    )
    store.forget(ALICE, [temporary.id])
    assert store.current(ALICE, Scope.parse("user:alice:"), "editor").id == lasting.id
    assert state.client.hget(keys.memory_item("acme", lasting.id), "shadowed_until") == b"0"


def test_an_agents_decision_reaches_later_jobs_as_an_agents_data_never_as_the_systems(
    state: State,
) -> None:
    """Condensed into the job's episode, an agent's unverified decision keeps an agent's
    authority; a later job is shown it as a data block, never in its system prompt."""
    from .test_memory_agents import planned_for
    from .test_memory_episodes import _finish

    decision = "store the slug table in sqlite, not postgres"
    job = state.jobs.submit(JobSpec(goal="make slugs", scenario=Scenario.AGENTS))
    coder = MemoryContext(tenant="default", user="default", job=job.job_id, actor="coder-1")
    state.memory.write(
        coder, Claim(scope=Scope.parse(f"job:{job.job_id}:"), text=decision, kind="decision",
                     source_kind=SourceKind.AGENT, source_ref="note step 3"),
    )  # fmt: skip
    _finish(state, job.job_id)
    state.jobs.finalize(job.job_id)
    user = MemoryContext(tenant="default", user="default", actor="t")
    (episode,) = [i for i in state.memory.items(user) if i.kind == "episode"]
    assert decision in episode.text and episode.provenance.authority == 1

    _, script, _ = planned_for(state, "where does the slug table live", {"text": "done"})
    system, *rest = script.sent[0][0]
    assert system.role == "system" and decision not in (system.content or "")
    shown = "\n".join(m.content or "" for m in rest)
    blocks = re.findall(r'<memory [^>]*authority="(\d)"[^>]*>\n(.*?)\n</memory>', shown, re.S)
    holding = [authority for authority, text in blocks if decision in text]
    assert holding == ["1"]
