"""Recall over a tenant's memory: keywords (BM25) and meaning (embeddings), fused.

No module and no service: the items stay in Redis, each with the vector its
embedder made (``embed``: the offline default needs no download; a worker
embeds what it writes, ``MemoryStore``), and each process keeps an index per
tenant (``index``: postings, filter columns, vectors) that follows the
tenant's change stream. A search first reads the stream's last id with
Redis's time (one round trip, or none when a task's run read them with its
other records: ``probe``); if another worker wrote or forgot since, the
index takes in those changes — those items only — before ranking, so an
item written by any worker is recallable by every other at its next step.
Hits are then checked again as Redis holds them, so an item forgotten or
superseded a moment ago is never served from the cache: read back, unless
this process read them since the tenant's last change and forget (every
write, supersession and forget of an item is a change), when the copy it
read is what Redis holds. And the hits of a search are kept: asked again
(a job's every run recalls with its goal) while the index is as it was
ranked, the forget generation the same and no item's expiry, re-verification
or shadow reached by Redis time, it is answered without ranking or reading
back (``SEARCHES_KEPT``).

A process meeting a tenant for the first time loads the index's snapshot
from Redis (``rf:mem:{tenant}:index``) and takes in the changes after it;
only without one (or one made before a forget, or older than what the
change stream still holds) does it read and index every item, and then it
stores a snapshot for the next. A forget deletes the snapshot.

Ranking fuses two scores: the cosine of the query's vector with the item's,
weighted ``DENSE_WEIGHT``, and the BM25 score relative to the query's best,
weighted the rest. A candidate matches a keyword or is more than
``DENSE_FLOOR`` alike. A paraphrase that shares no word with its memory is
found by its meaning; an identifier (``ACCT-7Q2X9``), whose pieces mean
little to the embedder, by its keyword — the weights are where both hold
(``benchmarks/memory_eval.py``, the ``meaning`` case). Items written without
a vector of this embedder (before one, or by another) are embedded when the
index meets them — a few at once, many (the embedder changed) in the
background while keywords serve — and their vectors stored back
(``memoryVector``), so other processes need not embed them again. Without
an embedder, recall is by keywords alone; every hit says which ranking
served it (``Hit.index``).

Filters are a mask over the index's columns: the context's scopes, current
versions only, unexpired and not due for re-verification by Redis time (a
stale item is listed by ``MemoryStore.stale``, not recalled), a minimum
authority, kinds. Ties are broken by item id, so the same query over the
same items returns the same order everywhere.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import redis

from .. import keys
from ..scripts import run_plain
from .embed import Embedder, default_embedder, embedded_text
from .index import Row, TenantIndex
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


@dataclass(frozen=True)
class Hit:
    item: MemoryItem
    score: float
    index: str = "keyword"  # which ranking served it: keyword, or hybrid/dense:<embedder>
    at_ms: int = 0  # Redis's time when it was found (what its age is counted from)


# A process indexes at most this many unembedded items before answering (about 20 ms of
# CPU each with the offline embedder); more (another embedder's items) are embedded in
# the background while keywords serve.
EMBED_NOW = 32
# The vectors of this many recent queries are kept (a few KB each): a job's runs recall
# with its goal, so one embedding serves all of them.
QUERY_VECTORS = 256
# A query's vector is kept in Redis this long, for the other workers asking it: a job's
# runs on a dozen processes ask with its goal, and one of them embeds it (~15 ms).
QUERY_VECTOR_TTL_S = 3_600
# The hits of this many recent searches are kept (a job's every run recalls with its goal):
# asked again with nothing changed, a search is answered without ranking or reading back.
SEARCHES_KEPT = 256
# Items read back are kept per tenant until its next change (the hits of its recent
# searches), at most this many.
ITEMS_KEPT = 4_096
# A snapshot is kept in Redis for a tenant of at least this many items, and written again
# once this many changes (or a quarter of the tenant) have come since the stored one.
SNAPSHOT_ITEMS = 1_000
_FIELDS = ("text", "key", "scope", "status", "valid_until", "reverify_after", "authority",
           "kind", "shadowed_until", "vec_model", "vec")  # fmt: skip


@dataclass(frozen=True)
class _Found:
    """A search's hits, and what they hold for (``Recall._keep_found``)."""

    stamp: tuple[Any, ...]
    until: int
    hits: tuple[Hit, ...]


@dataclass
class _Tenant:
    index: TenantIndex = field(default_factory=TenantIndex)
    last_change: str = ""  # the last change the index took in
    built: bool = False
    embedded: str = ""  # the embedder whose vectors the index holds ("" none)
    snapshot_at: int = 0  # how many changes the index had taken in at the stored snapshot
    changes: int = 0
    embedding: bool = False  # a background thread is embedding its items
    generation: str = "0"  # the tenant's forget generation at the last refresh
    # Items as read back since (last_change, generation) was last seen to change.
    items: dict[str, MemoryItem] = field(default_factory=dict)
    items_at: tuple[str, str] = ("", "")


class Recall:
    """Search a tenant's memory; one per process, shared by its tasks."""

    def __init__(self, store: MemoryStore, embedder: Embedder | None = None) -> None:
        """``embedder``: by default the process's (``embed.default_embedder``), made at the
        first search; recall by keywords alone when there is none."""
        self.store = store
        self.client: redis.Redis = store.client
        self._embedder = embedder
        self._tenants: dict[str, _Tenant] = {}
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._found: OrderedDict[tuple[Any, ...], _Found] = OrderedDict()
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
        probed: Sequence[Any] = (),
    ) -> list[Hit]:
        """The ``k`` best current, unexpired, not stale items visible to ``ctx`` for ``query``.

        ``ranking``: both rankings fused (the default), or one of them alone
        (to compare them); without an embedder, or while the tenant's items
        are being embedded, keywords (``Hit.index`` says which served).
        ``probed``: the replies to ``probe``'s reads, made with other reads (a
        run's opening), so the search needs no round trip of its own for them —
        with the query's vector, when another worker made it lately.
        """
        wanted = terms(query)
        if not wanted or k <= 0:
            return []
        embedder = None if ranking == "keyword" else self.embedder
        query_vector: np.ndarray | None = None
        allowed = [str(s) for s in scopes]
        visible = None if operator else ctx.visible()
        if visible is not None and allowed:
            visible = tuple(s for s in visible if s in allowed)
        elif allowed:
            visible = tuple(allowed)
        enough = max(k * 4, 32)
        # A probe that looked for the query's vector (a task's run) shares the one made
        # here; a search asked otherwise (the CLI's) keeps it to itself.
        shared = len(probed) > 3
        if not probed:
            probed = self._probe(ctx.tenant)
        asked = (ctx.tenant, query, k, visible, min_authority, tuple(kinds), operator, ranking)
        with self._lock:
            tenant, now = self._refresh(ctx.tenant, embedder, probed)
            stamp = (tenant.index.version, tenant.generation, tenant.embedding)
            kept = self._found.get(asked)
            if kept is not None and kept.stamp == stamp and (not kept.until or now < kept.until):
                self._found.move_to_end(asked)
                return [replace(hit, at_ms=now) for hit in kept.hits]
            self._found.pop(asked, None)  # outdated: not kept while it is asked again
            until = tenant.index.next_change(now)
        if embedder is not None:
            # One this process made or read lately (a job's every run recalls with its
            # goal), or another worker's: ranked by meaning at once, not first ranked to
            # learn that a vector is wanted.
            query_vector = self._known_vector(embedder, query, probed[3] if shared else None)
        while True:
            found = self._rank(
                ctx.tenant, embedder, wanted, query_vector, ranking, visible, min_authority,
                kinds, enough, probed,
            )  # fmt: skip
            if found is None:
                # There is something to score by meaning: embed the query (outside the
                # index's lock, ~10-70 ms of CPU) and rank again. With nothing in reach, a
                # search costs no embedding at all.
                assert embedder is not None
                query_vector = self._vector(embedder, query, ctx.tenant, share=shared)
                continue
            ranked, more = found
            if not ranked:
                return self._keep_found(asked, stamp, until, tenant, [])
            now, served = ranked[0][2], ranked[0][3]
            hits: list[Hit] = []
            step = max(k * 2, 8)
            for start in range(0, len(ranked), step):
                chunk = ranked[start : start + step]
                read = self._read_back(ctx.tenant, [hit[0] for hit in chunk])
                fresh = self._still_current(ctx, read, now, operator)
                for item_id, score, _, _ in chunk:
                    item = fresh.get(item_id)
                    if item is not None:
                        hits.append(Hit(item, score, served, now))
                        if len(hits) == k:
                            return self._keep_found(asked, stamp, until, tenant, hits)
            if not more:
                return self._keep_found(asked, stamp, until, tenant, hits)
            enough *= 4  # the best ones changed since the index saw them: look further
            probed = ()  # and at the index as it is now

    def _known_vector(
        self, embedder: Embedder, query: str, stored: bytes | None = None
    ) -> np.ndarray | None:
        """The query's vector without embedding it: made or read by this process while it is
        among the last ``QUERY_VECTORS`` asked for, or a worker's (``stored``, read by
        ``probe``, kept in Redis ``QUERY_VECTOR_TTL_S``); None if it must be made."""
        key = (embedder.name, query)
        with self._lock:
            found = self._vectors.get(key)
            if found is not None:
                self._vectors.move_to_end(key)
                return found
        if stored is None:
            return None
        return self._keep(key, np.frombuffer(stored, dtype=np.float32))

    def _vector(
        self, embedder: Embedder, query: str, tenant: str, *, share: bool = False
    ) -> np.ndarray:
        """The query's vector, embedded now (~10-70 ms of CPU); with ``share``, kept in
        Redis for the other workers asking it."""
        made = embedder.embed([query])[0].astype(np.float32)
        if share:
            where = keys.memory_query_vector(tenant, embedder.name, query)
            self.client.set(where, made.tobytes(), ex=QUERY_VECTOR_TTL_S)
        return self._keep((embedder.name, query), made)

    def _keep(self, key: tuple[str, str], vector: np.ndarray) -> np.ndarray:
        with self._lock:
            self._vectors[key] = vector
            while len(self._vectors) > QUERY_VECTORS:
                self._vectors.popitem(last=False)
        return vector

    def _rank(
        self,
        name: str,
        embedder: Embedder | None,
        wanted: list[str],
        query_vector: np.ndarray | None,
        ranking: Ranking,
        visible: Sequence[str] | None,
        min_authority: int,
        kinds: Sequence[str],
        enough: int,
        probed: Sequence[Any] = (),
    ) -> tuple[list[tuple[str, float, int, str]], bool] | None:
        """The ``enough`` best candidates (and any tying with the last), best first, each
        with Redis's time and the ranking that served; and whether there are more.

        None: the index has items the filters let through and vectors to rank them by,
        but no ``query_vector`` was given (the caller embeds the query and asks again)."""
        # The index changes in place as the tenant's memory does: another task slot of this
        # process must not score it halfway through (hits are re-read outside).
        with self._lock:
            tenant, now = self._refresh(name, embedder, probed)
            index = tenant.index
            if not len(index):
                return [], False
            mask = index.mask(now, scopes=visible, min_authority=min_authority, kinds=kinds)
            if not mask.any():
                return [], False
            alike = None
            if embedder is not None and ranking != "keyword" and index.dim and not tenant.embedding:
                if query_vector is None:
                    return None
                alike = index.alike(query_vector)
            if alike is None:
                ranking = "keyword"
            keyword = index.bm25(wanted) if ranking != "dense" else None
            scores = keyword if ranking == "keyword" else _fused(mask, keyword, alike)
            assert scores is not None
            candidates = np.nonzero(mask & (scores > 0))[0]
            best = _best(candidates, scores[candidates], enough)
            ranked = sorted(
                ((index.ids[s], float(scores[s])) for s in best), key=lambda h: (-h[1], h[0])
            )
        assert embedder is not None or ranking == "keyword"
        served = "keyword" if ranking == "keyword" else f"{ranking}:{embedder.name}"
        return [(i, score, now, served) for i, score in ranked], len(best) < len(candidates)

    def _read_back(self, name: str, ids: list[str]) -> list[MemoryItem]:
        """The items of ``ids`` as Redis holds them: read back, except those this process
        read since the tenant last changed (as of the search's refresh)."""
        with self._lock:
            tenant = self._tenants[name]
            version = (tenant.last_change, tenant.generation)
            if tenant.items_at != version:
                tenant.items, tenant.items_at = {}, version
            kept = {i: tenant.items[i] for i in ids if i in tenant.items}
        missing = [i for i in ids if i not in kept]
        if missing:
            read = self.store.read_many(name, missing)
            kept.update((item.id, item) for item in read)
            with self._lock:
                if tenant.items_at == version and len(tenant.items) < ITEMS_KEPT:
                    tenant.items.update((item.id, item) for item in read)
        return [kept[i] for i in ids if i in kept]

    @staticmethod
    def _still_current(
        ctx: MemoryContext, items: list[MemoryItem], now: int, operator: bool
    ) -> dict[str, MemoryItem]:
        """The ``items`` that are current, unexpired and visible at ``now``."""
        return {
            item.id: item
            for item in items
            if item.holds(now) and not item.stale(now) and ctx.sees(item.scope, operator=operator)
        }

    def _keep_found(
        self,
        asked: tuple[Any, ...],
        stamp: tuple[Any, ...],
        until: int,
        tenant: _Tenant,
        hits: list[Hit],
    ) -> list[Hit]:
        """``hits``, kept for the same search asked again while ``stamp`` holds: the index
        as it was ranked (no change taken in since), the forget generation and whether it
        was being embedded; and Redis time before ``until`` (0: any), when an item would
        expire, fall due or come out of a shadow. Not kept if the index changed while they
        were ranked and read back (another task slot's search took changes in, or this one
        looked further, at a newer index)."""
        with self._lock:
            if (tenant.index.version, tenant.generation, tenant.embedding) == stamp:
                self._found[asked] = _Found(stamp, until, tuple(hits))
                self._found.move_to_end(asked)
                while len(self._found) > SEARCHES_KEPT:
                    self._found.popitem(last=False)
        return hits

    # ----------------------------------------------------------------- refresh

    def probe(self, pipe: redis.client.Pipeline, tenant: str, query: str = "") -> None:
        """Queue on ``pipe`` the reads a search of ``tenant`` starts from — Redis's time, the
        forget generation, the last change, and ``query``'s vector if a worker stored
        one — for ``search``'s ``probed``."""
        pipe.time()
        pipe.get(keys.memory_forgets(tenant))
        pipe.xrevrange(keys.memory_changes(tenant), count=1)
        embedder = self.embedder if query else None
        if embedder is not None:
            pipe.get(keys.memory_query_vector(tenant, embedder.name, query))

    def _probe(self, tenant: str) -> list[Any]:
        """``probe``'s reads (no query's vector), in a round trip of their own."""
        pipe = self.client.pipeline(transaction=False)
        self.probe(pipe, tenant)
        return pipe.execute()

    def _refresh(
        self, name: str, embedder: Embedder | None, probed: Sequence[Any] = ()
    ) -> tuple[_Tenant, int]:
        """The tenant's index with every change taken in, and Redis's time (ms), in one
        round trip when nothing changed (none, with ``probe``'s replies: ``probed``)."""
        stream = keys.memory_changes(name)
        if not probed:
            probed = self._probe(name)
        (seconds, micros), forgets, last = probed[:3]
        now = seconds * 1000 + micros // 1000
        generation = forgets.decode() if forgets else "0"
        last_id = last[0][0].decode() if last else ""
        tenant = self._tenants.get(name)
        if tenant is None:
            tenant = self._tenants[name] = self._load(name) or _Tenant()
        if generation != tenant.generation:
            # A forget: no kept search of the tenant is served again (``_found``), and none
            # keeps the text of what was forgotten in this process's memory either.
            for asked in [a for a in self._found if a[0] == name]:
                del self._found[asked]
        tenant.generation = generation
        # The vectors the index keeps: this embedder's; without one (a keyword search), the
        # ones it has.
        embedded = tenant.embedded if embedder is None else embedder.name
        if tenant.built and last_id == tenant.last_change and embedded == tenant.embedded:
            return tenant, now
        changed: set[str] | None = None
        if tenant.built and tenant.last_change:
            oldest = self.client.xrange(stream, count=1)
            if oldest and _stream_id(oldest[0][0].decode()) <= _stream_id(tenant.last_change):
                entries = self.client.xrange(stream, min=f"({tenant.last_change}", max=last_id)
                changed = {fields[b"id"].decode() for _, fields in entries}
        if changed is None:  # first use, or the stream was trimmed past what we saw
            tenant.index = TenantIndex()
            tenant.changes = tenant.snapshot_at = 0
            changed = {i.decode() for i in self.client.zrange(keys.memory_items(name), 0, -1)}
        if embedded != tenant.embedded:
            tenant.index.drop_vectors()
            changed |= set(tenant.index.slot)  # read again, with their vectors
        self._take_in(name, tenant.index, sorted(changed), embedded)
        tenant.last_change, tenant.built, tenant.embedded = last_id, True, embedded
        tenant.changes += len(changed)
        if embedder is not None:
            self._fill(name, tenant, embedder)
        if len(tenant.index) >= SNAPSHOT_ITEMS and tenant.changes - tenant.snapshot_at >= max(
            SNAPSHOT_ITEMS, len(tenant.index) // 4
        ):
            self._save(name, tenant, generation)
        return tenant, now

    def _take_in(self, name: str, index: TenantIndex, ids: list[str], embedded: str) -> None:
        """Read ``ids`` again and index them as they are now (gone: removed), with their
        vectors of the embedder named ``embedded``."""
        pipe = self.client.pipeline(transaction=False)
        for item_id in ids:
            pipe.hmget(keys.memory_item(name, item_id), *_FIELDS)
        for item_id, row in zip(ids, pipe.execute(), strict=True):
            if row[0] is None:
                index.remove(item_id)
                continue
            text, key, scope, status, valid_until, reverify_after, authority, kind, shadow = (
                (v or b"").decode() for v in row[:9]
            )
            ours = embedded and row[9] is not None and row[9].decode() == embedded
            index.put(
                item_id,
                Row(
                    terms=terms(f"{key} {text}"),
                    scope=scope,
                    current=status == "current",
                    valid_until=int(valid_until or 0),
                    reverify_after=int(reverify_after or 0),
                    authority=int(authority),
                    kind=kind,
                    shadowed_until=int(shadow or 0),
                    vector=np.frombuffer(row[10], dtype=np.float32) if ours else None,
                ),
            )

    def _fill(self, name: str, tenant: _Tenant, embedder: Embedder) -> None:
        """Embed the tenant's items that have no vector of ``embedder``: a few now, many in
        the background."""
        missing = tenant.index.missing_count()
        if not missing or tenant.embedding:
            return
        if missing <= EMBED_NOW:
            self._embed(name, tenant.index, tenant.index.missing_vectors(), embedder)
        else:
            tenant.embedding = True
            threading.Thread(
                target=self._embed_all, args=(name, tenant, embedder), daemon=True
            ).start()

    def _embed(self, name: str, index: TenantIndex, ids: list[str], embedder: Embedder) -> None:
        """Embed ``ids`` and store their vectors back on those that still exist, so that no
        other process embeds them again; then into ``index``."""
        pipe = self.client.pipeline(transaction=False)
        for item_id in ids:
            pipe.hmget(keys.memory_item(name, item_id), "key", "text")
        found = [
            (item_id, embedded_text(key.decode(), text.decode()))
            for item_id, (key, text) in zip(ids, pipe.execute(), strict=True)
            if text is not None
        ]
        vectors = embedder.embed([text for _, text in found])
        where = keys.script_keys("memoryVector", tenant=name)
        for start in range(0, len(found), 256):  # a few hundred items a call
            args: list[str | bytes] = [embedder.name]
            for (item_id, _), vector in zip(
                found[start : start + 256], vectors[start : start + 256], strict=True
            ):
                args += [item_id, vector.astype(np.float32).tobytes()]
            run_plain(self.client, "memoryVector", where, args)
        for (item_id, _), vector in zip(found, vectors, strict=True):
            if item_id in index.slot:
                index.set_vector(item_id, vector)

    def _embed_all(self, name: str, tenant: _Tenant, embedder: Embedder) -> None:
        """Embed a tenant's items in the background, a batch at a time, until every one has a
        vector of ``embedder``; searches meanwhile rank by keywords."""
        try:
            while True:
                with self._lock:
                    index = tenant.index
                    todo = index.missing_vectors()[:256]
                if not todo or tenant.embedded != embedder.name:
                    return
                batch = TenantIndex()  # embedded apart, then moved in under the lock
                for item_id in todo:
                    batch.put(item_id, Row((), "", False, 0, 0, 0, ""))
                self._embed(name, batch, todo, embedder)
                with self._lock:
                    for item_id in todo:
                        slot = batch.slot[item_id]
                        if item_id in index.slot and batch.has_vector[slot]:
                            index.set_vector(item_id, batch.vectors[slot])
                        elif item_id in index.slot:
                            index.remove(item_id)  # forgotten meanwhile
        finally:
            tenant.embedding = False

    # ---------------------------------------------------------------- snapshot

    def _load(self, name: str) -> _Tenant | None:
        """The tenant's index from its snapshot in Redis, if there is one that is still
        good: made under the current forget generation, and of changes the stream still
        holds after it (else the index is built from the items)."""
        where = keys.memory_index(name)
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(where, "upto", "generation")
        pipe.get(keys.memory_forgets(name))
        pipe.xrange(keys.memory_changes(name), count=1)
        (upto, generation), forgets, oldest = pipe.execute()
        if upto is None or generation != (forgets or b"0"):
            return None
        if not oldest or _stream_id(oldest[0][0].decode()) > _stream_id(upto.decode()):
            return None
        blob, embedder = self.client.hmget(where, "blob", "embedder")
        if blob is None:
            return None
        tenant = _Tenant(index=TenantIndex.from_bytes(blob), last_change=upto.decode(), built=True)
        tenant.embedded = (embedder or b"").decode()
        return tenant

    def _save(self, name: str, tenant: _Tenant, generation: str) -> None:
        res = run_plain(
            self.client,
            "memoryIndex",
            keys.script_keys("memoryIndex", tenant=name),
            [generation, tenant.last_change, tenant.embedded, len(tenant.index),
             tenant.index.to_bytes()],
        )  # fmt: skip
        if res.data["stored"] or res.data["why"] == "older":
            tenant.snapshot_at = tenant.changes


def _best(candidates: np.ndarray, values: np.ndarray, enough: int) -> np.ndarray:
    """The ``enough`` best of ``candidates`` by ``values``, and every one tying with the last
    of them (ties are then broken by item id, the same in every process)."""
    if len(candidates) <= enough:
        return candidates
    bar = np.partition(values, -enough)[-enough]
    return candidates[values >= bar]


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
