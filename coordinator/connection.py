"""Which Redis the CLI talks to: ``REDIS_URL``, or an embedded server.

Without ``REDIS_URL`` the CLI uses one embedded redis-server per
``REDFLEET_HOME`` (default ``~/.local/state/redfleet``): the first command
that needs it starts it in the background, with an append-only file in that
folder, and later commands — a fleet in one terminal, ``submit`` in another —
find it through ``server.json``. That file describes the last server started;
a new start reuses its port when nobody listens there, so a fleet that keeps
retrying the old URL reconnects to the same data. ``redfleet server stop``
stops the server, and refuses while workers or other clients are connected
unless forced.

Durability. The embedded server fsyncs its append-only file before it replies
(``appendfsync always``, see ``shared_state.server``): every write it
acknowledged survives a crash of the server and a power loss, at the cost of
one fsync per batch of writes. An external Redis (``REDIS_URL``) keeps what
its configuration keeps: ``appendonly yes`` with ``appendfsync always`` gives
the same guarantee; with ``appendfsync everysec`` (Redis's default once the
append-only file is on) a crash or power loss can lose up to about a second
of acknowledged writes (two when the disk is slow); without an append-only
file, everything written since the last RDB snapshot. A failover to a replica
can lose acknowledged writes whatever the fsync policy: replication is
asynchronous.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from shared_state import ConnectionFailed, RedisServer, State, free_port
from shared_state.client import ClientOptions, connect
from shared_state.server import wait_until_loaded

from . import collector
from .durability import Durability
from .errors import CoordinatorError
from .settings import Settings

START_TIMEOUT_S = 60.0  # answering and loading: a large append-only file takes a while


def _admin_client(url: str) -> redis.Redis:
    # No retries inside the client: a server that does not answer is reported as not
    # running at once, and SHUTDOWN's dropped connection is its success.
    return connect(url, ClientOptions(retries=0, connect_timeout_s=0.5))


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

    def _recorded(self) -> dict[str, Any] | None:
        """The last started server's {url, pid, port, run_id} from server.json, or None."""
        try:
            info = json.loads(self.info_path.read_text())
        except (OSError, ValueError):
            return None  # absent or unreadable: treated as no server
        return info if isinstance(info, dict) and isinstance(info.get("url"), str) else None

    def status(self) -> dict[str, Any] | None:
        """The running server's {url, pid, port, run_id}, or None; waits while it loads."""
        info = self._recorded()
        if info is None:
            return None
        try:
            client = _admin_client(info["url"])
        except ConnectionFailed:
            return None  # a malformed URL in server.json
        try:
            if client.info("server").get("run_id") != info.get("run_id"):
                return None  # another server took the port
            wait_until_loaded(client, START_TIMEOUT_S)
        except redis.RedisError:
            return None
        finally:
            client.close()
        return info

    def ensure(self) -> str:
        """URL of the embedded server, starting it if it is not running.

        A new server takes the port of the last one if that port is free.
        """
        with self._locked():
            info = self.status()
            if info:
                return info["url"]
            last = self._recorded() or {}
            port = free_port(last["port"] if isinstance(last.get("port"), int) else 0)
            server = RedisServer(port=port, data_dir=self.home / "redis").start(
                detach=True, timeout_s=START_TIMEOUT_S
            )
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

    def stop(self, *, force: bool = False) -> bool:
        """Shut the embedded server down; False if none was running.

        Unless ``force``, CoordinatorError while workers beat or other clients are
        connected: a fleet whose server went away keeps retrying its URL.
        server.json stays, so that the next start takes the same port.
        """
        with self._locked():
            info = self.status()
            if not info:
                return False
            client = _admin_client(info["url"])
            try:
                if not force:
                    _refuse_if_in_use(client, info["url"])
                client.shutdown()  # redis-py takes the dropped connection for success
            finally:
                client.close()
            return True


def _refuse_if_in_use(client: redis.Redis, url: str) -> None:
    """CoordinatorError naming the live workers and counting the other connections."""
    workers = [w.worker_id for w in State(client).workers.list()]
    own = client.client_id()
    others = [c for c in client.client_list() if int(c["id"]) != own]
    parts = []
    if workers:
        parts.append(f"{_count(len(workers), 'live worker')} ({', '.join(workers)})")
    if others:
        parts.append(_count(len(others), "client connection"))
    if parts:
        raise CoordinatorError(
            f"not stopping the embedded Redis at {url}: {' and '.join(parts)}; "
            "stop the fleet first, or run `redfleet server stop --force`"
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def redis_url(settings: Settings) -> str:
    return settings.redis_url or Embedded(settings.home).ensure()


def demo_url(settings: Settings) -> str:
    """The URL of the demo's own server when it runs and the CLI is on its embedded one
    (no REDIS_URL), else "": the demo's jobs are there, not where `status` looks."""
    if settings.redis_url:
        return ""
    running = Embedded(settings.home / "demo").status()
    return running["url"] if running else ""


# A command a person waits for retries a lost reply or a blip (under 2 s in all
# against a server that refuses; each try on a stalled one ends after 5 s),
# then says Redis is unreachable; a fleet, a worker or a reaper rides out a
# restart with the full retry budget of ``ClientOptions``.
INTERACTIVE = ClientOptions(retries=4)


def open_state(
    settings: Settings | None = None, url: str | None = None, *, serving: bool = False
) -> State:
    """The state over ``url`` (else REDIS_URL or the embedded server), with ``settings``
    (else the environment's).

    ``serving``: for long-running processes (a fleet, a worker, the reaper),
    which serve every tenant; any other sees only ``settings.tenant``'s jobs
    when that is set (``--tenant``, REDFLEET_TENANT).
    """
    collector.release(collect=serving)  # a command's imports are done by now
    settings = settings or Settings()
    state = State.connect(
        url or redis_url(settings),
        client_options=None if serving else INTERACTIVE,
        retention_s=settings.retention_s,
        job_maxlen=settings.job_stream_maxlen,
        global_maxlen=settings.events_maxlen,
        replicas=1 if settings.durability is Durability.REPLICATED else 0,
    )
    return state if serving else state.for_tenant(settings.tenant)
