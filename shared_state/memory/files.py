"""Memory files under ``/memories``: AGENTS.md-style documents and scratchpads, in Redis.

Workers run on many machines, so a memory file lives in Redis, not on one
worker's disk. The tree a model sees is rooted per tenant and scope::

    /memories/project/...   app:           the project's memory (AGENTS.md)
    /memories/user/...      user:<user>:   the job's user's notes
    /memories/job/...       job:<job>:     this job's notes
    /memories/scratch/...   temp:<task>:   this task's scratchpad

The tenant, user, job and task come from the ``MemoryContext``; a path names
only the directory, so no path reaches another tenant or user. A path is
checked against an allow-list after Unicode normalization: segments of
letters, digits, ``.``, ``_``, ``-`` and spaces, not starting with a dot, at
most 8 deep — so ``..``, ``.``, empty segments, backslashes, NUL and control
characters, percent-encoding and look-alike dots are refused, not "cleaned".
Files are at most 100 kB. Every change is a compare-and-set on the sha256 the
writer read (``memoryFile``): of two writers with the same expectation one
wins and the other gets ``FileChanged``; the last versions are kept.

Agents write ``job/`` and ``scratch/``; ``project/`` and ``user/`` are read-only
to them (the user, the operator or the job's end write those). ``job/`` and
``scratch/`` files go when the job's records do (``MemoryStore.expire_jobs``).
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass

import redis

from .. import keys
from ..errors import FileChanged, MemoryNotFound, MemoryRefused, SecretInMemory
from ..redact import looks_secret
from ..replies import Asked, check
from ..scripts import ScriptResult, run_plain
from .items import MemoryContext, Scope, ScopeKind

ROOT = "/memories"
PROJECT_MEMORY = f"{ROOT}/project/AGENTS.md"  # read by every job of the tenant at start
DECISION_LOG = f"{ROOT}/project/decisions.md"  # what jobs decided, appended as each succeeds
MAX_BYTES = 100_000
MAX_DEPTH = 8
MAX_SEGMENT = 100
VERSIONS_KEPT = 20
_DIRS = {"project": ScopeKind.APP, "user": ScopeKind.USER, "job": ScopeKind.JOB,
         "scratch": ScopeKind.TEMP}  # fmt: skip
_AGENT_WRITABLE = (ScopeKind.JOB, ScopeKind.TEMP)
_SEGMENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._- ")


@dataclass(frozen=True)
class MemoryPath:
    """A checked path: its scope, its path inside the scope, and how the model writes it."""

    scope: Scope
    relative: str  # "" for the scope's directory itself
    shown: str  # /memories/<dir>/<relative>


@dataclass(frozen=True)
class FileVersion:
    path: str
    sha256: str
    version: int


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def resolve(ctx: MemoryContext, path: str) -> MemoryPath:
    """The scope and inner path ``path`` names for ``ctx``; MemoryRefused if it is not allowed."""
    if not isinstance(path, str) or not path:
        raise MemoryRefused("path: must be a /memories/... path")
    folded = unicodedata.normalize("NFKC", path)
    if folded != path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise MemoryRefused(f"path {path!r}: control or look-alike characters")
    if not (path == ROOT or path.startswith(ROOT + "/")):
        raise MemoryRefused(f"path {path!r}: must start with {ROOT}/")
    parts = path[len(ROOT) + 1 :].split("/") if path != ROOT else []
    if parts and parts[-1] == "":
        parts.pop()  # one trailing slash names a directory
    if len(parts) > MAX_DEPTH + 1:
        raise MemoryRefused(f"path {path!r}: deeper than {MAX_DEPTH} levels")
    for part in parts:
        if not part or part.startswith(".") or part != part.strip() or len(part) > MAX_SEGMENT:
            raise MemoryRefused(f"path {path!r}: segment {part!r} is not allowed")
        if not set(part) <= _SEGMENT_CHARS:
            raise MemoryRefused(
                f"path {path!r}: segment {part!r}: only letters, digits, '.', '_', '-', spaces"
            )
    if not parts:
        raise MemoryRefused(f"{ROOT} holds only the directories {', '.join(_DIRS)}")
    kind = _DIRS.get(parts[0])
    if kind is None:
        raise MemoryRefused(f"path {path!r}: the directories are {', '.join(_DIRS)}")
    owner = {ScopeKind.APP: "", ScopeKind.USER: ctx.user, ScopeKind.JOB: ctx.job,
             ScopeKind.TEMP: ctx.task}[kind]  # fmt: skip
    if kind is not ScopeKind.APP and not owner:
        raise MemoryRefused(f"path {path!r}: there is no {parts[0]} here")
    relative = "/".join(parts[1:])
    shown = "/".join([ROOT, parts[0], *parts[1:]])
    return MemoryPath(Scope(kind=kind, id=owner), relative, shown)


class MemoryFiles:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    # ------------------------------------------------------------------ reads

    def read(self, ctx: MemoryContext, path: str) -> tuple[str, str]:
        """A file's content and sha256; MemoryNotFound if there is none."""
        where = self._file(ctx, path)
        content, digest = self.client.hmget(self._key(ctx, where), "content", "sha256")
        if content is None:
            raise MemoryNotFound(where.shown)
        return content.decode(), digest.decode()

    def listing(self, ctx: MemoryContext, path: str) -> list[tuple[str, int]]:
        """(path, bytes) of the files under a directory."""
        where = resolve(ctx, path)
        names = self.client.zrange(self._index(ctx, where.scope), 0, -1)
        prefix = f"{where.relative}/" if where.relative else ""
        inside = sorted(n.decode() for n in names if n.decode().startswith(prefix))
        pipe = self.client.pipeline(transaction=False)
        for name in inside:
            pipe.hstrlen(self._key(ctx, MemoryPath(where.scope, name, "")), "content")
        dir_shown = where.shown.rstrip("/")
        return [
            (f"{dir_shown}/{name[len(prefix) :]}", size)
            for name, size in zip(inside, pipe.execute(), strict=True)
        ]

    def view(self, ctx: MemoryContext, path: str, view_range: tuple[int, int] | None = None) -> str:
        """A directory's files with their sizes, or a file's lines numbered from 1."""
        where = resolve(ctx, path)
        if self.client.exists(self._key(ctx, where)) and where.relative:
            text, digest = self.read(ctx, path)
            lines = text.splitlines()
            start, end = view_range or (1, len(lines))
            if start < 1 or end < start:
                raise MemoryRefused(f"view_range {start}..{end}: give 1 <= start <= end")
            body = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, 1)
                             if start <= n <= end)  # fmt: skip
            return f"{where.shown} (sha256 {digest}, {len(text.encode())} bytes)\n{body}"
        entries = self.listing(ctx, path)
        if not entries:
            return f"{where.shown}: no files"
        return "\n".join(f"{size:>8}  {name}" for name, size in entries)

    def versions(self, ctx: MemoryContext, path: str) -> list[tuple[int, str, str]]:
        """Earlier versions of a file, newest first: (version, sha256, content)."""
        where = self._file(ctx, path)
        out = []
        for raw in self.client.lrange(self._versions(ctx, where), 0, -1):
            version, digest, content = raw.decode().split(" ", 2)
            out.append((int(version), digest, content))
        return out

    # ----------------------------------------------------------------- writes

    def create(
        self,
        ctx: MemoryContext,
        path: str,
        text: str,
        *,
        expected_sha256: str | None = None,
        operator: bool = False,
    ) -> FileVersion:
        """Write a whole file (new, or replacing it: then ``expected_sha256`` guards it)."""
        where = self._writable(ctx, path, operator)
        expected = "*" if expected_sha256 is None else expected_sha256
        return self._put(ctx, where, text, expected)

    def str_replace(
        self,
        ctx: MemoryContext,
        path: str,
        old: str,
        new: str,
        *,
        expected_sha256: str | None = None,
        operator: bool = False,
    ) -> FileVersion:
        """Replace the one occurrence of ``old``; refused if it occurs 0 or 2+ times."""
        where = self._writable(ctx, path, operator)
        text, digest = self._read_expected(ctx, path, expected_sha256)
        count = text.count(old) if old else 0
        if count != 1:
            raise MemoryRefused(
                f"{where.shown}: old_str occurs {count} times; it must occur exactly once"
            )
        return self._put(ctx, where, text.replace(old, new, 1), digest)

    def insert(
        self,
        ctx: MemoryContext,
        path: str,
        line: int,
        text: str,
        *,
        expected_sha256: str | None = None,
        operator: bool = False,
    ) -> FileVersion:
        """Insert ``text`` after line ``line`` (0: at the top)."""
        where = self._writable(ctx, path, operator)
        current, digest = self._read_expected(ctx, path, expected_sha256)
        lines = current.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            raise MemoryRefused(f"{where.shown}: insert_line {line} is not in 0..{len(lines)}")
        if lines and not lines[-1].endswith("\n") and line == len(lines):
            lines[-1] += "\n"
        added = text if text.endswith("\n") else text + "\n"
        text = "".join([*lines[:line], added, *lines[line:]])
        return self._put(ctx, where, text, digest)

    def delete(
        self,
        ctx: MemoryContext,
        path: str,
        *,
        expected_sha256: str | None = None,
        operator: bool = False,
    ) -> None:
        where = self._writable(ctx, path, operator)
        expected = "*" if expected_sha256 is None else expected_sha256
        res = self._run(ctx, "delete", where, expected, "", "")
        self._settle(res, where, expected)

    def rename(
        self,
        ctx: MemoryContext,
        old: str,
        new: str,
        *,
        expected_sha256: str | None = None,
        operator: bool = False,
    ) -> FileVersion:
        """Move a file (with its versions) within its scope; the target must not exist."""
        source = self._writable(ctx, old, operator)
        target = self._writable(ctx, new, operator)
        if target.scope != source.scope:
            raise MemoryRefused(f"{old} -> {new}: a file is renamed within its directory tree")
        expected = "*" if expected_sha256 is None else expected_sha256
        res = self._run(ctx, "rename", source, expected, target.relative, "")
        check("memoryFile", res, Asked(path=source.shown, expected=expected, target=target.shown))
        return FileVersion(target.shown, res.data["sha256"], int(res.data["version"]))

    # --------------------------------------------------------------- plumbing

    def _put(self, ctx: MemoryContext, where: MemoryPath, text: str, expected: str) -> FileVersion:
        if len(text.encode()) > MAX_BYTES:
            raise MemoryRefused(f"{where.shown}: {len(text.encode())} bytes, over {MAX_BYTES}")
        if looks_secret(text):
            raise SecretInMemory()
        digest = sha256(text)
        self.client.sadd(keys.MEMORY_TENANTS, ctx.tenant)  # whose files the job expiry looks at
        res = self._run(ctx, "put", where, expected, text, digest)
        self._settle(res, where, expected)
        return FileVersion(where.shown, digest, int(res.data["version"]))

    def _run(
        self, ctx: MemoryContext, op: str, where: MemoryPath, expected: str, arg: str, digest: str
    ):
        return run_plain(
            self.client,
            "memoryFile",
            keys.script_keys("memoryFile", tenant=ctx.tenant),
            [op, str(where.scope), where.relative, expected, arg, digest, ctx.actor or "?",
             VERSIONS_KEPT, ctx.job],
        )  # fmt: skip

    def _settle(self, res: ScriptResult, where: MemoryPath, expected: str) -> None:
        check("memoryFile", res, Asked(path=where.shown, expected=expected))

    def _read_expected(
        self, ctx: MemoryContext, path: str, expected: str | None
    ) -> tuple[str, str]:
        text, digest = self.read(ctx, path)
        if expected is not None and expected != digest:
            raise FileChanged(path, expected, digest)
        return text, digest

    def _file(self, ctx: MemoryContext, path: str) -> MemoryPath:
        where = resolve(ctx, path)
        if not where.relative or path.endswith("/"):
            raise MemoryRefused(f"{where.shown} is a directory")
        return where

    def _writable(self, ctx: MemoryContext, path: str, operator: bool) -> MemoryPath:
        where = self._file(ctx, path)
        if not operator and where.scope.kind not in _AGENT_WRITABLE:
            raise MemoryRefused(
                f"{where.shown}: read-only here; agents write {ROOT}/job and {ROOT}/scratch"
            )
        return where

    def _key(self, ctx: MemoryContext, where: MemoryPath) -> str:
        return keys.memory_file(ctx.tenant, str(where.scope), where.relative)

    def key_of(self, ctx: MemoryContext, path: str) -> str:
        """The hash a file's ``content`` is in (read with other reads: a run's opening)."""
        return self._key(ctx, self._file(ctx, path))

    def _versions(self, ctx: MemoryContext, where: MemoryPath) -> str:
        return keys.memory_file_versions(ctx.tenant, str(where.scope), where.relative)

    def _index(self, ctx: MemoryContext, scope: Scope) -> str:
        return keys.memory_files(ctx.tenant, str(scope))
