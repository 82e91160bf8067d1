"""Recall that scales: the index's columns and postings, its snapshot in Redis, embedding once.

The stand-in embedder here gives each text a random unit vector seeded by the
text: no meaning (``test_memory_meaning`` has the real one), but every
vector path of the index is taken, at no cost per item.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from types import FrameType
from typing import Any

import bm25s
import numpy as np
import pytest

from shared_state import State, keys
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory import recall as recall_module
from shared_state.memory.index import Row, TenantIndex
from shared_state.memory.recall import Recall, terms

CTX = MemoryContext(tenant="acme", user="u", job="j-1", task="t-1", actor="test")
VOCAB = [f"w{n}" for n in range(3000)]


class Seeded:
    """A text's vector is random, seeded by the text; ``gate``: a call of more than one
    text (not a query) waits for it."""

    def __init__(self, name: str = "seeded", gate: threading.Event | None = None) -> None:
        self.name = name
        self.gate = gate
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        if self.gate is not None and len(texts) > 1:
            assert self.gate.wait(60)
        self.texts += len(texts)
        rows = [
            np.random.default_rng(zlib.crc32(f"{self.name}|{t}".encode())).standard_normal(16)
            for t in texts
        ]
        out = np.array(rows, dtype=np.float32).reshape(len(texts), 16)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def claims(rng: random.Random, n: int, words: int = 12) -> list[Claim]:
    return [
        Claim(
            scope=Scope.parse("app:"),
            text=" ".join(rng.choice(VOCAB) for _ in range(words)),
            source_kind=SourceKind.USER,
            source_ref="test",
        )
        for _ in range(n)
    ]


def ids_of(hits: list[Any]) -> list[str]:
    return [h.item.id for h in hits]


def lines_run(fn: Any) -> int:
    """How many lines of Python ``fn()`` runs, in every function it calls."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def commands(state: State) -> int:
    return int(state.client.info("stats")["total_commands_processed"])


# --------------------------------------------------------------------- the index


def test_bm25_scores_are_bm25s_lucene_scores_through_removals_and_reuse() -> None:
    rng = random.Random(3)
    docs = {
        f"d{n}": [rng.choice(VOCAB[:200]) for _ in range(rng.randint(3, 30))] for n in range(300)
    }
    index = TenantIndex()

    def put(item_id: str) -> None:
        index.put(item_id, Row(docs[item_id], "app:", True, 0, 0, 3, "fact"))

    def agree() -> None:
        live = sorted(index.slot)
        reference = bm25s.BM25()  # its defaults: lucene, k1 1.5, b 0.75
        reference.index([docs[i] for i in live], show_progress=False)
        for query in (["w1"], ["w5", "w7", "w5"], VOCAB[10:16], ["nothing"]):
            ours = index.bm25(query)
            theirs = reference.get_scores(query) if any(q in index.postings for q in query) else 0
            got = np.array([ours[index.slot[i]] for i in live])
            assert np.allclose(got, theirs, rtol=1e-4, atol=1e-5), query

    for item_id in docs:
        put(item_id)
    agree()
    for n in range(0, 300, 3):
        index.remove(f"d{n}")
    agree()
    for n in range(300, 360):  # new items take the freed slots
        docs[f"d{n}"] = [rng.choice(VOCAB[:200]) for _ in range(8)]
        put(f"d{n}")
    assert len(index.ids) == 300
    agree()


def test_removing_an_item_leaves_no_word_or_vector_of_it() -> None:
    index = TenantIndex()
    vector = np.ones(4, dtype=np.float32) / 2
    index.put("a", Row(["shared", "onlyhere"], "user:u:", True, 0, 0, 3, "fact", vector=vector))
    index.put("b", Row(["shared"], "app:", True, 0, 0, 3, "fact", vector=vector))
    index.remove("a")
    assert "onlyhere" not in index.postings
    assert not index.vectors[:1].any()
    blob = index.to_bytes()
    assert b"onlyhere" not in blob and b"user:u:" not in blob
    again = TenantIndex.from_bytes(blob)
    assert list(again.slot) == ["b"] and np.allclose(
        again.bm25(["shared"]), index.bm25(["shared"])[1:]
    )


# ---------------------------------------------------------- 50,000 items, counted


@pytest.fixture(scope="module")
def big(redis_server: Any) -> Iterator[tuple[State, MemoryStore, Seeded]]:
    state = State.connect(redis_server.url)
    state.client.flushall()
    embedder = Seeded()
    store = MemoryStore(state.client, embedder=embedder)
    rng = random.Random(1)
    store.write_many(CTX, claims(rng, 2_000))
    yield state, store, embedder
    state.client.flushall()
    state.client.close()


def test_a_50k_tenant_answers_without_a_pass_over_its_items(
    big: tuple[State, MemoryStore, Seeded],
) -> None:
    """A search's Python lines and Redis commands are the same at 2,000 and 52,000 items:
    the filters and rankings run over the index's arrays, and a write is taken in alone."""
    state, store, embedder = big
    rng = random.Random(2)
    other = MemoryStore(state.client, embedder=embedder)  # another worker writing

    def measure() -> dict[str, int]:
        recall = Recall(store, embedder)
        recall.search(CTX, "w1 w2")  # the build (or the snapshot's load)
        before = commands(state)
        warm = lines_run(lambda: recall.search(CTX, "w10 w20 w30"))
        warm_commands = commands(state) - before
        other.write(CTX, claims(rng, 1)[0])
        after_write = lines_run(lambda: recall.search(CTX, "w11 w21 w31"))
        return {"warm": warm, "warm_commands": warm_commands, "after_write": after_write}

    small = measure()
    store.write_many(CTX, claims(rng, 50_000))
    large = measure()
    assert large["warm"] <= small["warm"] + 300, (small, large)
    assert large["after_write"] <= small["after_write"] + 300, (small, large)
    assert large["warm_commands"] <= small["warm_commands"] + 2, (small, large)
    assert large["warm"] < 5_000, large


def test_items_are_embedded_once_by_the_writer_and_never_by_a_reader(
    big: tuple[State, MemoryStore, Seeded],
) -> None:
    state, store, _ = big
    item = store.write(CTX, claims(random.Random(5), 1)[0])
    stored = state.client.hmget(keys.memory_item("acme", item.id), "vec_model", "vec")
    assert stored[0] == b"seeded" and len(stored[1]) == 16 * 4
    reader = Seeded()  # the same embedder in another process: only queries are embedded
    hits = Recall(store, reader).search(CTX, item.text, k=1)
    assert ids_of(hits) == [item.id] and hits[0].index == "hybrid:seeded"
    assert reader.texts == 1


# ------------------------------------------------------------------- snapshots


@pytest.fixture
def small(state: State, monkeypatch: pytest.MonkeyPatch) -> tuple[MemoryStore, Seeded]:
    monkeypatch.setattr(recall_module, "SNAPSHOT_ITEMS", 100)
    embedder = Seeded()
    store = MemoryStore(state.client, embedder=embedder)
    store.write_many(CTX, claims(random.Random(7), 400))
    return store, embedder


def test_a_process_that_starts_loads_the_snapshot_and_only_what_changed_after(
    state: State, small: tuple[MemoryStore, Seeded]
) -> None:
    store, embedder = small
    first = Recall(store, embedder)
    queries = ["w1 w2", "w100 w200 w300", "w7"]
    before = [ids_of(first.search(CTX, q, k=8)) for q in queries]
    assert state.client.hexists(keys.memory_index("acme"), "blob")
    late = store.write_many(CTX, [claims(random.Random(8), 1)[0]])[0]
    state.client.config_resetstat()
    second = Recall(store, embedder)
    after = [ids_of(second.search(CTX, q, k=8)) for q in queries]
    reads = state.client.info("commandstats")
    assert reads["cmdstat_hmget"]["calls"] <= 3, reads["cmdstat_hmget"]  # the one new item
    assert "cmdstat_zrange" not in reads  # no list of every item
    assert after == before
    assert late in second._tenants["acme"].index.slot
    late_text = store.get(CTX, late).text
    assert ids_of(second.search(CTX, late_text, k=1)) == [late]


def test_a_forget_deletes_the_snapshot_and_refuses_one_read_before_it(
    state: State, small: tuple[MemoryStore, Seeded]
) -> None:
    store, embedder = small
    canary = store.write(CTX, Claim(scope=Scope.parse("app:"), text="zebra-canary lives here",
                                    source_kind=SourceKind.USER, source_ref="test"))  # fmt: skip
    first = Recall(store, embedder)
    assert ids_of(first.search(CTX, "zebra-canary", ranking="keyword")) == [canary.id]
    assert b"zebra-canary" in (state.client.hget(keys.memory_index("acme"), "blob") or b"")
    stale = first._tenants["acme"]
    store.forget(CTX, [canary.id])
    assert not state.client.exists(keys.memory_index("acme"))
    first._save("acme", stale, "0")  # an index read before the forget
    assert not state.client.exists(keys.memory_index("acme"))
    assert first.search(CTX, "zebra-canary", ranking="keyword") == []
    Recall(store, embedder).search(CTX, "w1")  # builds from the items, stores a snapshot
    blob = state.client.hget(keys.memory_index("acme"), "blob")
    assert blob and b"zebra" not in blob and canary.id.encode() not in blob


def test_a_new_embedder_re_embeds_in_the_background_while_keywords_serve(
    state: State, small: tuple[MemoryStore, Seeded]
) -> None:
    store, _ = small
    gate = threading.Event()
    newer = Seeded("newer", gate)
    recall = Recall(store, newer)
    query = store.items(CTX)[0].text
    first = recall.search(CTX, query, k=1)  # 401 items of another embedder: not now
    assert first and first[0].index == "keyword"
    gate.set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        hits = recall.search(CTX, query, k=1)
        if hits[0].index == "hybrid:newer":
            break
        time.sleep(0.05)
    assert hits[0].index == "hybrid:newer"
    models = {
        state.client.hget(keys.memory_item("acme", item_id), "vec_model")
        for item_id in recall._tenants["acme"].index.slot
    }
    assert models == {b"newer"}


def test_terms_are_what_the_index_holds() -> None:
    index = TenantIndex()
    index.put("x", Row(terms("Deploys use ACCT-7Q2X9"), "app:", True, 0, 0, 3, "fact"))
    assert set(index.postings) == {"deploy", "use", "acct-7q2x9", "acct", "7q2x9"}


def test_a_secret_is_refused_before_any_embedder_sees_it(state: State) -> None:
    from shared_state.errors import SecretInMemory

    embedder = Seeded()
    store = MemoryStore(state.client, embedder=embedder)
    secret = Claim(scope=Scope.parse("app:"), text="the key is sk-proj-" + "a1B2c3D4" * 5,
                   source_kind=SourceKind.USER, source_ref="test")  # fmt: skip
    with pytest.raises(SecretInMemory):
        store.write(CTX, secret)
    with pytest.raises(SecretInMemory):
        store.write_many(CTX, [claims(random.Random(9), 1)[0], secret])
    assert embedder.texts == 0 and store.items(CTX) == []
