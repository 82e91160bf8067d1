"""``redfleet apply``: a job's changes as a new branch of the user's repository.

The branch starts at the commit the job's workspace was read at and gets one
commit per passing feature (its description, its check and the evidence the
reviewer cited), then one more for any change no passing feature accounts
for. A changed path belongs to the feature its writer's brief names (the coder
task whose write left the path as it is). Only git objects and the new
branch's ref are written, through a temporary index: the working tree, the
index and every existing branch stay as they are. A repository whose HEAD
moved since the job's base is refused unless ``three_way``: the commits are
then made on HEAD with ``git apply --3way``.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from shared_state import State
from shared_state.workspace import Change, Workspace
from workers.roles.features import WORKSPACE_CHECK, Feature, FeatureList
from workers.roles.task_input import TaskInput

from .errors import CoordinatorError
from .patch import diff, patch_text

FEATURE_ID = re.compile(r"\bF[0-9]{1,3}\b")
_GIT_PLACES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
               "GIT_COMMON_DIR", "GIT_NAMESPACE")  # fmt: skip
_IDENT = {"GIT_AUTHOR_NAME": "redfleet", "GIT_AUTHOR_EMAIL": "redfleet@localhost"}


class ApplyRefused(CoordinatorError):
    """The job's changes cannot become a branch of that repository; the message says why."""


@dataclass
class Commit:
    sha: str
    message: str
    paths: list[str]


@dataclass
class Applied:
    branch: str
    base: str
    commits: list[Commit] = field(default_factory=list)


def apply_job(
    state: State, job_id: str, repo: Path, *, branch: str = "", three_way: bool = False
) -> Applied:
    job = state.jobs.get(job_id)
    if not job.workspace_commit:
        raise ApplyRefused(
            f"job {job_id} was not submitted from a git repository (no base commit): "
            f"`redfleet export {job_id} DIR --patch` writes its changes as a patch"
        )
    ws = state.workspace(job_id)
    changes = ws.changes()
    if not changes:
        raise ApplyRefused(f"job {job_id} changed no file: there is nothing to apply")
    git = _Git(repo)
    base = job.workspace_commit
    if not git.ok("cat-file", "-e", f"{base}^{{commit}}"):
        raise ApplyRefused(
            f"{repo}: has no commit {base[:12]}, the job's base (another repository?)"
        )
    branch = branch or f"redfleet/{job_id}"
    if not git.ok("check-ref-format", "--branch", branch):
        raise ApplyRefused(f"--branch {branch!r}: not a valid branch name")
    if git.ok("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"):
        raise ApplyRefused(f"{repo}: branch {branch!r} exists already (--branch NAME)")
    head = git.run("rev-parse", "HEAD").strip()
    parent = base
    if head != base:
        if not three_way:
            raise ApplyRefused(
                f"{repo}: HEAD ({head[:12]}) moved since the job's base ({base[:12]}); "
                f"`redfleet apply {job_id} --repo {repo} --three-way` applies the changes "
                "onto HEAD with a three-way merge"
            )
        parent = head
    out = Applied(branch=branch, base=parent)
    with tempfile.TemporaryDirectory(prefix="redfleet-apply-") as tmp:
        git.index = str(Path(tmp, "index"))
        git.run("read-tree", parent)
        for message, group in _groups(state, job_id, ws, changes):
            # A binary file is staged whole (a patch cannot carry it); with --three-way the
            # text changes merge onto HEAD through their blob ids, else they are staged whole.
            binary = [c for c in group if _binary(c)]
            text = [c for c in group if not _binary(c)]
            for change in binary if three_way else group:
                _stage(git, ws, change)
            if three_way and text:
                git.run("apply", "--cached", "--3way", "-", stdin=_patch(ws, text))
            tree = git.run("write-tree").strip()
            parent = git.run("commit-tree", tree, "-p", parent, "-m", message).strip()
            out.commits.append(Commit(parent, message, [c.path for c in group]))
    # Created, never moved: a branch that appeared meanwhile is not overwritten.
    git.run("update-ref", f"refs/heads/{branch}", parent, "0" * 40)
    return out


def _groups(
    state: State, job_id: str, ws: Workspace, changes: list[Change]
) -> list[tuple[str, list[Change]]]:
    """(commit message, changes) per passing feature, then the rest."""
    features = _features(state, job_id)
    passing = [f for f in features if f.passes]
    owner = _owners(state, job_id, ws)
    groups: dict[str, list[Change]] = {f.id: [] for f in passing}
    rest: list[Change] = []
    for change in changes:
        named = [f for f in owner.get(change.path, ()) if f in groups]
        if not named and len(passing) == 1:
            named = [passing[0].id]  # one feature passed: the job's changes are its
        (groups[named[0]] if named else rest).append(change)
    own_check = state.jobs.get(job_id).check  # what a "workspace" feature's check ran
    out = [(_message(f, job_id, own_check), groups[f.id]) for f in passing if groups[f.id]]
    if rest:
        failing = ", ".join(f.id for f in features if not f.passes) or "none"
        out.append(
            (
                f"Changes no passing feature accounts for\n\nFeatures that did not pass: "
                f"{failing}.\nredfleet job: {job_id}\n",
                rest,
            )
        )
    return out


def _message(feature: Feature, job_id: str, own_check: str) -> str:
    evidence = ", ".join(feature.evidence) or "none"
    check = feature.check
    if check == WORKSPACE_CHECK and own_check:
        check = f"{own_check} (the workspace's own check)"
    return (
        f"{feature.id}: {feature.description}\n\n"
        f"check: {check}\nevidence: {evidence}\nredfleet job: {job_id}\n"
    )


def _features(state: State, job_id: str) -> list[Feature]:
    store = state.artifacts(job_id)
    latest = store.latest("features")
    return FeatureList.model_validate_json(store.text(latest.id)).features if latest else []


def _owners(state: State, job_id: str, ws: Workspace) -> dict[str, list[str]]:
    """Changed path -> the feature ids named by the brief of the task whose write left it."""
    now = ws.changed()
    store = state.artifacts(job_id)
    tasks = {t.task_id: t for t in state.tasks.list(job_id)}
    owner: dict[str, list[str]] = {}
    for entry in state.records(job_id).entries():
        for path, after in _writes(entry.tool, entry.detail).items():
            task = tasks.get(entry.task_id)
            if now.get(path) != after or task is None or not task.input:
                continue
            given = TaskInput.model_validate_json(store.text(task.input))
            owner[path] = FEATURE_ID.findall(f"{given.name} {given.brief}".upper())
    return owner


def _writes(tool: str, detail: dict) -> dict[str, str]:
    """What a journaled file effect left at each path (artifact id, or DELETED)."""
    if tool == "write_file":
        return {detail["path"]: detail["artifact"]}
    if "changes" in detail:  # append_file, edit_file, delete_file, rename_file
        return {p: c["after"] for p, c in detail["changes"].items()}
    return {}


def _binary(change: Change) -> bool:
    return any(e is not None and e.binary for e in (change.before, change.after))


def _patch(ws: Workspace, group: list[Change]) -> bytes:
    paths = {c.path for c in group}
    return patch_text([d for d in diff(ws) if d.path in paths]).encode()


def _stage(git: _Git, ws: Workspace, change: Change) -> None:
    if change.after is None:
        git.run("update-index", "--force-remove", "--", change.path)
        return
    sha = git.run("hash-object", "-w", "--stdin", stdin=ws.data(change.after)).strip()
    mode = "100755" if change.after.mode & 0o111 else "100644"
    git.run("update-index", "--add", "--cacheinfo", f"{mode},{sha},{change.path}")


class _Git:
    """git in one repository; with ``index``, on a temporary index of its own."""

    def __init__(self, repo: Path) -> None:
        if not repo.is_dir():
            raise ApplyRefused(f"--repo {repo}: no such folder")
        if not (repo / ".git").exists():
            raise ApplyRefused(f"--repo {repo}: not a git repository (no .git)")
        self.repo = repo
        self.index = ""
        # Variables that would point git elsewhere than -C says (a hook's, a wrapper's).
        self.env = {k: v for k, v in os.environ.items() if k not in _GIT_PLACES}
        if not self.ok("var", "GIT_AUTHOR_IDENT"):  # no user.name/email: say who made it
            self.env |= _IDENT | {"GIT_COMMITTER_NAME": "redfleet"}
            self.env["GIT_COMMITTER_EMAIL"] = _IDENT["GIT_AUTHOR_EMAIL"]

    def _call(self, args: tuple[str, ...], stdin: bytes | None) -> subprocess.CompletedProcess:
        env = self.env | ({"GIT_INDEX_FILE": self.index} if self.index else {})
        return subprocess.run(
            ["git", "-C", str(self.repo), *args], input=stdin, capture_output=True, env=env
        )

    def ok(self, *args: str) -> bool:
        return self._call(args, None).returncode == 0

    def run(self, *args: str, stdin: bytes | None = None) -> str:
        done = self._call(args, stdin)
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise ApplyRefused(f"git {args[0]} failed: {why[-1] if why else done.returncode}")
        return done.stdout.decode()
