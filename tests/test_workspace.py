"""Workspaces: a folder or git repository in (stored once per tenant), a reviewed patch out."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from coordinator.importer import ImportLimits, ImportRefused, import_workspace
from shared_state import JobSpec, Scenario, State, keys
from shared_state.workspace import DELETED, TreeNotFound, WorkspaceError

from .conftest import events_named
from .test_agent_jobs import finished
from .test_cli import assert_one_line_error, run

BUGGY = "def double(x):\n    return x + 1\n"
TEST_M = "from m import double\n\n\ndef test_double():\n    assert double(3) == 6\n"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return root


def make_repo(root: Path, files: dict[str, str | bytes]) -> Path:
    write_tree(root, files)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def test_a_git_import_takes_the_commits_files_honours_gitignore_and_records_the_commit(
    state: State, tmp_path: Path
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            ".gitignore": "build/\n*.log\n",
            "m.py": BUGGY,
            "pkg/a.py": "A = 1\n",
            "logo.png": b"\x89PNG\0\1",
        },
    )
    (repo / "build").mkdir()
    (repo / "build" / "out.py").write_text("generated\n")  # ignored
    (repo / "debug.log").write_text("noise\n")  # ignored
    (repo / "untracked.py").write_text("x = 1\n")  # not committed
    (repo / "m.py").write_text("edited but not committed\n")
    git(repo, "mv", "pkg/a.py", "pkg/b.py")  # staged: one change, two paths in git's list
    (repo / "logo.png").rename(repo / "art.png")
    git(repo, "add", "-N", "art.png")  # renamed in the work tree only: " R art.png", logo.png
    report = import_workspace(state.client, "t1", repo)
    assert report.commit == git(repo, "rev-parse", "HEAD").strip()
    assert report.uncommitted == 4  # the edit, the untracked file and the two renames
    assert "4 uncommitted change(s) left out" in report.line()
    files = state.workspace_tree("t1", report.tree)
    assert sorted(files) == [".gitignore", "logo.png", "m.py", "pkg/a.py"]
    assert files["logo.png"].binary and not files["m.py"].binary
    job = state.jobs.submit(JobSpec(goal="g", tenant="t1", workspace=report.tree))
    ws = state.workspace(job.job_id)
    assert ws.text("m.py") == BUGGY  # as committed, not as edited since
    with pytest.raises(WorkspaceError, match="binary"):
        ws.text("logo.png")


def test_a_folder_import_honours_nested_gitignores_and_the_include_exclude_globs(
    state: State, tmp_path: Path
) -> None:
    root = write_tree(
        tmp_path / "plain",
        {
            ".gitignore": "*.tmp\n",
            "src/a.py": "a\n",
            "src/b.tmp": "ignored\n",
            "src/gen/.gitignore": "*\n!keep.py\n",
            "src/gen/keep.py": "k\n",
            "src/gen/drop.py": "d\n",
            "docs/x.md": "x\n",
        },
    )
    report = import_workspace(state.client, "t1", root)
    assert sorted(state.workspace_tree("t1", report.tree)) == [
        ".gitignore", "docs/x.md", "src/a.py", "src/gen/keep.py"
    ]  # fmt: skip
    assert report.commit == "" and report.ignored == 3
    only = import_workspace(state.client, "t1", root, include=("src/**",), exclude=("*/gen/*",))
    assert sorted(state.workspace_tree("t1", only.tree)) == ["src/a.py"]


def test_a_second_import_sends_only_the_changed_files(state: State, tmp_path: Path) -> None:
    files = {f"pkg/m{i}.py": f"VALUE = {i}\n" * 50 for i in range(40)}
    repo = make_repo(tmp_path / "repo", files)
    first = import_workspace(state.client, "t1", repo)
    assert (first.files, first.new) == (40, 40) and first.sent == first.bytes
    again = import_workspace(state.client, "t1", repo)
    assert (again.new, again.sent, again.tree) == (0, 0, first.tree)
    (repo / "pkg/m7.py").write_text("VALUE = 'changed'\n")
    git(repo, "commit", "-qam", "change one")
    third = import_workspace(state.client, "t1", repo)
    assert (third.new, third.sent) == (1, len("VALUE = 'changed'\n"))
    assert third.tree != first.tree and third.commit != first.commit
    # Stored once per tenant: another tenant stores its own copy.
    other = import_workspace(state.client, "t2", repo)
    assert other.new == 40


def test_a_file_over_the_cap_is_refused_naming_it_before_anything_is_sent(
    state: State, tmp_path: Path, redis_url: str
) -> None:
    root = tmp_path / "big"
    root.mkdir()
    (root / "small.py").write_text("x = 1\n")
    (root / "data").mkdir()
    (root / "data" / "huge.bin").write_bytes(b"\0" * 5_000)
    with pytest.raises(ImportRefused, match=r"^data/huge\.bin: 4\.9 KiB, over the per-file cap"):
        import_workspace(state.client, "t1", root, limits=ImportLimits(max_file_bytes=4_096))
    assert not list(state.client.scan_iter("rf:ws:*"))  # nothing sent
    env = {"REDFLEET_WORKSPACE_MAX_FILE_BYTES": "4096"}
    out = run_env(env, "submit", "g", "--workspace", str(root), url=redis_url)
    assert_one_line_error(out, "data/huge.bin", "per-file cap", "REDFLEET_WORKSPACE_MAX_FILE_BYTES")


def run_env(env: dict[str, str], *args: str, url: str):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return run(*args, url=url)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_symlink_out_of_the_tree_and_a_non_utf8_path_are_refused_naming_them(
    state: State, tmp_path: Path
) -> None:
    root = tmp_path / "links"
    root.mkdir()
    (root / "ok.py").write_text("ok\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    (root / "inside.py").symlink_to(root / "ok.py")  # stays in the tree: taken as the file
    (root / "escape.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ImportRefused, match=r"^escape\.txt: a symlink leading out"):
        import_workspace(state.client, "t1", root)
    (root / "escape.txt").unlink()
    assert "inside.py" in state.workspace_tree(
        "t1", import_workspace(state.client, "t1", root).tree
    )
    os.mkdir(os.fsencode(root) + b"/bad\xff")
    (Path(os.fsdecode(os.fsencode(root) + b"/bad\xff")) / "f.py").write_text("x\n")
    with pytest.raises(ImportRefused, match="not valid UTF-8"):
        import_workspace(state.client, "t1", root)


def test_a_job_naming_a_tree_its_tenant_does_not_hold_is_refused(state: State) -> None:
    with pytest.raises(TreeNotFound):
        state.jobs.submit(JobSpec(goal="g", tenant="t1", workspace="t-000000000000000000000000"))


def _call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


FIX = {
    "name": "fix",
    "roles": {
        "planner": [
            _call("write_features", features=[
                {"id": "F1", "description": "double(x) returns 2x", "check": "test_m.py"}]),
            _call("dispatch_coders", tasks=[{"name": "impl", "brief": "fix double in m.py"}]),
        ],
        "coder.impl": [
            _call("grep_workspace", pattern="def double"),
            _call("edit_file", path="m.py", old="x", new="y"),  # matches twice: refused
            _call("edit_file", path="m.py", old="return x + 1", new="return x * 2"),
            _call("delete_file", path="notes.txt"),
            _call("append_file", path="r.md", text="more\n"),  # onto the submitted file
            {"text": "m.py fixed, notes.txt removed, r.md extended"},
        ],
        "planner/review": [_call("dispatch_reviewer", brief="check F1")],
        "reviewer.review": [
            _call("run_checks", feature_ids=["F1"]),
            _call("submit_verdicts", verdicts=[{"feature_id": "F1", "passes": True}]),
        ],
        "planner/report": [{"text": "F1 passes"}],
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("point", "check"),
    [("", ""), ("after-effect", ""), ("", "python -m pytest -q test_m.py")],
    ids=["edit", "killed-after-the-edit", "the-workspace-check"],
)
def test_a_job_over_a_repository_edits_it_once_and_its_diff_applies_to_the_repository(
    state: State, start_fleet, tmp_path: Path, redis_url: str, point: str, check: str
) -> None:
    repo = make_repo(
        tmp_path / "repo", {"m.py": BUGGY, "test_m.py": TEST_M, "notes.txt": "old\n", "r.md": "r\n"}
    )
    script = tmp_path / "fix.json"
    scenario = json.loads(json.dumps(FIX))
    if check:  # F1 passes on the job's own check command instead of its pytest arguments
        scenario["roles"]["planner"][0]["tool_calls"][0]["arguments"]["features"][0]["check"] = (
            "workspace"
        )
    script.write_text(json.dumps(scenario))
    report = import_workspace(state.client, "default", repo)
    job = state.jobs.submit(
        JobSpec(
            goal="fix double",
            scenario=Scenario.AGENTS,
            workspace=report.tree,
            workspace_commit=report.commit,
            check=check,
        )
    )
    env = [("REDFLEET_SCRIPT", str(script))]
    marker = tmp_path / "fired"
    if point:
        env.append(("REDFLEET_FAILPOINTS", f"journal.{point}.edit_file@{marker}"))
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=1_000, worker_env=tuple(env))
    done = finished(state, job.job_id)
    assert done.status == "succeeded", done.reason
    if point:
        assert marker.exists() and events_named(state, job.job_id, "task.requeued")
    ws = state.workspace(job.job_id)
    assert ws.text("m.py") == "def double(x):\n    return x * 2\n"  # the edit, made once
    assert "notes.txt" not in ws.files() and ws.changed()["notes.txt"] == DELETED
    stat = run("diff", job.job_id, "--stat", url=redis_url)
    assert ws.text("r.md") == "r\nmore\n"  # appended to what was submitted, not replaced
    assert stat.stdout.splitlines() == [
        "modified m.py (+1 -1)", "deleted  notes.txt (+0 -1)", "modified r.md (+1 -0)",
        "3 files changed, +2 -2",
    ]  # fmt: skip
    applied = run("apply", job.job_id, "--repo", str(repo), "--json", url=redis_url)
    assert applied.returncode == 0, applied.stderr
    (commit,) = json.loads(applied.stdout)["commits"]  # one passing feature: one commit
    branch = f"redfleet/{job.job_id}"
    assert commit["message"].startswith("F1: double(x) returns 2x\n")
    assert "evidence: a-" in commit["message"]
    # The check named as it ran: the job's own command for a "workspace" feature.
    ran = f"{check} (the workspace's own check)" if check else "test_m.py"
    assert f"\ncheck: {ran}\n" in commit["message"]
    assert sorted(commit["paths"]) == ["m.py", "notes.txt", "r.md"]
    assert git(repo, "show", f"{branch}:m.py") == ws.text("m.py")
    assert git(repo, "ls-tree", "--name-only", branch).split() == ["m.py", "r.md", "test_m.py"]
    assert git(repo, "status", "--porcelain") == ""  # the working tree and index untouched
    again = run("apply", job.job_id, "--repo", str(repo), url=redis_url)
    assert_one_line_error(again, "exists already")
    nowhere = run("apply", job.job_id, "--repo", str(tmp_path / "nowhere"), url=redis_url)
    assert_one_line_error(nowhere, "--repo", "no such folder")
    out = tmp_path / "out"
    assert run("export", job.job_id, str(out), "--patch", url=redis_url).returncode == 0
    git(repo, "apply", "--check", str(out / f"{job.job_id}.patch"))
    git(repo, "apply", str(out / f"{job.job_id}.patch"))
    assert (repo / "m.py").read_text() == ws.text("m.py") and not (repo / "notes.txt").exists()
    status = sorted(git(repo, "status", "--porcelain").split())
    assert status == ["D", "M", "M", "m.py", "notes.txt", "r.md"]
    assert state.client.exists(keys.tree("default", report.tree))
    store = state.artifacts(job.job_id)
    # The edit whose text matched three times was refused, and told to the model so.
    edits = [store.text(r.id) for r in store.list() if r.title.startswith("edit_file result")]
    assert any("m.py: the text to replace occurs 2 times" in e for e in edits), edits
    (log,) = [r for r in store.list() if r.kind == "log"]
    assert log.title == (f"check {check}: exit 0" if check else "pytest test_m.py: exit 0")
    assert "1 passed" in store.text(log.id)


def test_a_job_with_a_check_no_feature_names_never_succeeds(
    state: State, start_fleet, tmp_path: Path
) -> None:
    """``submit --check`` is the user's word on success: a feature list that does not
    name it (check 'workspace') is refused, told to the model, and a planner that goes on
    without one fails the job, where it would have passed on the model's own tests."""
    repo = make_repo(tmp_path / "repo", {"m.py": BUGGY, "test_m.py": TEST_M, "notes.txt": "n\n"})
    script = tmp_path / "fix.json"
    script.write_text(json.dumps(FIX))  # F1's check: test_m.py, not the job's check
    report = import_workspace(state.client, "default", repo)
    job = state.jobs.submit(
        JobSpec(goal="fix double", scenario=Scenario.AGENTS, workspace=report.tree,
                workspace_commit=report.commit, check="python -m pytest -q test_m.py")
    )  # fmt: skip
    start_fleet(planners=1, coders=1, reviewers=1, worker_env=(("REDFLEET_SCRIPT", str(script)),))
    done = finished(state, job.job_id)
    assert done.status == "failed", done.reason
    store = state.artifacts(job.job_id)
    told = [store.text(r.id) for r in store.list() if r.title.startswith("write_features result")]
    assert any("submitted with a check (`python -m pytest -q test_m.py`)" in t for t in told), told
    assert not [r for r in store.list() if r.kind == "features"]


def test_apply_refuses_a_moved_repository_and_merges_three_ways_when_asked(
    state: State, tmp_path: Path, redis_url: str
) -> None:
    repo = make_repo(tmp_path / "repo", {"m.py": BUGGY, "r.md": "one\ntwo\nthree\n"})
    report = import_workspace(state.client, "default", repo)
    job = state.jobs.submit(
        JobSpec(goal="g", workspace=report.tree, workspace_commit=report.commit)
    )
    claim = state.tasks.claim(job.job_id, job.root_task, "w1", 60_000).claim
    edited = state.artifacts(job.job_id).put(BUGGY.replace("+ 1", "* 2"), kind="file")
    state.records(job.job_id).write(claim, files={"m.py": edited.id})
    (repo / "r.md").write_text("one\ntwo\nthree\nfour\n")  # someone else's commits since:
    (repo / "m.py").write_text("# doubling\n" + BUGGY)  # one in the file the job edited too
    git(repo, "commit", "-qam", "moved on")
    moved = run("apply", job.job_id, "--repo", str(repo), url=redis_url)
    assert_one_line_error(moved, "moved since the job's base", "--three-way")
    assert "redfleet/" not in git(repo, "branch", "--list")
    merged = run("apply", job.job_id, "--repo", str(repo), "--three-way", url=redis_url)
    assert merged.returncode == 0, merged.stderr
    branch = f"redfleet/{job.job_id}"
    assert git(repo, "show", f"{branch}:r.md") == "one\ntwo\nthree\nfour\n"  # theirs kept
    # Ours merged onto theirs in the same file: a three-way merge, not a plain apply.
    assert git(repo, "show", f"{branch}:m.py") == "# doubling\n" + BUGGY.replace("+ 1", "* 2")
    assert git(repo, "rev-parse", f"{branch}~1") == git(repo, "rev-parse", "HEAD")
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.py").write_text("a\n")
    plain = state.jobs.submit(
        JobSpec(goal="g", workspace=import_workspace(state.client, "default", folder).tree)
    )
    refused = run("apply", plain.job_id, "--repo", str(repo), url=redis_url)
    assert_one_line_error(refused, "not submitted from a git repository", "--patch")


def test_ignore_rules_decide_as_git_does_and_a_link_is_no_way_around_them(
    state: State, tmp_path: Path
) -> None:
    root = write_tree(
        tmp_path / "plain",
        {
            ".gitignore": "*.log\n.env\n",
            "sub/.gitignore": "!keep.log\n",  # a deeper rule has the last word
            "sub/keep.log": "kept\n",
            "sub/drop.log": "dropped\n",
            ".env": "SECRET=1\n",
            "a.py": "a\n",
        },
    )
    (root / "config").symlink_to(root / ".env")  # a link to an ignored secret
    (root / "lib").symlink_to(root / "sub")  # a link to a folder
    report = import_workspace(state.client, "t1", root)
    files = state.workspace_tree("t1", report.tree)
    assert sorted(files) == [".gitignore", "a.py", "sub/.gitignore", "sub/keep.log"]


def test_a_folder_inside_a_repository_takes_the_repositorys_ignore_rules(
    state: State, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {".gitignore": "*.env\nnode_modules/\n", "app/a.py": "a\n"})
    (repo / "app" / "local.env").write_text("TOKEN=1\n")  # ignored by the repository's root
    (repo / "app" / "node_modules").mkdir()
    (repo / "app" / "node_modules" / "big.js").write_text("x\n")
    (repo / "app" / "new.py").write_text("untracked, not ignored\n")
    report = import_workspace(state.client, "t1", repo / "app")
    assert sorted(state.workspace_tree("t1", report.tree)) == ["a.py", "new.py"]
    assert report.commit == ""  # a folder of a repository, not the repository at a commit
