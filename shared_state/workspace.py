"""Workspaces: the files a job is submitted with, and what its coders changed.

A workspace is imported once per tenant by content: each distinct file is a
blob under its sha256 (``rf:ws:{tenant}:blob:<sha256>``), and a snapshot of the
tree — path -> sha256, size, mode, text or binary — is a hash named by the
digest of its own entries (the tree id). A job carries the tree id as its
base; importing the same repository again sends only the blobs Redis lacks,
and the same tree id comes back. Blobs and trees expire ``BLOB_TTL_S`` after
the last import that named them.

What the coders change lives in the job's own ``workspace`` hash (path ->
artifact id, or ``""`` for a deleted file, written through ``ownerWrite``);
``Workspace`` is the job's tree as the roles see it: the base overlaid with
those changes. Binary files are kept by hash and never shown as text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import redis

from . import keys
from .artifacts import ArtifactStore
from .errors import NotFound, StateError, shown

BLOB_TTL_S = 30 * 24 * 3600  # a month after the last import that named a blob
DELETED = ""  # a change's value for a file the job deleted


class WorkspaceError(StateError):
    """A workspace file cannot be read as asked (binary, missing, or its blob expired)."""


class TreeNotFound(NotFound):
    def __init__(self, tenant: str, tree_id: str) -> None:
        super().__init__(
            f"no workspace {shown(tree_id)} for tenant {tenant!r} (never imported, or expired)"
        )


@dataclass(frozen=True)
class FileEntry:
    """One file of a tree: where its bytes are and what they are."""

    path: str
    sha256: str
    size: int
    mode: int = 0o644
    binary: bool = False
    artifact: str = ""  # set when the job wrote the file (its bytes are that artifact's)

    def encode(self) -> str:
        return f"{self.sha256} {self.size} {self.mode:o} {'b' if self.binary else 't'}"

    @classmethod
    def decode(cls, path: str, raw: str) -> FileEntry:
        sha256, size, mode, kind = raw.split(" ")
        return cls(path, sha256, int(size), int(mode, 8), kind == "b")


def tree_id(entries: Iterable[FileEntry]) -> str:
    """The id of a tree: the digest of its sorted entries (the same files, the same id)."""
    digest = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e.path):
        digest.update(f"{e.path}\0{e.encode()}\n".encode())
    return f"t-{digest.hexdigest()[:24]}"


class Trees:
    """A tenant's blobs and tree snapshots."""

    def __init__(self, client: redis.Redis, tenant: str) -> None:
        self.client = client
        self.tenant = tenant

    def missing(self, shas: list[str]) -> list[str]:
        """Those of ``shas`` Redis does not hold, each refreshed to live ``BLOB_TTL_S`` more."""
        with self.client.pipeline(transaction=False) as pipe:
            for sha in shas:
                pipe.expire(keys.blob(self.tenant, sha), BLOB_TTL_S)
            held = pipe.execute()
        return [sha for sha, kept in zip(shas, held, strict=True) if not kept]

    def put_blobs(self, blobs: Iterable[tuple[str, bytes]]) -> None:
        """Store blobs (sha256, bytes) in one pipeline; a blob already there is left alone."""
        with self.client.pipeline(transaction=False) as pipe:
            for sha, data in blobs:
                pipe.set(keys.blob(self.tenant, sha), data, ex=BLOB_TTL_S, nx=True)
            pipe.execute()

    def put_tree(self, entries: list[FileEntry]) -> str:
        """Store the snapshot (once: its id is its content); its tree id."""
        tid = tree_id(entries)
        key = keys.tree(self.tenant, tid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.expire(key, BLOB_TTL_S)
            refreshed = pipe.execute()[0]
        if not refreshed:
            with self.client.pipeline() as pipe:  # MULTI: never a half-written tree
                for chunk in _chunks(entries, 1_000):
                    pipe.hset(key, mapping={e.path: e.encode() for e in chunk})
                pipe.expire(key, BLOB_TTL_S)
                pipe.execute()
        return tid

    def entries(self, tid: str) -> dict[str, FileEntry]:
        """The tree's files by path, sorted by path."""
        raw = self.client.hgetall(keys.tree(self.tenant, tid))
        if not raw:
            raise TreeNotFound(self.tenant, tid)
        return {
            p.decode(): FileEntry.decode(p.decode(), v.decode()) for p, v in sorted(raw.items())
        }

    def blob(self, sha256: str) -> bytes:
        data = self.client.get(keys.blob(self.tenant, sha256))
        if data is None:
            raise WorkspaceError(f"blob {sha256[:12]} of tenant {self.tenant!r} has expired")
        return data


def _chunks(items: list[FileEntry], size: int) -> Iterator[list[FileEntry]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class _Ref:
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Change:
    """One path the job changed against its base."""

    path: str
    kind: str  # added | modified | deleted
    before: FileEntry | None
    after: FileEntry | None


class Workspace:
    """A job's files as its roles see them: the base tree overlaid with the job's changes.

    The base never changes, so it is read once per instance; the changes are
    read on each call (another task of the job may have written since).
    """

    def __init__(self, client: redis.Redis, *, tenant: str, tree: str, job_id: str) -> None:
        self.client = client
        self.trees = Trees(client, tenant)
        self.tree_id = tree
        self.artifacts = ArtifactStore(client, job_id)
        self.job_id = job_id
        self._base: dict[str, FileEntry] | None = None

    def base(self) -> dict[str, FileEntry]:
        """The files the job was submitted with ({} without a workspace)."""
        if self._base is None:
            self._base = self.trees.entries(self.tree_id) if self.tree_id else {}
        return self._base

    def changed(self) -> dict[str, str]:
        """The job's changes: path -> artifact id, or ``DELETED``; sorted by path."""
        raw = self.client.hgetall(keys.workspace(self.job_id))
        return {k.decode(): v.decode() for k, v in sorted(raw.items())}

    def files(self, changed: dict[str, str] | None = None) -> dict[str, FileEntry]:
        """Every file of the job's tree now (or as of ``changed``, one read of the
        changes), sorted by path."""
        tree = dict(self.base())
        changed = self.changed() if changed is None else changed
        written = {p: a for p, a in changed.items() if a != DELETED}
        refs = self._refs(list(written.values()))
        for path, artifact in changed.items():
            if artifact == DELETED:
                tree.pop(path, None)
                continue
            ref = refs[artifact]
            mode = tree[path].mode if path in tree else 0o644
            tree[path] = FileEntry(path, ref.sha256, ref.bytes, mode, False, artifact)
        return dict(sorted(tree.items()))

    def _refs(self, ids: list[str]) -> dict[str, _Ref]:
        handles = self.artifacts.refs(ids)  # a redacted one's copy (a forget reached it)
        gone = [i for i in ids if i not in handles]
        if gone:
            raise WorkspaceError(f"the artifact {gone[0]} of a written file is gone")
        return {i: _Ref(ref.sha256, ref.bytes) for i, ref in handles.items()}

    def data(self, entry: FileEntry) -> bytes:
        if entry.artifact:
            return self.artifacts.text(entry.artifact).encode()
        return self.trees.blob(entry.sha256)

    def data_of(self, entries: list[FileEntry]) -> dict[str, bytes]:
        """Many files' bytes in one round trip (a pipeline), by path."""
        pipe = self.client.pipeline(transaction=False)
        for e in entries:
            if e.artifact:
                pipe.hget(keys.artifact(self.job_id, e.artifact), "content")
            else:
                pipe.get(keys.blob(self.trees.tenant, e.sha256))
        read = pipe.execute()
        # A written file's artifact a forget redacted: its copy's content, in one more trip.
        missing = [e.artifact for e, data in zip(entries, read, strict=True) if data is None]
        copies = self.artifacts.contents([a for a in missing if a]) if missing else {}
        out = {}
        for e, data in zip(entries, read, strict=True):
            data = data if data is not None else copies.get(e.artifact) if e.artifact else None
            if data is None:
                raise WorkspaceError(f"{e.path}: its content has expired")
            out[e.path] = data
        return out

    def text(self, path: str) -> str:
        """A text file's content; WorkspaceError for a binary or missing one."""
        entry = self.files().get(path)
        if entry is None:
            raise WorkspaceError(f"no file {path!r} in the workspace")
        return self.text_of(entry)

    def text_of(self, entry: FileEntry) -> str:
        if entry.binary:
            raise WorkspaceError(
                f"{entry.path} is binary ({entry.size} bytes, sha256 {entry.sha256[:12]}): "
                "kept by hash, never shown as text"
            )
        return self.data(entry).decode()

    def changes(self) -> list[Change]:
        """What the job changed against its base, by path: added, modified, deleted."""
        base, now = self.base(), self.files()
        out = []
        for path in sorted(set(base) | set(now)):
            before, after = base.get(path), now.get(path)
            if before is None and after is not None:
                out.append(Change(path, "added", None, after))
            elif after is None and before is not None:
                out.append(Change(path, "deleted", before, None))
            elif before and after and before.sha256 != after.sha256:
                out.append(Change(path, "modified", before, after))
        return out
