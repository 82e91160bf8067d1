"""Artifacts: content stored once in Redis, passed around by reference.

Tasks, envelopes and model contexts carry an ``ArtifactRef`` — id, kind, size,
title, a short preview, sha256, source and trust — never the payload. The
content is addressed by its hash within a job, so storing the same bytes twice
yields the same reference. A forget that reaches an artifact replaces it by
a redacted copy under the copy's own address; the old id then leads to the
copy, and storing the old content again stores nothing. Content from outside (web pages, files, tool
output) is ``untrusted``: it is data, never instructions.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import redis
from pydantic import BaseModel, ConfigDict, Field

from . import keys
from .errors import NotFound, shown
from .scripts import ScriptResult, run_plain

if TYPE_CHECKING:
    from .memory.quotes import Quotes
    from .scripts import Runner

PREVIEW_CHARS = 600
_HOPS = 8  # redactions followed from an id (each forget that reached it adds one)
ORPHAN_TTL_S = 24 * 3600  # an artifact written for a job whose record is gone


class Trust(StrEnum):
    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class ArtifactRef(BaseModel):
    """A handle to stored content: what a context or a message carries instead of it."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: str
    bytes: int
    title: str = ""
    preview: str = Field(default="", max_length=PREVIEW_CHARS)
    sha256: str
    source: str = ""
    trust: Trust = Trust.UNTRUSTED

    def handle(self) -> str:
        """The one-line form a context shows in place of the content."""
        return f"[artifact {self.id} {self.kind} {self.bytes}B {self.trust.value}: {self.title}]"


# The fields of an artifact's hash that make its handle (all but its content).
_REF_FIELDS = list(ArtifactRef.model_fields)


def _ref(raw: list[bytes | None]) -> ArtifactRef | None:
    """The handle from an HMGET of ``_REF_FIELDS`` (None: no such artifact)."""
    fields = {k: v.decode() for k, v in zip(_REF_FIELDS, raw, strict=True) if v is not None}
    return ArtifactRef.model_validate(fields) if fields else None


class ArtifactNotFound(NotFound):
    def __init__(self, artifact_id: str) -> None:
        super().__init__(f"no artifact {shown(artifact_id)} (unknown, or expired)")
        self.artifact_id = artifact_id


def _stored(res: ScriptResult | redis.ResponseError) -> None:
    """A riding put's answer: an error reply (OOM, READONLY) raises at the write that
    carried it."""
    if isinstance(res, redis.ResponseError):
        raise res


def make_ref(content: str, *, kind: str, title: str, source: str, trust: Trust) -> ArtifactRef:
    data = content.encode()
    digest = hashlib.sha256(data).hexdigest()
    return ArtifactRef(
        id=f"a-{digest[:16]}",
        kind=kind,
        bytes=len(data),
        title=title[:200],
        preview=content[:PREVIEW_CHARS],
        sha256=digest,
        source=source,
        trust=trust,
    )


class ArtifactSink(Protocol):
    """Where content goes when a context keeps only its handle."""

    def put(
        self,
        content: str,
        *,
        kind: str,
        title: str = "",
        source: str = "",
        trust: Trust = Trust.UNTRUSTED,
    ) -> ArtifactRef: ...

    def text(self, artifact_id: str) -> str: ...


class MemoryArtifacts:
    """An in-process artifact store, for offline runs (the token-economy benchmark)."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[ArtifactRef, str]] = {}

    def put(
        self,
        content: str,
        *,
        kind: str,
        title: str = "",
        source: str = "",
        trust: Trust = Trust.UNTRUSTED,
    ) -> ArtifactRef:
        ref = make_ref(content, kind=kind, title=title, source=source, trust=trust)
        self._items.setdefault(ref.id, (ref, content))
        return self._items[ref.id][0]

    def text(self, artifact_id: str) -> str:
        try:
            return self._items[artifact_id][1]
        except KeyError:
            raise ArtifactNotFound(artifact_id) from None

    def refs(self) -> list[ArtifactRef]:
        return [ref for ref, _ in self._items.values()]


class ArtifactStore:
    """The artifacts of one job, in Redis: kept while the job runs, however long it takes.

    Their expiry starts when the job finishes (``JobStore`` sets it with the
    job's other keys), never at write time: a long job never loses its
    feature list or inputs to a retention shorter than itself.
    """

    def __init__(
        self, client: redis.Redis, job_id: str, runner: Runner | None = None, *, ride: bool = False
    ) -> None:
        """``ride``: each ``put`` goes with the calling thread's next write through
        ``runner`` (``Runner.ride``), not in a round trip of its own — for a task's
        run, whose every end is such a write (its completion, spawn, failure) and
        whose next model call is one (the reservation). What refers to an artifact
        reaches Redis in that write or after it; a read through this store sends
        what rides first, so a thread always reads what it stored."""
        self.client = client
        self.job_id = job_id
        self.runner = runner
        self.ride = ride and runner is not None

    def put(
        self,
        content: str,
        *,
        kind: str,
        title: str = "",
        source: str = "",
        trust: Trust = Trust.UNTRUSTED,
    ) -> ArtifactRef:
        """Its handle; of its redacted copy when a forget redacted this content (a put
        that rides answers with the handle of what was asked: reads of it lead to the copy)."""
        ref = make_ref(content, kind=kind, title=title, source=source, trust=trust)
        fields = {**ref.model_dump(mode="json"), "content": content}
        # One call: the write, its index entry at Redis time, and the expiry the job's
        # state calls for (see storeArtifact).
        where = keys.script_keys("storeArtifact", self.job_id, artifact_id=ref.id)
        args = [ref.id, ORPHAN_TTL_S, *(x for kv in fields.items() for x in kv)]
        if self.ride and self.runner is not None:
            self.runner.ride([("storeArtifact", self.job_id, where, args)], _stored)
            return ref
        res = run_plain(self.client, "storeArtifact", where, args)
        if "redacted_to" in res.data:  # content a forget redacted: its copy stands
            return self.get(res.data["redacted_to"])
        return ref

    def get(self, artifact_id: str) -> ArtifactRef:
        """The artifact's handle, its content not read (it may be megabytes); of its
        redacted copy, when a forget redacted it."""
        ref = _ref(self._read(artifact_id, _REF_FIELDS))
        if ref is None:
            raise ArtifactNotFound(artifact_id)
        return ref

    def text(self, artifact_id: str) -> str:
        return self.content(artifact_id).decode()

    def content(self, artifact_id: str) -> bytes:
        """The content's bytes as stored (``text`` decodes them)."""
        (content,) = self._read(artifact_id, ["content"])
        if content is None:
            raise ArtifactNotFound(artifact_id)
        return content

    def refs(self, ids: list[str]) -> dict[str, ArtifactRef]:
        """The handles of ``ids`` that exist (by the id asked for), in a round trip or two."""
        found = self._read_many(ids, _REF_FIELDS)
        return {i: ref for i in ids if (ref := _ref(found[i])) is not None}

    def contents(self, ids: list[str]) -> dict[str, bytes]:
        """The content of each of ``ids`` that exists (by the id asked for)."""
        found = self._read_many(ids, ["content"])
        return {i: data for i in ids if (data := found[i][0]) is not None}

    def _read(self, artifact_id: str, fields: list[str]) -> list[bytes | None]:
        return self._read_many([artifact_id], fields)[artifact_id]

    def _read_many(self, ids: list[str], fields: list[str]) -> dict[str, list[bytes | None]]:
        """``fields`` of each artifact, following a forget's redaction to its copy."""
        if self.runner is not None:
            self.runner.flush()  # what this thread stored and still rides: read it back
        out: dict[str, list[bytes | None]] = {i: [None] * len(fields) for i in ids}
        where = {i: i for i in ids}  # asked for -> where it is read now
        for _ in range(_HOPS):
            if not where:
                break
            pipe = self.client.pipeline(transaction=False)
            for now in where.values():
                pipe.hmget(keys.artifact(self.job_id, now), [*fields, "redacted_to"])
            moved: dict[str, str] = {}
            for asked, (*values, copy) in zip(where, pipe.execute(), strict=True):
                if copy is None:
                    out[asked] = values
                else:
                    moved[asked] = copy.decode()
            where = moved
        return out

    def redact(self, artifact_id: str, quotes: Quotes, *, apply: bool = True) -> str:
        """Replace the artifact by a copy with ``quotes`` redacted, under its own content
        address (``redactArtifact``); the copy's id ("" when nothing quoted them, or
        another forget replaced it first). With ``apply`` false, what the copy's id
        would be; nothing is written."""
        raw = self.client.hgetall(keys.artifact(self.job_id, artifact_id))
        if b"content" not in raw:
            return ""
        read = {k.decode(): v.decode(errors="replace") for k, v in raw.items()}
        clean = {name: quotes.scrub(read.get(name, "")) for name in ("content", "title")}
        if clean["content"] == read["content"] and clean["title"] == read.get("title", ""):
            return ""
        copy = make_ref(
            clean["content"],
            kind=read["kind"],
            title=clean["title"],
            source=quotes.scrub(read.get("source", "")),
            trust=Trust(read.get("trust", Trust.UNTRUSTED)),
        )
        if apply:
            fields = {**copy.model_dump(mode="json"), "content": clean["content"]}
            res = run_plain(
                self.client,
                "redactArtifact",
                [
                    *keys.script_keys("redactArtifact", self.job_id, artifact_id=artifact_id),
                    keys.artifact(self.job_id, copy.id),
                ],
                [artifact_id, copy.id, read["sha256"], *(x for kv in fields.items() for x in kv)],
            )
            if not int(res.data["replaced"]):  # another forget got there first
                return ""
        return copy.id

    def stored_ms(self) -> dict[str, int]:
        """Artifact id -> when it was last stored (ms), oldest first (``list``'s order)."""
        ranked = self.client.zrange(keys.artifacts(self.job_id), 0, -1, withscores=True)
        return {artifact_id.decode(): int(at) for artifact_id, at in ranked}

    def latest(self, kind: str) -> ArtifactRef | None:
        """The artifact of ``kind`` stored last, if any."""
        return next((r for r in reversed(self.list()) if r.kind == kind), None)

    def list(self) -> list[ArtifactRef]:
        ids = [i.decode() for i in self.client.zrange(keys.artifacts(self.job_id), 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for artifact_id in ids:
            pipe.hmget(keys.artifact(self.job_id, artifact_id), _REF_FIELDS)
        return [ref for raw in pipe.execute() if (ref := _ref(raw)) is not None]
