"""The sample repository `redfleet demo` works on, laid out fresh as a git repository.

The project ships it (``coordinator/sample``: a small shop's stock with one
failing test); the demo copies it into its own home, commits it (so its job
has a base commit and ``redfleet apply`` can make a branch of the result),
and submits a job over it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SAMPLE = Path(__file__).parent / "sample"
# Who made the sample's first commit: the demo, not the person running it.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "redfleet demo",
    "GIT_AUTHOR_EMAIL": "demo@redfleet.invalid",
    "GIT_COMMITTER_NAME": "redfleet demo",
    "GIT_COMMITTER_EMAIL": "demo@redfleet.invalid",
}


# The user's git settings stay out of the demo's commit: no signing, no hooks.
_QUIET = ["-c", "commit.gpgsign=false", "-c", f"core.hooksPath={os.devnull}"]


def lay_out(dest: Path) -> bool:
    """A fresh copy of the sample at ``dest`` (what a previous demo left is replaced);
    True if it is a git repository with one commit, False if git is not installed or
    would not commit (the demo then works on the folder, and says how to save a patch)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(SAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | _IDENTITY
    steps = (["init", "-q"], ["add", "-A"], ["commit", "-qm", "The shop as it was"])
    try:
        for args in steps:
            subprocess.run(["git", *_QUIET, "-C", str(dest), *args], env=env, check=True,
                           capture_output=True)  # fmt: skip
    except (FileNotFoundError, subprocess.CalledProcessError):
        shutil.rmtree(dest / ".git", ignore_errors=True)
        return False
    return True
