"""Run a workspace's checks: files materialized in a temporary directory, pytest run there.

The reviewer runs ``python -m pytest -q <check>`` against exactly the files
the coders wrote, nothing else: a fresh temporary directory, a wall-clock
timeout (the process group is killed), no network (an audit hook refuses
every socket connect and name lookup in the checked code) and a cap on the
output kept (the log file cannot grow past it). The raw log is the evidence.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import ToolRefused

TIMEOUT_S = 60.0
MAX_LOG_BYTES = 256 * 1024

# Loaded first by the checked interpreter (PYTHONPATH): audit hooks cannot be removed,
# and the file-size limit holds for the log it writes and for every process it starts.
_GUARD = f"""import resource
import sys

resource.setrlimit(resource.RLIMIT_FSIZE, ({MAX_LOG_BYTES}, {MAX_LOG_BYTES}))


def _refuse(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto", "socket.bind"):
        raise PermissionError("network access is disabled while checks run")


sys.addaudithook(_refuse)
"""


@dataclass(frozen=True)
class CheckRun:
    check: str
    exit_code: int
    timed_out: bool
    log: str
    log_bytes: int  # as written; the log kept is at most MAX_LOG_BYTES
    seconds: float

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def workspace_path(path: str) -> PurePosixPath:
    """A relative path inside the workspace, or ToolRefused naming what is wrong."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or path.startswith("~"):
        raise ToolRefused(f"path {path!r} must be relative and stay inside the workspace")
    return pure


def pytest_args(check: str) -> list[str]:
    try:
        args = shlex.split(check)
    except ValueError as exc:
        raise ToolRefused(f"check {check!r} is not a valid argument list: {exc}") from exc
    if not args:
        raise ToolRefused("a check needs pytest arguments, e.g. 'test_mod.py::test_name'")
    return args


def run_pytest(files: Mapping[str, str], check: str, *, timeout_s: float = TIMEOUT_S) -> CheckRun:
    """Materialize ``files`` (path -> text) and run ``python -m pytest -q <check>`` on them."""
    args = pytest_args(check)
    with tempfile.TemporaryDirectory(prefix="redfleet-check-") as tmp:
        root, guard = Path(tmp, "workspace"), Path(tmp, "guard")
        guard.mkdir()
        (guard / "sitecustomize.py").write_text(_GUARD)
        for path, text in files.items():
            target = root / workspace_path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        root.mkdir(exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "PYTHONPATH": str(guard),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
        log_path = Path(tmp, "log")
        started = time.monotonic()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                command,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code, timed_out = proc.wait(timeout_s), False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code, timed_out = proc.wait(), True
        size = log_path.stat().st_size
        output = log_path.read_bytes()[:MAX_LOG_BYTES].decode(errors="replace")
    # The command heads the log: the evidence says what was run, and two checks with
    # the same output stay two artifacts.
    text = f"$ {shlex.join(['python', *command[1:]])}\n{output}"
    if timed_out:
        text += f"\n[killed after the {timeout_s:.0f} s timeout]"
    elif size >= MAX_LOG_BYTES:
        text += f"\n[output cut at {MAX_LOG_BYTES} bytes]"
    return CheckRun(check, code, timed_out, text, size, time.monotonic() - started)
