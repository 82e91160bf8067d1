"""Which Redis the CLI talks to: ``REDIS_URL``, or an embedded server.

Without ``REDIS_URL`` the CLI uses one embedded redis-server per
``REDFLEET_HOME`` (default ``~/.local/state/redfleet``): the first command
that needs it starts it in the background, with an append-only file in that
folder, and later commands — a fleet in one terminal, ``submit`` in another —
find it through ``server.json``. ``redfleet server stop`` stops it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from shared_state import RedisServer, State

from .settings import Settings


class Embedded:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.info_path = home / "server.json"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / "server.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def status(self) -> dict[str, Any] | None:
        """The running server's {url, pid, port, run_id}, or None."""
        try:
            info = json.loads(self.info_path.read_text())
            client = redis.Redis.from_url(info["url"], socket_connect_timeout=0.5)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent or unreadable: treated as no server
        try:
            run_id = client.info("server").get("run_id")
        except redis.RedisError:
            return None
        finally:
            client.close()
        return info if run_id == info.get("run_id") else None

    def ensure(self) -> str:
        """URL of the embedded server, starting it if it is not running."""
        with self._locked():
            info = self.status()
            if info:
                return info["url"]
            server = RedisServer(data_dir=self.home / "redis").start(detach=True)
            client = redis.Redis.from_url(server.url)
            run_id = client.info("server")["run_id"]
            client.close()
            info = {
                "url": server.url,
                "pid": server.process.pid if server.process else 0,
                "port": server.port,
                "run_id": run_id,
            }
            self.info_path.write_text(json.dumps(info))
            return server.url

    def stop(self) -> bool:
        """Shut the embedded server down; False if none was running."""
        with self._locked():
            info = self.status()
            if not info:
                return False
            client = redis.Redis.from_url(info["url"])
            with contextlib.suppress(redis.ConnectionError):
                client.shutdown()  # the server closes the connection as it exits
            self.info_path.unlink(missing_ok=True)
            return True


def redis_url(settings: Settings) -> str:
    return settings.redis_url or Embedded(settings.home).ensure()


def open_state(settings: Settings, url: str | None = None) -> State:
    return State.connect(
        url or redis_url(settings),
        retention_s=settings.retention_s,
        job_maxlen=settings.job_stream_maxlen,
        global_maxlen=settings.events_maxlen,
    )
