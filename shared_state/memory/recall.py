"""Recall over a tenant's memory: keywords (BM25, bm25s) and meaning (embeddings), fused.

No module and no service: the items stay in Redis, each with the vector its
embedder made (``embed``: the offline default needs no download), and each
process keeps an index per tenant — BM25 terms and a matrix of vectors —
that follows the tenant's change stream. A search first reads the stream's
last id (one round trip); if another worker wrote or forgot since, the index
takes in those changes before ranking — so an item written by any worker is
recallable by every other at its next step. Hits are then read back from
Redis and checked again, so an item forgotten or superseded a moment ago is
never served from the cache.

Ranking fuses two scores: the cosine of the query's vector with the item's,
weighted ``DENSE_WEIGHT``, and the BM25 score (bm25s's, per shard of about
``SHARD_DOCS`` items by a hash of the id, so that a write re-indexes one
shard) relative to the query's best, weighted the rest. A candidate matches
a keyword or is more than ``DENSE_FLOOR`` alike. A paraphrase that shares
no word with its memory is found by its meaning; an identifier
(``ACCT-7Q2X9``), whose pieces mean little to the embedder, by its keyword —
the weights are where both hold
(``benchmarks/memory_eval.py``, the ``meaning`` case). Items written before
an embedder (or by another one) are embedded when the index first meets
them and their vectors stored back (``memoryVector``), so other processes
need not embed them again. Without an embedder, recall is by keywords
alone; every hit says which ranking served it (``Hit.index``).

Filters are a mask over the scores: the context's scopes, current versions
only, unexpired and not due for re-verification by Redis time (a stale item
is listed by ``MemoryStore.stale``, not recalled), a minimum authority,
kinds. Ties are broken by item id, so the same query over the same items
returns the same order everywhere.
"""

from __future__ import annotations

import math
import re
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import bm25s
import numpy as np
import redis

from .. import keys
from ..scripts import run_plain
from .embed import Embedder, default_embedder
from .items import MemoryContext, MemoryItem, Scope
from .store import MemoryStore

# Measured (memory_eval's meaning case, all-MiniLM-L6-v2): at 0.9 the keyword share still
# puts an exact identifier first (ACCT-... among 300 alike sentences: 100 of 100), and a
# paraphrase loses least to the words it happens to share with other items.
DENSE_WEIGHT = 0.9
# The cosine above which an item is a candidate by meaning alone: an unrelated item is no
# answer (all-MiniLM-L6-v2: "freeze" and "the api port is 8443", 0.01). Measured on the
# recall corpus, 95% of the paraphrased questions' answers are above it (0.18), and no
# answer in the top 5 is lost to it.
DENSE_FLOOR = 0.15
Ranking = Literal["hybrid", "keyword", "dense"]

_WORD = re.compile(r"[a-z0-9][a-z0-9_.:/@-]*[a-z0-9]|[a-z0-9]")
_PARTS = re.compile(r"[_.:/@-]")
_STOP = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is",
     "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "will", "with",
     "we", "our", "you", "your", "not", "no"}
)  # fmt: skip


def terms(text: str) -> list[str]:
    """Lower-cased words; a compound (``ACCT-7Q2X9``, ``db.port``) also as its parts."""
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word in _STOP:
            continue
        out.append(_stem(word))
        parts = [p for p in _PARTS.split(word) if p and p not in _STOP]
        if len(parts) > 1:
            out += [_stem(p) for p in parts]
    return out


def _stem(word: str) -> str:
    # Plural and singular meet; nothing fancier, so identifiers stay as written.
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss") and word.isalpha():
        return word[:-1]
    return word


class Ranker(Protocol):
    """Scores every indexed document for a query."""

    def build(self, documents: Sequence[list[str]]) -> None: ...

    def scores(self, query: list[str]) -> np.ndarray: ...


class BM25Ranker:
    def __init__(self) -> None:
        self._index: bm25s.BM25 | None = None
        self._size = 0

    def build(self, documents: Sequence[list[str]]) -> None:
        self._size = len(documents)
        if not documents:
            self._index = None
            return
        self._index = bm25s.BM25()
        self._index.index(list(documents), show_progress=False)

    def scores(self, query: list[str]) -> np.ndarray:
        if self._index is None:
            return np.zeros(self._size, dtype=np.float32)
        return self._index.get_scores(query)


@dataclass(frozen=True)
class Hit:
    item: MemoryItem
    score: float
    index: str = "keyword"  # which ranking served it: keyword, or hybrid/dense:<embedder>


@dataclass
class _Doc:
    terms: list[str]
    scope: Scope
    status: str
    valid_until: int
    reverify_after: int
    authority: int
    kind: str
    user: str
    vector: np.ndarray | None = None  # the embedder's, unit length


SHARD_DOCS = 1024  # a write re-indexes one shard of about this many items, not the tenant


@dataclass
class _Shard:
    ranker: Ranker = field(default_factory=BM25Ranker)
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass
class _TenantIndex:
    last_change: str = ""
    docs: dict[str, _Doc] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    shards: list[_Shard] = field(default_factory=list)
    built: bool = False
    embedded: str = ""  # the embedder whose vectors the index holds ("" none)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    def scores(self, query: list[str]) -> np.ndarray:
        out = np.zeros(len(self.ids), dtype=np.float64)
        for shard in self.shards:
            if len(shard.positions):
                out[shard.positions] = shard.ranker.scores(query)
        return np.round(out, 6)

    def rebuild(self, changed: set[str]) -> None:
        """Re-index the shards holding ``changed`` (all of them when the shard count moves)."""
        self.ids = sorted(self.docs)
        count = _shard_count(len(self.ids))
        dirty = (
            set(range(count))
            if count != len(self.shards)
            else {_shard_of(i, count) for i in changed}
        )
        if count != len(self.shards):
            self.shards = [_Shard() for _ in range(count)]
        members: list[list[int]] = [[] for _ in range(count)]
        for position, item_id in enumerate(self.ids):
            members[_shard_of(item_id, count)].append(position)
        for n, shard in enumerate(self.shards):
            shard.positions = np.asarray(members[n], dtype=np.int64)
            if n in dirty:
                shard.ranker.build([self.docs[self.ids[p]].terms for p in members[n]])
        found = [self.docs[i].vector for i in self.ids]
        dim = next((len(v) for v in found if v is not None), 0)
        self.vectors = np.zeros((len(self.ids), dim), dtype=np.float32)
        for position, vector in enumerate(found):
            if vector is not None and len(vector) == dim:
                self.vectors[position] = vector


def _shard_count(n_docs: int) -> int:
    return 1 if n_docs <= SHARD_DOCS else 1 << math.ceil(math.log2(n_docs / SHARD_DOCS))


def _shard_of(item_id: str, count: int) -> int:
    return zlib.crc32(item_id.encode()) % count


class Recall:
    """Search a tenant's memory; one per process, shared by its tasks."""

    def __init__(self, store: MemoryStore, embedder: Embedder | None = None) -> None:
        """``embedder``: by default the process's (``embed.default_embedder``), made at the
        first search; recall by keywords alone when there is none."""
        self.store = store
        self.client: redis.Redis = store.client
        self._embedder = embedder
        self._tenants: dict[str, _TenantIndex] = {}
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder | None:
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    def search(
        self,
        ctx: MemoryContext,
        query: str,
        *,
        k: int = 5,
        scopes: Sequence[Scope] = (),
        min_authority: int = 0,
        kinds: Sequence[str] = (),
        operator: bool = False,
        ranking: Ranking = "hybrid",
    ) -> list[Hit]:
        """The ``k`` best current, unexpired, not stale items visible to ``ctx`` for ``query``.

        ``ranking``: both rankings fused (the default), or one of them alone
        (to compare them); without an embedder, keywords.
        """
        wanted = terms(query)
        if not wanted or k <= 0:
            return []
        embedder = None if ranking == "keyword" else self.embedder
        if embedder is None:
            ranking = "keyword"
        query_vector = embedder.embed([query])[0] if embedder is not None else None
        now = self.store.now_ms()
        allowed = {str(s) for s in scopes}
        # The index is rebuilt in place as the tenant's memory changes: another task
        # slot of this process must not score it halfway through (hits are re-read outside).
        with self._lock:
            index = self._refresh(ctx.tenant, embedder)
            if not index.ids:
                return []
            ids = list(index.ids)
            mask = np.fromiter(
                (
                    doc.status == "current"
                    and not (doc.valid_until and now >= doc.valid_until)
                    and not (doc.reverify_after and now >= doc.reverify_after)
                    and doc.authority >= min_authority
                    and (not allowed or str(doc.scope) in allowed)
                    and (not kinds or doc.kind in kinds)
                    and ctx.sees(doc.scope, operator=operator)
                    for doc in (index.docs[i] for i in ids)
                ),
                dtype=bool,
                count=len(ids),
            )
            scores = index.scores(wanted) if ranking != "dense" else None
            alike = (
                index.vectors @ query_vector
                if query_vector is not None and index.vectors.shape[1] == len(query_vector)
                else None
            )
        scores = _fused(mask, scores, alike) if ranking != "keyword" else scores
        assert scores is not None
        candidates = np.nonzero(mask & (scores > 0))[0]
        # Best score first, then item id (index.ids is sorted): the same order everywhere.
        ranked = candidates[np.lexsort((candidates, -scores[candidates]))]
        served = "keyword" if ranking == "keyword" else f"{ranking}:{embedder.name}"
        hits: list[Hit] = []
        for start in range(0, len(ranked), max(k * 2, 8)):
            chunk = ranked[start : start + max(k * 2, 8)]
            fresh = self._still_current(ctx, [ids[i] for i in chunk], now, operator)
            for position in chunk:
                item = fresh.get(ids[position])
                if item is not None:
                    hits.append(Hit(item, float(scores[position]), served))
                    if len(hits) == k:
                        return hits
        return hits

    def _still_current(
        self, ctx: MemoryContext, ids: list[str], now: int, operator: bool
    ) -> dict[str, MemoryItem]:
        """The items among ``ids`` that Redis still holds as current, unexpired and visible."""
        return {
            item.id: item
            for item in self.store.read_many(ctx.tenant, ids)
            if item.status == "current"
            and not item.expired(now)
            and not item.stale(now)
            and ctx.sees(item.scope, operator=operator)
        }

    def _refresh(self, tenant: str, embedder: Embedder | None) -> _TenantIndex:
        index = self._tenants.setdefault(tenant, _TenantIndex())
        stream = keys.memory_changes(tenant)
        last = self.client.xrevrange(stream, count=1)
        last_id = last[0][0].decode() if last else ""
        embedded = embedder.name if embedder is not None else ""
        if index.built and last_id == index.last_change and embedded == index.embedded:
            return index
        changed: set[str] | None = None
        # An index made without this embedder's vectors is read again whole (with them).
        if index.built and index.last_change and embedded == index.embedded:
            oldest = self.client.xrange(stream, count=1)
            if oldest and _stream_id(oldest[0][0].decode()) <= _stream_id(index.last_change):
                entries = self.client.xrange(stream, min=f"({index.last_change}")
                changed = {fields[b"id"].decode() for _, fields in entries}
        if changed is None:  # first use, or the stream was trimmed past what we saw
            index.docs.clear()
            changed = {i.decode() for i in self.client.zrange(keys.memory_items(tenant), 0, -1)}
        ordered = sorted(changed)
        pipe = self.client.pipeline(transaction=False)
        for item_id in ordered:
            pipe.hmget(
                keys.memory_item(tenant, item_id),
                "text",
                "key",
                "scope",
                "status",
                "valid_until",
                "reverify_after",
                "authority",
                "kind",
                "user",
                "vec_model",
                "vec",
            )
        unembedded: list[tuple[str, str]] = []  # item id, the text its vector is made of
        for item_id, row in zip(ordered, pipe.execute(), strict=True):
            if row[0] is None:
                index.docs.pop(item_id, None)
                continue
            text, key, scope, status, valid_until, reverify_after, authority, kind, user = (
                v.decode() for v in row[:9]
            )
            vector = None
            if embedder is not None and row[9] is not None and row[9].decode() == embedder.name:
                vector = np.frombuffer(row[10], dtype=np.float32)
            elif embedder is not None:
                # What it is about and what it says; a key made of the text's digest
                # (``#…``, a claim written without one) means nothing to the embedder.
                about = "" if key.startswith("#") else f"{key} "
                unembedded.append((item_id, about + text))
            index.docs[item_id] = _Doc(
                terms=terms(f"{key} {text}"),
                scope=Scope.parse(scope),
                status=status,
                valid_until=int(valid_until or 0),
                reverify_after=int(reverify_after or 0),
                authority=int(authority),
                kind=kind,
                user=user,
                vector=vector,
            )
        if embedder is not None and unembedded:
            self._embed(tenant, index, unembedded, embedder)
        index.rebuild(changed)
        index.last_change, index.built, index.embedded = last_id, True, embedded
        return index

    def _embed(
        self,
        tenant: str,
        index: _TenantIndex,
        texts: list[tuple[str, str]],
        embedder: Embedder,
    ) -> None:
        """Embed the items that have no vector of this embedder, and store the vectors back
        on those that still exist, so that no other process embeds them again."""
        vectors = embedder.embed([text for _, text in texts])
        where = keys.script_keys("memoryVector", tenant=tenant)
        for start in range(0, len(texts), 256):  # a few hundred items a call
            args: list[str | bytes] = [embedder.name]
            for (item_id, _), vector in zip(
                texts[start : start + 256], vectors[start : start + 256], strict=True
            ):
                index.docs[item_id].vector = vector
                args += [item_id, vector.astype(np.float32).tobytes()]
            run_plain(self.client, "memoryVector", where, args)


def _fused(mask: np.ndarray, keyword: np.ndarray | None, alike: np.ndarray | None) -> np.ndarray:
    """The fused score of each item ``mask`` allows that is a candidate (see the module's
    docstring), 0 for the others; with one score only, that score."""
    fused = np.zeros(len(mask), dtype=np.float64)
    candidate = np.zeros(len(mask), dtype=bool)
    if alike is not None:
        fused += (DENSE_WEIGHT if keyword is not None else 1.0) * alike
        candidate |= alike > DENSE_FLOOR
    if keyword is not None:
        best = float(keyword[mask].max()) if mask.any() else 0.0
        if best > 0:
            fused += (1.0 - DENSE_WEIGHT if alike is not None else 1.0) * keyword / best
        candidate |= keyword > 0
    # Positive for every candidate, so that ``search`` keeps them all (a keyword match
    # with a negative cosine still is one).
    return np.where(mask & candidate, np.maximum(fused, 1e-9), 0.0)


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
