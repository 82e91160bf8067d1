"""``redfleet export``: a job's workspace files (and its verdicts) written to a folder.

The files are the job's tree: the workspace it was submitted with, if any,
overlaid with what its coders changed (``--patch`` writes those changes as one
unified diff instead). Paths the coders chose came from a model, so each is
checked before anything is written: relative, no
``..``, ``.`` or empty segments, no ``.git``, no backslash, NUL or control
characters, and its real location (symlinks resolved) inside the folder; no
file where another needs a folder. Nothing is
overwritten without ``force``; every check passes before the first write.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CoordinatorError
from .patch import diff, patch_text

if TYPE_CHECKING:
    from shared_state import State

VERDICTS_DIR = ".redfleet/verdicts"
TMP_SUFFIX = ".redfleet-tmp"


@dataclass
class Exported:
    root: Path
    files: list[str] = field(default_factory=list)  # relative to root, in the order written


def safe_target(root: Path, relative: str) -> Path:
    """Where ``relative`` lands under ``root``; CoordinatorError if it would land elsewhere."""
    if (
        not relative
        or relative.startswith(("/", "~"))
        or "\\" in relative
        or any(ord(c) < 32 or ord(c) == 127 for c in relative)
    ):
        raise CoordinatorError(f"workspace path {relative!r}: not a plain relative path")
    parts = relative.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise CoordinatorError(f"workspace path {relative!r}: empty, '.' or '..' segment")
    if any(p.lower() == ".git" for p in parts):
        # A repository's config can name commands git runs: never written from a model.
        raise CoordinatorError(f"workspace path {relative!r}: a .git directory")
    real_root = root.resolve()
    target = (real_root / relative).resolve()  # follows any symlink already in the folder
    if not target.is_relative_to(real_root) or target == real_root:
        raise CoordinatorError(f"workspace path {relative!r}: lands outside {root}")
    return target


def _check_layout(dest: Path, targets: dict[str, Path]) -> None:
    """Refuse, before any write, a file that another needs as a folder (``a`` and ``a/b``),
    or a target whose place is taken by a folder, or a folder by a file."""
    files = set(targets.values())
    for rel, target in targets.items():
        for parent in target.parents:
            if parent in files:
                raise CoordinatorError(f"workspace path {rel!r}: {parent.name!r} is also a file")
            if parent.exists() and not parent.is_dir():
                raise CoordinatorError(f"{parent}: a file where {rel!r} needs a folder")
            if parent == dest.resolve():
                break
        if target.is_dir():
            raise CoordinatorError(f"{target}: a folder where {rel!r} is a file")


def export_job(
    state: State, job_id: str, dest: Path, *, force: bool, verdicts: bool, patch: bool = False
) -> Exported:
    workspace = state.workspace(job_id)  # JobNotFound before anything is touched
    store = state.artifacts(job_id)
    planned: dict[str, bytes] = {}  # relative path -> content
    modes: dict[str, int] = {}  # a file's permission bits, where the workspace has them
    if patch:
        planned[f"{job_id}.patch"] = patch_text(diff(workspace)).encode()
    else:
        files = list(workspace.files().values())
        planned.update(workspace.data_of(files))
        modes.update({e.path: e.mode for e in files})
    if verdicts:
        for ref in store.list():
            if ref.kind == "verdict":
                planned[f"{VERDICTS_DIR}/{ref.id}.json"] = store.text(ref.id).encode()
    if not planned:
        raise CoordinatorError(f"job {job_id} has no workspace files to export")
    targets = {rel: safe_target(dest, rel) for rel in planned}
    _check_layout(dest, targets)
    existing = [rel for rel, target in targets.items() if target.exists()]
    if existing and not force:
        shown = ", ".join(existing[:3]) + (" …" if len(existing) > 3 else "")
        raise CoordinatorError(
            f"{dest}: {len(existing)} file(s) exist already ({shown}); --force overwrites them"
        )
    out = Exported(dest)
    for rel, target in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_whole(target, planned[rel], modes.get(rel, 0o644))
        out.files.append(rel)
    return out


def _write_whole(target: Path, data: bytes, mode: int) -> None:
    """Write ``target`` through a new temporary file beside it, then rename it into place.

    A reader never sees half a file, and the temporary file is created new
    (``mkstemp``: exclusive, never through a link), so nothing planted at its
    name can send the write outside the folder.
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, mode & 0o755)  # a script stays executable; nothing is world-writable
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
