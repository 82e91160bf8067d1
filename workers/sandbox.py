"""Run a workspace's checks: files materialized in a temporary directory, the check run there.

The reviewer runs a feature's ``python -m pytest -q <check>`` against the
job's files (the workspace it was submitted with and what the coders wrote),
or the workspace's own check command (``submit --check``: the user's, never a
model's): a fresh temporary directory, a pytest check limited to test ids in
that directory and the ``-k``/``-m``/``-x`` options, a wall-clock timeout
(the process group is killed, also after a normal exit), no network for
Python code (an audit hook refuses socket connects and name lookups), and,
for a check of any kind (a shell script, a binary) and every process it
starts, limits on file size (the log cannot grow past its cap), memory and
CPU time, set by a launcher that then execs the check. A check's ``{item}``
is one argument, replaced by one item as it is: no shell reads it. The raw
log is the evidence.

This is a guard against accidents, not a security boundary: the checked code
runs as the worker's user. When the model or its inputs are not trusted,
run the workers in a container (see the Dockerfile) or a sandbox of the
operating system.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import ToolRefused

TIMEOUT_S = 60.0
MAX_LOG_BYTES = 256 * 1024
MAX_MEMORY_BYTES = 2 * 1024**3
MAX_CPU_S = 120
OPTIONS_WITH_VALUE = ("-k", "-m")
FLAGS = ("-x",)
ITEM = "{item}"  # in a workspace's check: replaced by one item, as one argument

# Loaded first by a checked Python interpreter (PYTHONPATH): audit hooks cannot be removed.
# (The caps on file size, memory and CPU come from the launcher, for checks of any kind.)
_GUARD = """import sys


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
    if (
        not pure.parts
        or pure.is_absolute()
        or ".." in pure.parts
        or path.startswith("~")
        or "\x00" in path
        or path.endswith("/")
    ):
        raise ToolRefused(f"path {path!r} must name a file inside the workspace")
    return pure


def pytest_args(check: str) -> list[str]:
    """A check's pytest arguments: test ids inside the workspace, -k/-m expressions, -x."""
    try:
        args = shlex.split(check)
    except ValueError as exc:
        raise ToolRefused(f"check {check!r} is not a valid argument list: {exc}") from exc
    if not args:
        raise ToolRefused("a check needs pytest arguments, e.g. 'test_mod.py::test_name'")
    given = iter(args)
    for arg in given:
        if arg in OPTIONS_WITH_VALUE:
            if next(given, None) is None:
                raise ToolRefused(f"check {check!r}: {arg} needs an expression")
        elif arg.startswith("-") and arg not in FLAGS:
            raise ToolRefused(f"check {check!r}: option {arg} is not allowed (only -k, -m, -x)")
        elif not arg.startswith("-"):
            workspace_path(arg.split("::", 1)[0])
    return args


def run_pytest(
    files: Mapping[str, str | bytes],
    check: str,
    *,
    modes: Mapping[str, int] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> CheckRun:
    """Materialize ``files`` (path -> text or bytes; ``modes``: their permission bits) and
    run ``python -m pytest -q <check>``."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args(check)]
    return run_commands(files, [(check, command)], modes=modes, timeout_s=timeout_s)[0]


def command_args(command: str) -> list[str]:
    """The argv of a workspace's own check command; ``python`` and ``pytest`` are this
    interpreter's (the fleet's environment), anything else is looked up on PATH. No shell
    reads it: ``{item}`` may only be an argument of its own (see ``with_item``)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ToolRefused(f"check {command!r} is not a valid command line: {exc}") from exc
    if not argv:
        raise ToolRefused("the workspace's check command is empty")
    inside = [a for a in argv if ITEM in a and a != ITEM]
    if inside:
        raise ToolRefused(
            f"check {command!r}: {ITEM} inside the argument {inside[0]!r}; it must be an "
            f"argument of its own (e.g. python validate.py {ITEM}), so an item is never "
            "read by a shell"
        )
    if argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    if argv[0] == "pytest":
        return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv[1:]]
    return argv


def with_item(argv: Sequence[str], item: str) -> list[str]:
    """``argv`` with each ``{item}`` argument replaced by the item, exactly (one argument,
    whatever it holds: quotes, spaces and ``$(...)`` included)."""
    return [item if a == ITEM else a for a in argv]


def run_command(
    files: Mapping[str, str | bytes],
    command: str,
    *,
    modes: Mapping[str, int] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> CheckRun:
    """Materialize ``files`` and run the workspace's own check ``command`` in them."""
    argv = command_args(command)
    return run_commands(files, [(command, argv)], modes=modes, timeout_s=timeout_s)[0]


def run_commands(
    files: Mapping[str, str | bytes],
    runs: Sequence[tuple[str, list[str]]],
    *,
    modes: Mapping[str, int] | None = None,
    between: Callable[[], None] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> list[CheckRun]:
    """Materialize ``files`` once and run each (label, argv) in them, one after another (a
    job over many items checks each item so; the runs share that one copy of the files).
    ``between`` is called before each run: a lease check, so a long series stops at once
    when the task is lost, and shows its worker is making progress."""
    with _materialized(files, modes) as place:
        done = []
        for label, argv in runs:
            if between is not None:
                between()
            done.append(_run(place, label, argv, timeout_s))
        return done


@dataclass(frozen=True)
class _Place:
    tmp: Path
    root: Path
    env: dict[str, str]


@contextlib.contextmanager
def _materialized(
    files: Mapping[str, str | bytes], modes: Mapping[str, int] | None
) -> Iterator[_Place]:
    with tempfile.TemporaryDirectory(prefix="redfleet-check-") as tmp:
        root, guard = Path(tmp, "workspace"), Path(tmp, "guard")
        guard.mkdir()
        (guard / "sitecustomize.py").write_text(_GUARD)
        for path, text in files.items():
            target = root / workspace_path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                target.write_bytes(text)
            else:
                target.write_text(text)
            if modes and path in modes:
                target.chmod(modes[path] & 0o777)  # a script the check runs keeps its +x
        root.mkdir(exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "PYTHONPATH": str(guard),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        yield _Place(Path(tmp), root, env)


# Every check starts through this: it sets the caps, then execs the check (a shell script,
# a binary, python) in its place, so the caps hold for whatever kind it is and every process
# it starts. (Not a preexec_fn: a worker runs threads, and forking them is not safe there.)
_LAUNCH = f"""import os, resource, sys
for limit, value in ((resource.RLIMIT_FSIZE, {MAX_LOG_BYTES}),
                     (resource.RLIMIT_AS, {MAX_MEMORY_BYTES}), (resource.RLIMIT_CPU, {MAX_CPU_S})):
    resource.setrlimit(limit, (value, value))
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except FileNotFoundError:
    print(sys.argv[1] + ": command not found")
    sys.exit(127)
except OSError as exc:
    print(sys.argv[1] + ": cannot run it (" + exc.strerror + ")")
    sys.exit(126)
"""


def _run(place: _Place, check: str, command: list[str], timeout_s: float) -> CheckRun:
    log_path = place.tmp / "log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-S", "-E", "-c", _LAUNCH, *command],
            cwd=place.root,
            env=place.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code, timed_out = proc.wait(timeout_s), False
        except subprocess.TimeoutExpired:
            code, timed_out = None, True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the tests left running, too
        if code is None:
            code = proc.wait()
    size = log_path.stat().st_size
    with log_path.open("rb") as log:
        output = log.read(MAX_LOG_BYTES).decode(errors="replace")
    # The command heads the log: the evidence says what was run, and two checks with
    # the same output stay two artifacts.
    shown = ["python", *command[1:]] if command[0] == sys.executable else command
    text = f"$ {shlex.join(shown)}\n{output}"
    if timed_out:
        text += f"\n[killed after the {timeout_s:.0f} s timeout]"
    elif size >= MAX_LOG_BYTES:
        text += f"\n[output cut at {MAX_LOG_BYTES} bytes]"
    return CheckRun(check, code, timed_out, text, size, time.monotonic() - started)
