"""Recall over a tenant's memory (keywords and meaning), on a real server, across workers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from shared_state import State
from shared_state.client import connect
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory.recall import Recall, terms

from .conftest import wait_for

CTX = MemoryContext(tenant="acme", user="alice", job="j-1", task="t-1", actor="w1")


def put(store: MemoryStore, text: str, *, scope: str = "app:", key: str = "", **kw) -> str:
    source = kw.pop("source", SourceKind.USER)
    claim = Claim(
        scope=Scope.parse(scope), text=text, key=key, source_kind=source, source_ref="m1", **kw
    )
    return store.write(CTX, claim).id


@pytest.fixture
def store(state: State) -> MemoryStore:
    return MemoryStore(state.client)


def test_terms_keep_identifiers_whole_and_in_parts() -> None:
    assert terms("Billing ACCT-7Q2X9 uses db.port ports") == [
        "billing",
        "acct-7q2x9",
        "acct",
        "7q2x9",
        "use",
        "db.port",
        "db",
        "port",
        "port",
    ]


def test_the_best_match_comes_first_and_ties_break_by_id(store: MemoryStore) -> None:
    deploy = put(store, "deploys go to the eu-west-1 region", key="deploy.region")
    put(store, "the cache is redis", key="cache")
    twins = sorted(put(store, f"tabs over spaces #{n}") for n in range(3))
    recall = Recall(store)
    hits = recall.search(CTX, "which region do deploys go to")
    assert hits[0].item.id == deploy
    # Equal keyword scores (the numbers are no keywords) break by id; by meaning, the
    # numbers make the three differ, so the fused ranking has no tie to break.
    assert [h.item.id for h in recall.search(CTX, "tabs spaces", ranking="keyword")] == twins


def test_an_empty_query_recalls_nothing(store: MemoryStore) -> None:
    put(store, "anything at all")
    assert Recall(store).search(CTX, "") == []
    assert Recall(store).search(CTX, "  the of  ") == []


def test_what_another_worker_writes_is_recalled_at_the_next_search(
    store: MemoryStore, redis_url: str
) -> None:
    recall = Recall(store)
    put(store, "the staging database is pg-staging-3")
    assert len(recall.search(CTX, "staging database")) == 1  # the index is now built
    code = (
        "import sys\n"
        "from shared_state.client import connect\n"
        "from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind\n"
        "ctx = MemoryContext(tenant='acme', user='alice', job='j-1', task='t-2', actor='w2')\n"
        "MemoryStore(connect(sys.argv[1])).write(ctx, Claim(scope=Scope.parse('app:'),\n"
        "    text='the production database is pg-prod-7', source_kind=SourceKind.USER,\n"
        "    source_ref='m2'))\n"
    )
    subprocess.run([sys.executable, "-c", code, redis_url], check=True, timeout=60)
    texts = [h.item.text for h in recall.search(CTX, "production database")]
    assert texts[0] == "the production database is pg-prod-7"


def test_a_search_asked_again_with_nothing_changed_is_answered_without_ranking(
    store: MemoryStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's every run recalls with its goal: ranked once while the tenant's memory holds."""
    from shared_state.memory.index import TenantIndex

    ranked: list[int] = []
    bm25 = TenantIndex.bm25
    monkeypatch.setattr(TenantIndex, "bm25", lambda self, q: ranked.append(1) or bm25(self, q))
    recall = Recall(store)
    first = put(store, "the build cache lives on bucket-7")
    hits = recall.search(CTX, "build cache bucket", ranking="keyword")
    again = recall.search(CTX, "build cache bucket", ranking="keyword")
    assert [(h.item.id, h.score) for h in again] == [(h.item.id, h.score) for h in hits]
    assert len(ranked) == 1 and again[0].at_ms >= hits[0].at_ms
    # Asked otherwise (fewer hits), it is another search.
    recall.search(CTX, "build cache bucket", k=1, ranking="keyword")
    assert len(ranked) == 2
    # Another worker's write is a change: the next search ranks again, and finds it.
    MemoryStore(connect(redis_url)).write(
        CTX,
        Claim(scope=Scope.parse("app:"), text="the build cache of ci is bucket-9 build cache",
              source_kind=SourceKind.USER, source_ref="m2"),
    )  # fmt: skip
    found = [h.item.id for h in recall.search(CTX, "build cache bucket", ranking="keyword")]
    assert len(ranked) == 3 and len(found) == 2 and first in found


def test_a_forget_by_another_worker_is_never_served_from_the_cache(
    store: MemoryStore, redis_url: str
) -> None:
    recall = Recall(store)
    item = put(store, "the canary value is K9-LARK-22")
    assert [h.item.id for h in recall.search(CTX, "canary value")] == [item]
    assert [h.item.id for h in recall.search(CTX, "K9-LARK-22")] == [item]
    MemoryStore(connect(redis_url)).forget(CTX, [item])
    assert recall.search(CTX, "canary value") == []
    # Nor is its text kept in this process, by a search not asked again since.
    kept = [h.item.text for found in recall._found.values() for h in found.hits]
    assert not any("K9-LARK-22" in text for text in kept)


def test_superseded_contested_expired_and_stale_items_are_not_recalled(store: MemoryStore) -> None:
    recall = Recall(store)
    old = put(store, "the api port is 8080", key="api.port")
    new = put(store, "the api port is 8443", key="api.port")
    put(store, "the api port is 9000", key="api.port", source=SourceKind.SYSTEM)  # contested
    assert [h.item.id for h in recall.search(CTX, "api port")] == [new]
    assert old != new
    # Expiry and staleness come with Redis's time, with nothing written: a search this
    # process keeps (the tenant unchanged since) holds only until an item's time comes.
    brief = put(store, "the freeze ends friday", valid_for_s=2)
    assert [h.item.id for h in recall.search(CTX, "freeze")] == [brief]
    wait_for(lambda: recall.search(CTX, "freeze") == [], 15, "the item's expiry")
    check = put(store, "the quota is 40 requests", reverify_after_s=2)
    assert [h.item.id for h in recall.search(CTX, "quota")] == [check]
    wait_for(lambda: recall.search(CTX, "quota") == [], 15, "the item's re-verification")
    assert [i.id for i in store.stale(CTX)] == [check]  # listed for re-verification instead


def test_filters_by_scope_authority_and_the_contexts_visibility(store: MemoryStore) -> None:
    app = put(store, "lint with ruff", scope="app:")
    mine = put(store, "alice lints with ruff too", scope="user:alice:")
    agent = put(store, "ruff found 3 issues", scope="job:j-1:", source=SourceKind.AGENT)
    recall = Recall(store)
    assert {h.item.id for h in recall.search(CTX, "ruff", k=10)} == {app, mine, agent}
    only_app = recall.search(CTX, "ruff", scopes=[Scope.parse("app:")])
    assert [h.item.id for h in only_app] == [app]
    strong = recall.search(CTX, "ruff", min_authority=2, k=10)
    assert {h.item.id for h in strong} == {app, mine}
    bob = MemoryContext(tenant="acme", user="bob", job="j-2", task="t-9", actor="w")
    assert [h.item.id for h in recall.search(bob, "ruff", k=10)] == [app]
    other_tenant = MemoryContext(tenant="globex", user="alice", job="j-1", actor="w")
    assert recall.search(other_tenant, "ruff", k=10) == []


def test_task_slots_searching_one_index_while_memory_changes_see_no_torn_index(
    store: MemoryStore, redis_url: str
) -> None:
    """Every slot of a worker process searches the process's one Recall as others write."""
    for n in range(200):
        put(store, f"deploy region eu-west-{n} service alpha{n}")
    recall = Recall(store)
    writer = MemoryStore(connect(redis_url))  # another worker: each write makes a search refresh
    errors: list[str] = []
    searches = [0] * 4
    done = threading.Event()

    def slot(i: int) -> None:
        while not done.is_set():
            try:
                assert recall.search(CTX, "deploy region service", k=5)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:120])
            searches[i] += 1

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    try:
        n = 0
        while min(searches) < 25 and time.monotonic() < deadline:  # each write a refresh
            put(writer, f"deploy region ap-south-{n} service beta{n}")
            n += 1
            # The next write once a search took this one in: a refresh embeds what was
            # written since the last, and an unpaced writer outruns any embedder.
            seen = sum(searches)
            while sum(searches) <= seen and time.monotonic() < deadline:
                time.sleep(0.001)
    finally:
        done.set()
        for t in threads:
            t.join(30)
    assert min(searches) >= 25, searches
    assert errors == []
