"""A job's changes as a reviewable patch: ``redfleet diff`` and ``export --patch``.

A unified diff of every changed text file against the job's base (``a/`` and
``b/`` prefixes, as ``git apply`` and ``patch -p1`` read them); a binary file
is named, never shown.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from shared_state.workspace import Change, Workspace

_GIT_FILE = 0o100000  # git's mode bits of a regular file (100644, 100755)


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
    if (before and before.binary) or (after and after.binary):
        text = f"Binary files a/{change.path} and b/{change.path} differ\n"
        return FileDiff(change.path, change.kind, 0, 0, True, text)
    old = ws.text_of(before).splitlines(keepends=True) if before else []
    new = ws.text_of(after).splitlines(keepends=True) if after else []
    lines = list(
        difflib.unified_diff(
            old,
            new,
            fromfile=f"a/{change.path}" if before else "/dev/null",
            tofile=f"b/{change.path}" if after else "/dev/null",
        )
    )
    # A last line without a newline is marked as git marks it, so the patch applies exactly.
    marked = "\n\\ No newline at end of file\n"
    body = "".join(ln if ln.endswith("\n") else ln + marked for ln in lines)
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    header = f"diff --git a/{change.path} b/{change.path}\n"
    if change.kind == "added":
        header += f"new file mode {_GIT_FILE | after.mode:o}\n" if after else ""
    elif change.kind == "deleted":
        header += f"deleted file mode {_GIT_FILE | before.mode:o}\n" if before else ""
    return FileDiff(change.path, change.kind, added, removed, False, header + body)


def patch_text(diffs: list[FileDiff]) -> str:
    return "".join(d.text for d in diffs)
