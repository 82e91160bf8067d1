"""A job's changes as a reviewable patch: ``redfleet diff`` and ``export --patch``.

A unified diff of every changed text file against the job's base (``a/`` and
``b/`` prefixes, as ``git apply`` and ``patch -p1`` read them); a binary file
is named, never shown.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared_state.workspace import Change, Workspace

_GIT_FILE = 0o100000  # git's mode bits of a regular file (100644, 100755)
_NULL = "0" * 40  # git's id of no blob


@dataclass(frozen=True)
class FileDiff:
    path: str
    kind: str  # added | modified | deleted
    added: int  # lines
    removed: int
    binary: bool
    text: str  # the unified diff of this file ('' for a binary one)

    def stat(self) -> str:
        counts = "binary" if self.binary else f"+{self.added} -{self.removed}"
        return f"{self.kind:8} {self.path} ({counts})"


def diff(workspace: Workspace) -> list[FileDiff]:
    """What the job changed against its base, file by file, sorted by path."""
    return [_file_diff(workspace, c) for c in workspace.changes()]


def _file_diff(ws: Workspace, change: Change) -> FileDiff:
    before, after = change.before, change.after
    old_data = ws.data(before) if before else b""
    new_data = ws.data(after) if after else b""
    # git's blob ids of both sides: `git apply --3way` finds the base in the repository by
    # them, so a patch whose context moved still merges.
    ids = (
        f"index {_blob_id(old_data) if before else _NULL}..{_blob_id(new_data) if after else _NULL}"
    )
    header = f"diff --git a/{change.path} b/{change.path}\n"
    if change.kind == "added" and after:
        header += f"new file mode {_GIT_FILE | after.mode:o}\n{ids}\n"
    elif change.kind == "deleted" and before:
        header += f"deleted file mode {_GIT_FILE | before.mode:o}\n{ids}\n"
    elif after:
        header += f"{ids} {_GIT_FILE | after.mode:o}\n"
    if (before and before.binary) or (after and after.binary):
        text = header + f"Binary files a/{change.path} and b/{change.path} differ\n"
        return FileDiff(change.path, change.kind, 0, 0, True, text)
    lines = list(
        difflib.unified_diff(
            _lines(old_data.decode()),
            _lines(new_data.decode()),
            fromfile=f"a/{change.path}" if before else "/dev/null",
            tofile=f"b/{change.path}" if after else "/dev/null",
        )
    )
    # A last line without a newline is marked as git marks it, so the patch applies exactly.
    marked = "\n\\ No newline at end of file\n"
    body = "".join(ln if ln.endswith("\n") else ln + marked for ln in lines)
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    return FileDiff(change.path, change.kind, added, removed, False, header + body)


def _lines(text: str) -> list[str]:
    """Lines as git counts them: split at '\\n' only (a form feed or a lone '\\r' is text)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _blob_id(data: bytes) -> str:
    """git's id of a blob (SHA-1 over its header and bytes): an identifier, not a digest
    anything trusts."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def patch_text(diffs: list[FileDiff]) -> str:
    return "".join(d.text for d in diffs)
