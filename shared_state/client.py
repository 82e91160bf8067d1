"""Redis clients that survive a real network: timeouts, keepalive, retries with backoff.

``redis.Redis.from_url`` alone retries nothing and waits forever on a silent
peer. Every client redfleet makes comes from ``connect`` with
``ClientOptions``: a socket timeout (a stalled connection raises instead of
hanging), TCP keepalive (a dead peer is noticed while idle), a health check
before reusing an idle connection, and retries of connection errors and
timeouts with jittered exponential backoff — long enough to ride out a Redis
restart. A retry re-sends the same command, so every script is idempotent
for its caller (see ``lua/``): a reply lost on the wire never doubles an effect.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from typing import Any

import redis
from redis.backoff import EqualJitterBackoff
from redis.retry import Retry

from .errors import ConnectionFailed
from .redact import redact


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """How a client talks to Redis.

    The default retry budget (12 retries, backoff from 0.1 s doubling to 2 s,
    jittered) waits 10 to 19 s for a server that refuses connections, and each
    attempt on a stalled connection ends after ``socket_timeout_s``.
    """

    socket_timeout_s: float = 5.0
    connect_timeout_s: float = 3.0
    retries: int = 12
    backoff_base_s: float = 0.05
    backoff_cap_s: float = 2.0
    health_check_interval_s: int = 10
    keepalive_idle_s: int = 10
    keepalive_interval_s: int = 3
    keepalive_count: int = 3
    client_name: str | None = None  # CLIENT SETNAME on every connection: who it is, in CLIENT LIST

    def with_(self, **changes: Any) -> ClientOptions:
        return replace(self, **changes)

    def kwargs(self, *, tcp: bool = True) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis``; ``tcp`` False for a unix socket."""
        keepalive = {}
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; macOS names them differently
            keepalive = {
                socket.TCP_KEEPIDLE: self.keepalive_idle_s,
                socket.TCP_KEEPINTVL: self.keepalive_interval_s,
                socket.TCP_KEEPCNT: self.keepalive_count,
            }
        tcp_only = {"socket_keepalive": True, "socket_keepalive_options": keepalive}
        return {
            **(tcp_only if tcp else {}),
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": self.connect_timeout_s,
            "health_check_interval": self.health_check_interval_s,
            "retry": Retry(
                EqualJitterBackoff(self.backoff_cap_s, self.backoff_base_s), self.retries
            ),
            "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
            "client_name": self.client_name,
        }


def _translated(exc: Exception) -> ConnectionFailed:
    return ConnectionFailed(redact(f"Redis unreachable: {exc}"))


class _Pipeline(redis.client.Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except ConnectionFailed:
            raise
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise _translated(exc) from exc


class Client(redis.Redis):
    """A ``redis.Redis`` whose lost connections and timeouts, once its retries are spent,
    are ``ConnectionFailed``: translated here, once, for every command and pipeline, so
    a caller catches one exception (a ``StateError``, and a ``redis.ConnectionError`` for
    code that expects redis-py's)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except ConnectionFailed:
            raise
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise _translated(exc) from exc

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> _Pipeline:
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def connect(url: str, options: ClientOptions | None = None) -> Client:
    """A client for ``url`` (not yet connected); ConnectionFailed for a malformed URL."""
    try:
        tcp = not url.startswith("unix:")
        return Client.from_url(url, **(options or ClientOptions()).kwargs(tcp=tcp))
    except ValueError as exc:
        raise ConnectionFailed(redact(f"bad Redis URL {url!r}: {exc}")) from exc


def sibling(client: redis.Redis, options: ClientOptions, *, for_rq: bool = False) -> redis.Redis:
    """A client to the same server with its own connection pool and ``options``.

    For a thread that must not share timeouts with the rest of the process:
    the heartbeat (short timeout, its own tick is the retry) and RQ's blocking
    dequeue (RQ raises the socket timeout of the client it is given). ``for_rq``:
    a plain ``redis.Redis``, raising redis-py's errors, as RQ expects.
    """
    old = client.connection_pool
    tcp = not issubclass(old.connection_class, redis.UnixDomainSocketConnection)
    kwargs = {**old.connection_kwargs, **options.kwargs(tcp=tcp)}
    pool = old.__class__(connection_class=old.connection_class, **kwargs)
    return redis.Redis(connection_pool=pool) if for_rq else Client(connection_pool=pool)
