"""A tenant's recall index in one process: BM25 postings, filter columns and vectors, by slot.

Every item has a slot; what recall filters by (current or not, expiry,
re-verification time, authority, scope, kind) is a numpy column over the
slots, and what it ranks by is a term's postings (the slots holding it and
how often) and a matrix of vectors. A query is then a few array operations
whatever the tenant's size — no Python pass over its items — and a write
changes its item's slot and the postings of its own terms, nothing else.

Why not bm25s's index: it is built once, so a write would mean re-indexing
(the tenant, or a shard of it). The scores here are bm25s's ``lucene``
variant all the same (k1 1.5, b 0.75, each query term counted as often as it
is asked), so rankings measured with bm25s hold (``tests/test_memory_scale``
compares them).

``to_bytes``/``from_bytes`` are the snapshot recall keeps in Redis
(``Recall``), so that a process that starts — a CLI call — loads the index
instead of reading and indexing every item.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

K1, B = 1.5, 0.75
# Each change of any index in the process takes the next number (``TenantIndex.version``).
_VERSIONS = itertools.count(1)


@dataclass(frozen=True)
class Row:
    """What the index keeps of one item."""

    terms: Sequence[str]
    scope: str
    current: bool
    valid_until: int
    reverify_after: int
    authority: int
    kind: str
    shadowed_until: int = 0  # a temporary value holds instead until then (ms)
    vector: np.ndarray | None = None  # unit length, of the index's embedder


class TenantIndex:
    def __init__(self) -> None:
        self.ids: list[str] = []  # by slot; "" a free slot
        self.slot: dict[str, int] = {}
        self._free: list[int] = []
        self._terms: dict[int, tuple[str, ...]] = {}  # a slot's distinct terms
        self.postings: dict[str, tuple[array, array]] = {}  # term -> (slots, counts)
        self._total_length = 0.0
        self.scopes: dict[str, int] = {}  # code of each scope and kind seen
        self.kinds: dict[str, int] = {}
        self._cap = 0
        self.dim = 0
        self.alive = np.zeros(0, dtype=bool)
        self.current = np.zeros(0, dtype=bool)
        self.valid_until = np.zeros(0, dtype=np.int64)
        self.reverify_after = np.zeros(0, dtype=np.int64)
        self.shadowed_until = np.zeros(0, dtype=np.int64)
        self.authority = np.zeros(0, dtype=np.int8)
        self.scope = np.zeros(0, dtype=np.int32)
        self.kind = np.zeros(0, dtype=np.int32)
        self.length = np.zeros(0, dtype=np.float32)
        self.has_vector = np.zeros(0, dtype=bool)
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        # Unique in the process and new at every change, so that what was ranked on this
        # index is known to be still what it would rank (``Recall``'s kept hits).
        self.version = next(_VERSIONS)

    def __len__(self) -> int:
        return len(self.slot)

    # ---------------------------------------------------------------- changes

    def put(self, item_id: str, row: Row) -> None:
        """Index ``item_id`` as ``row`` says, in its slot (a new one if it has none)."""
        self.version = next(_VERSIONS)
        slot = self.slot.get(item_id)
        # An item's text never changes (a forget removes the item): an item indexed
        # before changes only its columns (superseded, re-verified, restored).
        if slot is None:
            slot = self._take(item_id)
            counts = Counter(row.terms)
            for term, count in counts.items():
                slots, tfs = self.postings.setdefault(term, (array("i"), array("f")))
                slots.append(slot)
                tfs.append(count)
            self._terms[slot] = tuple(counts)
            self.length[slot] = len(row.terms)
            self._total_length += len(row.terms)
        self.alive[slot] = True
        self.current[slot] = row.current
        self.valid_until[slot] = row.valid_until
        self.reverify_after[slot] = row.reverify_after
        self.shadowed_until[slot] = row.shadowed_until
        self.authority[slot] = row.authority
        self.scope[slot] = self.scopes.setdefault(row.scope, len(self.scopes))
        self.kind[slot] = self.kinds.setdefault(row.kind, len(self.kinds))
        self.set_vector(item_id, row.vector)

    def set_vector(self, item_id: str, vector: np.ndarray | None) -> None:
        self.version = next(_VERSIONS)
        slot = self.slot[item_id]
        if vector is None or (self.dim and len(vector) != self.dim):
            self.has_vector[slot] = False
            return
        if not self.dim:
            self.dim = len(vector)
            self.vectors = np.zeros((self._cap, self.dim), dtype=np.float32)
        self.vectors[slot] = vector
        self.has_vector[slot] = True

    def remove(self, item_id: str) -> None:
        """Drop ``item_id`` and every trace of it: its postings, its vector, its slot."""
        slot = self.slot.pop(item_id, None)
        if slot is None:
            return
        self.version = next(_VERSIONS)
        self._unpost(slot)
        self.ids[slot] = ""
        self.alive[slot] = self.current[slot] = self.has_vector[slot] = False
        if self.dim:
            self.vectors[slot] = 0.0
        self._free.append(slot)

    def drop_vectors(self) -> None:
        """Forget every vector (the embedder changed): the rows are made again."""
        self.version = next(_VERSIONS)
        self.dim = 0
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        self.has_vector[:] = False

    def _take(self, item_id: str) -> int:
        if self._free:
            slot = self._free.pop()
            self.ids[slot] = item_id
        else:
            slot = len(self.ids)
            self.ids.append(item_id)
            if slot >= self._cap:
                self._grow(max(64, self._cap * 2))
        self.slot[item_id] = slot
        return slot

    def _grow(self, cap: int) -> None:
        for name in ("alive", "current", "valid_until", "reverify_after", "shadowed_until",
                     "authority", "scope", "kind", "length", "has_vector"):  # fmt: skip
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        if self.dim:
            vectors = np.zeros((cap, self.dim), dtype=np.float32)
            vectors[: self._cap] = self.vectors
            self.vectors = vectors
        self._cap = cap

    def _unpost(self, slot: int) -> None:
        for term in self._terms.pop(slot, ()):
            slots, tfs = self.postings[term]
            keep = np.frombuffer(slots, dtype=np.int32) != slot
            if keep.all():
                continue
            if not keep.any():
                del self.postings[term]  # a word only the removed item had leaves no trace
                continue
            kept_slots = array("i", np.frombuffer(slots, dtype=np.int32)[keep].tobytes())
            kept_tfs = array("f", np.frombuffer(tfs, dtype=np.float32)[keep].tobytes())
            self.postings[term] = (kept_slots, kept_tfs)
        self._total_length -= float(self.length[slot])
        self.length[slot] = 0.0

    # ---------------------------------------------------------------- queries

    def mask(
        self,
        now: int,
        *,
        scopes: Sequence[str] | None,
        min_authority: int = 0,
        kinds: Sequence[str] = (),
    ) -> np.ndarray:
        """The slots recall may serve: current, unexpired, not shadowed, not due for
        re-verification (by ``now``, Redis time), of ``scopes`` (None: any),
        ``min_authority`` and ``kinds``."""
        n = len(self.ids)
        valid, reverify = self.valid_until[:n], self.reverify_after[:n]
        out = (
            self.alive[:n]
            & self.current[:n]
            & ((valid == 0) | (now < valid))
            & ((reverify == 0) | (now < reverify))
            & (self.shadowed_until[:n] <= now)
            & (self.authority[:n] >= min_authority)
        )
        if scopes is not None:
            out &= np.isin(self.scope[:n], [self.scopes[s] for s in scopes if s in self.scopes])
        if kinds:
            out &= np.isin(self.kind[:n], [self.kinds[k] for k in kinds if k in self.kinds])
        return out

    def next_change(self, now: int) -> int:
        """The first time after ``now`` (ms) at which ``mask`` may change by time alone — an
        item expires, falls due for re-verification or comes out of a shadow — or 0: never."""
        n = len(self.ids)
        alive = self.alive[:n]
        times = np.concatenate(
            [self.valid_until[:n][alive], self.reverify_after[:n][alive],
             self.shadowed_until[:n][alive]]
        )  # fmt: skip
        later = times[times > now]
        return int(later.min()) if later.size else 0

    def bm25(self, query: Sequence[str]) -> np.ndarray:
        """Each slot's BM25 score for ``query`` (bm25s's lucene variant), 0 where no term is."""
        n = len(self.ids)
        out = np.zeros(n, dtype=np.float64)
        docs = len(self.slot)
        if not docs:
            return out
        norm = K1 * ((1 - B) + B * self.length[:n].astype(np.float64) / (self._total_length / docs))
        for term in query:
            found = self.postings.get(term)
            if found is None:
                continue
            slots = np.frombuffer(found[0], dtype=np.int32)
            tfs = np.frombuffer(found[1], dtype=np.float32).astype(np.float64)
            idf = math.log(1 + (docs - len(slots) + 0.5) / (len(slots) + 0.5))
            out[slots] += idf * tfs / (norm[slots] + tfs)
        # Rounded, so that sums taken in another order (another process's slots) tie alike.
        return np.round(out, 6)

    def alike(self, vector: np.ndarray) -> np.ndarray | None:
        """Each slot's cosine with ``vector`` (0 for a slot without one); None if the index
        holds no vectors of that length."""
        if not self.dim or len(vector) != self.dim:
            return None
        return self.vectors[: len(self.ids)] @ vector

    def missing_count(self) -> int:
        n = len(self.ids)
        return int(np.count_nonzero(self.alive[:n] & ~self.has_vector[:n]))

    def missing_vectors(self) -> list[str]:
        """The items that have no vector of the index's embedder."""
        n = len(self.ids)
        return [self.ids[s] for s in np.nonzero(self.alive[:n] & ~self.has_vector[:n])[0]]

    # --------------------------------------------------------------- snapshot

    def to_bytes(self) -> bytes:
        """The index as one blob: only live items, and only the words and scopes they hold."""
        live = [s for s in range(len(self.ids)) if self.ids[s]]
        renumber = np.full(len(self.ids) + 1, -1, dtype=np.int32)
        renumber[live] = np.arange(len(live), dtype=np.int32)
        vocab = sorted(self.postings)
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        slots, tfs = [], []
        for n, term in enumerate(vocab):
            found_slots, found_tfs = self.postings[term]
            slots.append(renumber[np.frombuffer(found_slots, dtype=np.int32)])
            tfs.append(np.frombuffer(found_tfs, dtype=np.float32))
            indptr[n + 1] = indptr[n] + len(found_slots)
        scopes = sorted({s for s, c in self.scopes.items() if np.any(self.scope[live] == c)})
        kinds = sorted({k for k, c in self.kinds.items() if np.any(self.kind[live] == c)})
        scope_at = np.array([scopes.index(s) if s in scopes else -1 for s in self.scopes])
        kind_at = np.array([kinds.index(k) if k in kinds else -1 for k in self.kinds])
        meta = {"ids": [self.ids[s] for s in live], "scopes": scopes, "kinds": kinds}
        meta["vocab"] = vocab
        buffer = io.BytesIO()
        np.savez(
            buffer,
            meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            current=self.current[live],
            valid_until=self.valid_until[live],
            reverify_after=self.reverify_after[live],
            shadowed_until=self.shadowed_until[live],
            authority=self.authority[live],
            scope=scope_at[self.scope[live]].astype(np.int32),
            kind=kind_at[self.kind[live]].astype(np.int32),
            length=self.length[live],
            has_vector=self.has_vector[live],
            vectors=self.vectors[live] if self.dim else np.zeros((0, 0), dtype=np.float32),
            indptr=indptr,
            slots=np.concatenate(slots) if slots else np.zeros(0, dtype=np.int32),
            tfs=np.concatenate(tfs) if tfs else np.zeros(0, dtype=np.float32),
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes) -> TenantIndex:
        data = np.load(io.BytesIO(blob))
        meta = json.loads(data["meta"].tobytes())
        index = cls()
        ids: list[str] = meta["ids"]
        index._grow(max(64, len(ids)))
        index.ids = list(ids)
        index.slot = {item_id: slot for slot, item_id in enumerate(ids)}
        n = len(ids)
        index.alive[:n] = True
        for name in ("current", "valid_until", "reverify_after", "shadowed_until", "authority",
                     "scope", "kind", "length", "has_vector"):  # fmt: skip
            getattr(index, name)[:n] = data[name]
        index.scopes = {s: c for c, s in enumerate(meta["scopes"])}
        index.kinds = {k: c for c, k in enumerate(meta["kinds"])}
        index._total_length = float(index.length[:n].sum())
        vectors = data["vectors"]
        if vectors.size:
            index.dim = vectors.shape[1]
            index.vectors = np.zeros((index._cap, index.dim), dtype=np.float32)
            index.vectors[:n] = vectors
        indptr, slots, tfs = data["indptr"], data["slots"], data["tfs"]
        vocab: list[str] = meta["vocab"]
        by_slot: list[list[str]] = [[] for _ in range(n)]
        for t, term in enumerate(vocab):
            held = slots[indptr[t] : indptr[t + 1]]
            counts = tfs[indptr[t] : indptr[t + 1]]
            index.postings[term] = (array("i", held.tobytes()), array("f", counts.tobytes()))
            for slot in held.tolist():
                by_slot[slot].append(term)
        index._terms = {slot: tuple(terms) for slot, terms in enumerate(by_slot)}
        return index
