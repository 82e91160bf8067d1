"""`redfleet export JOB DIR`: workspace files out, nothing outside DIR, nothing overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.errors import CoordinatorError
from coordinator.export import export_job
from shared_state import JobSpec, State, Trust, keys

from .test_cli import assert_one_line_error, run


def _job_with_files(state: State, files: dict[str, str]) -> str:
    job = state.jobs.submit(JobSpec(goal="export me"))
    store = state.artifacts(job.job_id)
    for path, text in files.items():
        ref = store.put(text, kind="file", title=path)
        state.client.hset(keys.workspace(job.job_id), path, ref.id)
    return job.job_id


def test_export_writes_the_workspace_and_refuses_to_overwrite(
    state: State, redis_url: str, tmp_path: Path
) -> None:
    job_id = _job_with_files(state, {"greet.py": "def hi(): ...\n", "tests/test_greet.py": "x\n"})
    store = state.artifacts(job_id)
    store.put('{"verdicts": []}', kind="verdict", title="v", trust=Trust.TRUSTED)
    out = run("export", job_id, str(tmp_path / "out"), "--verdicts", "--json", url=redis_url)
    assert out.returncode == 0, out.stderr
    files = json.loads(out.stdout)["files"]
    assert (tmp_path / "out" / "greet.py").read_text() == "def hi(): ...\n"
    assert (tmp_path / "out" / "tests" / "test_greet.py").read_text() == "x\n"
    assert any(f.startswith(".redfleet/verdicts/") for f in files)
    again = run("export", job_id, str(tmp_path / "out"), url=redis_url)
    assert_one_line_error(again, "exist already", "--force")
    (tmp_path / "out" / "greet.py").write_text("changed")
    assert run("export", job_id, str(tmp_path / "out"), "--force", url=redis_url).returncode == 0
    assert (tmp_path / "out" / "greet.py").read_text() == "def hi(): ...\n"


@pytest.mark.parametrize(
    "path",
    [
        "../evil.py",
        "/etc/evil",
        "a/../../evil",
        "a//b",
        "./a",
        "a\\..\\b",
        "a\x00b",
        "~/x",
        ".git/config",
        "sub/.GIT/hooks/pre-commit",
        "fine.py/inner",
    ],
)
def test_a_workspace_path_that_escapes_or_clashes_is_refused_before_any_write(
    state: State, tmp_path: Path, path: str
) -> None:
    job_id = _job_with_files(state, {"fine.py": "ok\n", path: "evil\n"})
    with pytest.raises(CoordinatorError, match="workspace path"):
        export_job(state, job_id, tmp_path / "out", force=False, verdicts=False)
    assert not (tmp_path / "out").exists()  # nothing written, not even the fine file
    assert not (tmp_path / "evil.py").exists()


def test_a_symlink_in_the_folder_does_not_lead_out(state: State, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "link").symlink_to(outside)
    job_id = _job_with_files(state, {"link/pwned.py": "evil\n"})
    with pytest.raises(CoordinatorError, match="lands outside"):
        export_job(state, job_id, dest, force=True, verdicts=False)
    assert list(outside.iterdir()) == []


def test_a_link_planted_at_a_temporary_name_is_never_written_through(
    state: State, tmp_path: Path
) -> None:
    outside = tmp_path / "victim.txt"
    outside.write_text("keep me\n")
    dest = tmp_path / "out"
    dest.mkdir()
    # The names a temporary file of 'greet.py' had, and could have: all links to the victim.
    for name in (".greet.py.redfleet-tmp", ".greet.py.x.redfleet-tmp"):
        (dest / name).symlink_to(outside)
    job_id = _job_with_files(state, {"greet.py": "def hi(): ...\n"})
    export_job(state, job_id, dest, force=False, verdicts=False)
    assert outside.read_text() == "keep me\n"
    assert (dest / "greet.py").read_text() == "def hi(): ...\n"
    assert not (dest / "greet.py").is_symlink()
    leftovers = [p.name for p in dest.iterdir() if p.name.endswith(".redfleet-tmp")]
    assert sorted(leftovers) == [".greet.py.redfleet-tmp", ".greet.py.x.redfleet-tmp"]
