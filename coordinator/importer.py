"""Import a directory or a git repository as a tenant's workspace tree (``submit --workspace``).

A git repository (a folder holding ``.git``) gives its tracked files as
committed at HEAD, read through ``git ls-tree`` and ``git cat-file --batch``,
with the commit recorded; uncommitted edits are not part of it. Any other
folder is walked, honouring every ``.gitignore`` in it (``pathspec``'s git
rules) and skipping ``.git``. ``include``/``exclude`` are gitignore-style
globs on the relative path.

Nothing is read twice into memory: the files are listed first (path, size,
mode), every refusal that needs no content (a cap, a path that is not UTF-8,
a link out of the tree) is raised before anything is sent, then contents are
hashed and sent in batches of at most ``BATCH_BYTES``: one round trip asks
which blobs Redis lacks, one sends them.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from shared_state.workspace import FileEntry, Trees

from .errors import CoordinatorError

if TYPE_CHECKING:
    import pathspec

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024
MAX_FILES = 50_000
BATCH_BYTES = 8 * 1024 * 1024
_SNIFF = 8192

ImportProgress = Callable[[int, int], None]  # (files done, files in all)


class ImportRefused(CoordinatorError):
    """A file of the workspace cannot be imported; the message names it."""


@dataclass(frozen=True)
class ImportLimits:
    max_file_bytes: int = MAX_FILE_BYTES
    max_total_bytes: int = MAX_TOTAL_BYTES
    max_files: int = MAX_FILES


@dataclass
class ImportReport:
    tree: str
    commit: str
    files: int
    new: int
    bytes: int
    sent: int  # bytes of new blobs sent to Redis
    binary: int
    ignored: int  # paths left out by .gitignore, --include or --exclude (a folder counts once)
    seconds: float = 0.0
    source: str = ""
    uncommitted: int = 0  # a repository's changed and untracked paths, left out

    def line(self) -> str:
        """``N files, M new, K bytes sent``, the summary a submit prints."""
        at = f" at commit {self.commit[:12]}" if self.commit else ""
        line = (
            f"workspace {self.source}{at}: {self.files} files ({_size(self.bytes)}), "
            f"{self.new} new, {self.sent} bytes sent; tree {self.tree}"
        )
        if self.uncommitted:
            line += (
                f"; {self.uncommitted} uncommitted change(s) left out (`git status`): "
                "commit them to include them"
            )
        return line


@dataclass(frozen=True)
class _Listed:
    path: str
    size: int
    mode: int
    read: Callable[[], bytes] = field(compare=False)


def import_workspace(
    client: redis.Redis,
    tenant: str,
    root: Path,
    *,
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    limits: ImportLimits = ImportLimits(),
    progress: ImportProgress | None = None,
) -> ImportReport:
    """Store ``root``'s files as blobs of ``tenant`` and a tree of them; what was done."""
    started = time.monotonic()
    if not root.is_dir():
        why = "a file, not a folder" if root.exists() else "no such folder"
        raise ImportRefused(f"--workspace {root}: {why}")
    root = root.resolve()
    wanted = _filter(include, exclude)
    git = (root / ".git").exists()
    skipped: list[str] = []  # what a .gitignore left out
    with _GitReader(root) if git else _nothing() as reader:
        if reader is not None:
            commit, listed, uncommitted = reader.commit, list(reader.files()), reader.uncommitted()
        else:
            commit, listed, uncommitted = "", list(_walk(root, skipped)), 0
        kept = [f for f in listed if wanted(f.path)]
        _check(kept, limits)
        trees = Trees(client, tenant)
        entries, new, sent = [], 0, 0
        for batch in _batches(kept):
            contents = [(f, f.read()) for f in batch]
            hashed = [(f, data, sha256(data).hexdigest()) for f, data in contents]
            missing = set(trees.missing([sha for _, _, sha in hashed]))
            fresh = {sha: data for _, data, sha in hashed if sha in missing}
            trees.put_blobs(fresh.items())
            new += len(fresh)
            sent += sum(len(d) for d in fresh.values())
            entries += [FileEntry(f.path, sha, len(d), f.mode, _binary(d)) for f, d, sha in hashed]
            if progress:
                progress(len(entries), len(kept))
    tree = trees.put_tree(entries)
    return ImportReport(
        tree=tree,
        commit=commit,
        uncommitted=uncommitted,
        files=len(entries),
        new=new,
        bytes=sum(e.size for e in entries),
        sent=sent,
        binary=sum(e.binary for e in entries),
        ignored=len(listed) - len(kept) + len(skipped),
        seconds=time.monotonic() - started,
        source=root.name,
    )


def _filter(include: tuple[str, ...], exclude: tuple[str, ...]) -> Callable[[str], bool]:
    import pathspec  # here: the CLI's settings import this module, and only an import needs it

    inc = pathspec.GitIgnoreSpec.from_lines(include) if include else None
    exc = pathspec.GitIgnoreSpec.from_lines(exclude) if exclude else None
    return lambda path: (
        (inc is None or inc.match_file(path)) and not (exc is not None and exc.match_file(path))
    )


def _check(files: list[_Listed], limits: ImportLimits) -> None:
    """Every refusal that needs no content, before anything is sent."""
    if not files:
        raise ImportRefused("the workspace has no files to import (all ignored or excluded?)")
    if len(files) > limits.max_files:
        raise ImportRefused(
            f"the workspace has {len(files)} files, over the cap of {limits.max_files} "
            "(narrow it with --include/--exclude)"
        )
    total = 0
    for f in files:
        if any("\udc80" <= c <= "\udcff" for c in f.path):
            shown = f.path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            raise ImportRefused(f"{shown!r}: the path is not valid UTF-8")
        if f.size > limits.max_file_bytes:
            raise ImportRefused(
                f"{f.path}: {_size(f.size)}, over the per-file cap of "
                f"{_size(limits.max_file_bytes)} (REDFLEET_WORKSPACE_MAX_FILE_BYTES; "
                "or --exclude it)"
            )
        total += f.size
        if total > limits.max_total_bytes:
            raise ImportRefused(
                f"{f.path}: the workspace passes the total cap of "
                f"{_size(limits.max_total_bytes)} here (REDFLEET_WORKSPACE_MAX_BYTES)"
            )


def _batches(files: list[_Listed]) -> Iterator[list[_Listed]]:
    batch: list[_Listed] = []
    size = 0
    for f in files:
        if batch and size + f.size > BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(f)
        size += f.size
    if batch:
        yield batch


def _binary(data: bytes) -> bool:
    """Kept by hash, never shown as text: a NUL byte, or not UTF-8."""
    if b"\0" in data[:_SNIFF]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


# -- a folder ---------------------------------------------------------------------------------


def _walk(root: Path, skipped: list[str]) -> Iterator[_Listed]:
    """Files under ``root``, by sorted path, honouring the ignore rules; the paths left out
    go to ``skipped``. A folder inside a git work tree (not its top) takes git's own rules
    (``git ls-files --exclude-standard``: the repository's .gitignore files above it too);
    any other folder each of its ``.gitignore`` files, through pathspec. A symlink is kept
    as the file it names only when that file is itself kept (a link to an ignored secret is
    not a way in); a link to a folder is left out."""
    found = _git_listing(root)
    paths = found if found is not None else list(_pathspec_listing(root, skipped))
    kept = set(paths)
    for path in paths:
        full = root / path
        if full.is_symlink():
            target = full.resolve()
            if not target.is_relative_to(root):
                raise ImportRefused(f"{path}: a symlink leading out of the workspace")
            if target.relative_to(root).as_posix() not in kept:
                skipped.append(path)  # it names an ignored file, or a folder
                continue
        yield _listed(root, full, path)


def _git_listing(root: Path) -> list[str] | None:
    """The files of a folder inside a git work tree (tracked, and untracked but not
    ignored), by git's rules; None for a folder that is not in one, one the repository
    ignores (a virtualenv's package: imported by its own .gitignore files), or without git."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                             capture_output=True, check=False)  # fmt: skip
        if top.returncode != 0:
            return None
        ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", "."],
                                 capture_output=True, check=False)  # fmt: skip
        if ignored.returncode == 0:
            return None  # the folder is one its repository ignores: its own rules only
        listing = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True, check=True,
        )  # fmt: skip
    except (FileNotFoundError, subprocess.CalledProcessError):
        return None
    names = listing.stdout.decode("utf-8", "surrogateescape").split("\0")
    return sorted(n for n in names if n and not (root / n).is_dir())


def _pathspec_listing(root: Path, skipped: list[str]) -> Iterator[str]:
    import pathspec

    specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []  # (folder prefix, its rules)
    for folder, dirs, names in os.walk(root, followlinks=False):
        rel = os.path.relpath(folder, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        specs = [(p, s) for p, s in specs if prefix.startswith(p)]
        ignore = Path(folder, ".gitignore")
        if ignore.is_file():
            specs.append((prefix, pathspec.GitIgnoreSpec.from_lines(_lines(ignore, prefix))))
        gone = [d for d in dirs if d == ".git" or _ignored(specs, prefix + d + "/")]
        links = [d for d in dirs if d not in gone and Path(folder, d).is_symlink()]
        skipped += [prefix + d for d in gone + links if d != ".git"]  # a link to a folder
        dirs[:] = sorted(set(dirs) - set(gone) - set(links))
        for name in sorted(names):
            path = prefix + name
            if _ignored(specs, path):
                skipped.append(path)
            else:
                yield path


def _ignored(specs: list[tuple[str, pathspec.GitIgnoreSpec]], path: str) -> bool:
    """Whether the ``.gitignore`` files on the way to ``path`` (a folder ends in '/') leave
    it out: as git decides, the deepest file with a rule for it has the last word (a
    nested ``!keep.log`` brings back what the root ignores)."""
    decided = None
    for prefix, spec in specs:  # from the root down
        include = spec.check_file(path[len(prefix) :]).include
        if include is not None:
            decided = include
    return bool(decided)


def _lines(ignore: Path, prefix: str) -> list[str]:
    try:
        return ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise ImportRefused(f"{prefix}.gitignore: unreadable ({exc.strerror})") from exc


def _listed(root: Path, full: Path, path: str) -> _Listed:
    try:
        info = full.lstat()
        if stat.S_ISLNK(info.st_mode):
            target = full.resolve()
            if not target.is_relative_to(root):
                raise ImportRefused(f"{path}: a symlink leading out of the workspace")
            info = target.stat()
            full = target
        if not stat.S_ISREG(info.st_mode):
            raise ImportRefused(f"{path}: not a regular file")
        if not os.access(full, os.R_OK):
            raise ImportRefused(f"{path}: unreadable (permission denied)")
    except OSError as exc:
        raise ImportRefused(f"{path}: unreadable ({exc.strerror})") from exc
    mode = 0o755 if info.st_mode & 0o111 else 0o644

    def read() -> bytes:
        try:
            return full.read_bytes()
        except OSError as exc:
            raise ImportRefused(f"{path}: unreadable ({exc.strerror})") from exc

    return _Listed(path, info.st_size, mode, read)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# -- a git repository -----------------------------------------------------------------------


class _GitReader:
    """The files of HEAD through one ``git cat-file --batch`` process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.commit = self._git("rev-parse", "--verify", "HEAD^{commit}").strip()
        self._cat: subprocess.Popen[bytes] | None = None

    def _git(self, *args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(self.root), *args], capture_output=True, check=False
            )
        except FileNotFoundError as exc:
            raise ImportRefused(f"{self.root}: a git repository, but git is not installed") from exc
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise ImportRefused(
                f"{self.root}: git {args[0]} failed ({why[-1] if why else done.returncode}); "
                "a repository needs at least one commit"
            )
        return done.stdout.decode("utf-8", "surrogateescape")

    def uncommitted(self) -> int:
        """How many paths ``git status`` lists (edited, staged, deleted, or untracked and
        not ignored; an untracked folder once): what an import of the commit leaves out.
        0 when git cannot tell: the count only informs, the import stands."""
        try:  # --no-optional-locks: the user's index is only read, never locked
            listed = self._git("--no-optional-locks", "status", "--porcelain=v1", "-z")
        except ImportRefused:
            return 0
        entries, count = iter(listed.split("\0")), 0
        for entry in entries:
            if not entry:
                continue
            count += 1
            if "R" in entry[:2] or "C" in entry[:2]:  # renamed or copied: the source follows
                next(entries, None)
        return count

    def __enter__(self) -> _GitReader:
        self._cat = subprocess.Popen(
            ["git", "-C", str(self.root), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cat is not None:
            assert self._cat.stdin is not None
            self._cat.stdin.close()
            self._cat.wait(timeout=10)

    def files(self) -> Iterator[_Listed]:
        listing = self._git("ls-tree", "-r", "-z", "--long", "--full-tree", self.commit)
        blobs = {}
        for line in filter(None, listing.split("\0")):
            meta, path = line.split("\t", 1)
            mode, kind, obj, size = meta.split()
            blobs[path] = (mode, kind, obj, size)
        for path, (mode, kind, obj, size) in sorted(blobs.items()):
            if kind == "commit":
                continue  # a submodule: not this repository's files
            if mode == "120000":
                linked = self._link(path, obj, blobs)
                if linked is not None:
                    yield linked
                continue
            yield _Listed(path, int(size), 0o755 if mode == "100755" else 0o644, self._reader(obj))

    def _link(
        self, path: str, obj: str, blobs: dict[str, tuple[str, str, str, str]]
    ) -> _Listed | None:
        """A symlink in the commit: the file it names inside the tree; None for a link to a
        folder of it (left out); refused if it leads out."""
        target = self._reader(obj)().decode("utf-8", "surrogateescape")
        joined = os.path.normpath(os.path.join(os.path.dirname(path), target))
        if target.startswith("/") or joined == ".." or joined.startswith("../"):
            raise ImportRefused(f"{path}: a symlink leading out of the workspace ({target})")
        if joined not in blobs:
            if any(p.startswith(joined + "/") for p in blobs):
                return None  # a folder of the tree: its files are imported where they are
            raise ImportRefused(f"{path}: a symlink to {target}, which the commit lacks")
        mode, kind, obj, size = blobs[joined]
        if kind != "blob" or mode == "120000":
            raise ImportRefused(f"{path}: a symlink to {target}, which is not a file")
        return _Listed(path, int(size), 0o755 if mode == "100755" else 0o644, self._reader(obj))

    def _reader(self, obj: str) -> Callable[[], bytes]:
        def read() -> bytes:
            cat = self._cat
            assert cat is not None and cat.stdin is not None and cat.stdout is not None
            cat.stdin.write(f"{obj}\n".encode())
            cat.stdin.flush()
            header = cat.stdout.readline().split()
            size = int(header[2])
            data = cat.stdout.read(size)
            cat.stdout.read(1)  # the newline after the content
            return data

        return read
