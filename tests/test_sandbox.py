"""The reviewer's checks: real pytest on materialized files, no network, bounded time and output."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.errors import ToolRefused
from workers.sandbox import MAX_LOG_BYTES, command_args, run_commands, run_pytest, with_item

MODULE = {"m.py": "def f():\n    return 1\n"}


def test_the_check_runs_pytest_on_exactly_the_given_files() -> None:
    files = {
        **MODULE,
        "tests/test_m.py": "from m import f\n\n\ndef test_f():\n    assert f() == 1\n",
    }
    ok = run_pytest(files, "tests/test_m.py")
    assert ok.passed and ok.exit_code == 0
    assert ok.log.startswith("$ python -m pytest -q -p no:cacheprovider tests/test_m.py\n")
    assert "1 passed" in ok.log
    broken = run_pytest({**files, "m.py": "def f():\n    return 2\n"}, "tests/test_m.py")
    assert not broken.passed and broken.exit_code == 1 and "assert 2 == 1" in broken.log


def test_checked_code_has_no_network() -> None:
    files = {"test_net.py": "import socket\n\n\ndef test_net():\n"
             "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"}  # fmt: skip
    run = run_pytest(files, "test_net.py")
    assert run.exit_code == 1 and "network access is disabled" in run.log


def test_a_hanging_check_is_killed_at_its_timeout() -> None:
    files = {"test_hang.py": "import time\n\n\ndef test_hang():\n    time.sleep(60)\n"}
    run = run_pytest(files, "test_hang.py", timeout_s=1)
    assert run.timed_out and not run.passed and "killed after the 1 s timeout" in run.log


def test_output_is_capped() -> None:
    files = {"test_loud.py": "def test_loud():\n    print('x' * 10_000_000)\n    assert 0\n"}
    run = run_pytest(files, "test_loud.py")
    assert not run.passed and run.log_bytes <= MAX_LOG_BYTES
    assert len(run.log.encode()) < MAX_LOG_BYTES + 500 and "output cut at" in run.log


@pytest.mark.parametrize("path", ["/etc/passwd", "../escape.py", "a/../../b.py", "", ".", "a/"])
def test_paths_outside_the_workspace_are_refused(path: str) -> None:
    with pytest.raises(ToolRefused, match="inside the workspace"):
        run_pytest({path: "x = 1\n"}, "test_x.py")


@pytest.mark.parametrize(
    ("check", "why"),
    [
        ("/etc/test_x.py", "inside the workspace"),
        ("../test_x.py::test_a", "inside the workspace"),
        ("test_x.py --basetemp=/tmp/x", "option --basetemp=/tmp/x is not allowed"),
        ("-p evil", "option -p is not allowed"),
        ("test_x.py -k", "-k needs an expression"),
        ("", "needs pytest arguments"),
    ],
)
def test_checks_are_limited_to_test_ids_in_the_workspace_and_a_few_options(
    check: str, why: str
) -> None:
    with pytest.raises(ToolRefused, match=why):
        run_pytest(MODULE, check)


def test_an_item_is_one_argument_that_no_shell_reads(tmp_path: Path) -> None:
    planted = tmp_path / "pwned"
    item = f"ok'$(touch {planted})' --version"
    argv = command_args("sh -c 'echo \"[$1]\"' item {item}")
    (run,) = run_commands({"a.txt": "x\n"}, [("check", with_item(argv, item))])
    assert run.passed and f"[{item}]" in run.log  # printed as it is, not run
    assert not planted.exists()
    with pytest.raises(ToolRefused, match="must be an argument of its own"):
        command_args("sh -c 'echo {item}'")


def test_a_check_of_any_kind_runs_under_the_caps_and_keeps_its_mode() -> None:
    script = "#!/bin/sh\nhead -c 3000000 /dev/zero\n"
    argv = command_args("./big.sh")
    (run,) = run_commands({"big.sh": script}, [("check", argv)], modes={"big.sh": 0o755})
    assert not run.passed  # the file-size cap stopped it
    assert run.log_bytes <= MAX_LOG_BYTES
    (plain,) = run_commands({"big.sh": script}, [("check", argv)])  # no +x: a failed run
    assert plain.exit_code == 126 and "cannot run it" in plain.log
