"""How a worker process reaches its model providers over HTTP: urllib3's connection pools.

One ``Transport`` per process (``shared_transport``), shared by its task
slots: a pool per origin, its connections kept alive (no new TCP and TLS
handshake a call) for up to ``IDLE_S`` unused (a NAT or load balancer may
drop an idle flow without a word; a call sent on it would wait out its
timeout), and checked before reuse (one the server closed is replaced, not
sent on). Certificates are checked against ``SSL_CERT_FILE`` or
``SSL_CERT_DIR`` when set (a proxy that re-signs TLS with its own CA), else
certifi's roots. A proxy is taken from the environment, as curl and httpx
take it: ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` (any case) by the
URL's scheme, ``NO_PROXY`` for the hosts (or host:port) that bypass it; an
HTTPS URL goes through an ``http://`` proxy by CONNECT, and a proxy URL's
user and password are sent as its Basic credentials. A proxy setting that
cannot be used is refused when the transport is made (a worker's start),
not call after call.

Why urllib3 and not httpx (which the embeddings endpoint and the benchmarks
still use): a model call costs its worker about half the CPU through it
(``benchmarks/fleet_scale.py`` counts the ``call`` phase: 2.0-2.5 ms a call
with httpx, 1.0-1.3 with this, side by side), and a fleet makes hundreds of
calls a second.

Every attempt is one request: nothing is retried here (``HttpJson`` decides
what is retried, and how long to wait), and a redirect is returned, not
followed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from base64 import b64encode
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit
from urllib.request import getproxies_environment, proxy_bypass_environment

import certifi
import urllib3
from urllib3 import HTTPHeaderDict
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util import parse_url

from ..errors import BadRequest

# An attempt that got no answer: no connection, a reset, a timeout, a proxy or TLS failure.
TransportError = urllib3.exceptions.HTTPError
KEEP_ALIVE = 256  # connections kept per origin (beyond them a call opens, then closes one)
IDLE_S = 5.0  # a connection unused this long is closed, not reused (httpx's default too)
ORIGINS_KEPT = 64  # endpoint URLs whose pool and target are kept (``Transport._origin``)
USER_AGENT = "redfleet"


@dataclass(frozen=True)
class Reply:
    """A provider's answer: status, headers (any case), body."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    reason_phrase: str = ""

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class Transport:
    """The process's connections to its providers, direct or through the environment's
    proxy; safe to share between threads."""

    def __init__(self) -> None:
        """ValueError, naming the variable, for a proxy setting that cannot be used."""
        self._proxies = getproxies_environment()  # by scheme; "no": the hosts that bypass
        self._pools = {**_roots(), "maxsize": KEEP_ALIVE, "retries": False}
        self._direct = _expiring(urllib3.PoolManager(**self._pools))
        self._origins: dict[str, tuple[HTTPConnectionPool, str]] = {}  # by URL (``_origin``)
        self._via = {
            scheme: _proxy_manager(scheme, self._proxies[scheme], self._pools)
            for scheme in ("http", "https", "all")
            if self._proxies.get(scheme)
        }

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> Reply:
        """POST ``body`` (JSON) once; TransportError if no answer came, BadRequest for a
        request that cannot be sent as it is (nothing of it is sent)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            # urllib3 would take a URL without a scheme as plain HTTP: a key sent in the clear.
            raise BadRequest("the model's endpoint must start with https:// or http://")
        every = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
        timeout = urllib3.Timeout(connect=timeout_s, read=timeout_s)
        try:
            manager = self._manager(parts.scheme, parts.hostname or "", parts.port)
            if manager is self._direct:
                pool, target = self._origin(url)
                answer = pool.urlopen(
                    "POST", target, body=body, headers=HTTPHeaderDict(every), timeout=timeout,
                    redirect=False, assert_same_host=False,
                )  # fmt: skip
            else:
                answer = manager.request(
                    "POST", url, body=body, headers=every, timeout=timeout, redirect=False
                )
        except ValueError as exc:  # a header HTTP cannot carry, a malformed URL
            # Never the error's own words: they quote the header's value (an API key).
            raise BadRequest(
                f"the request could not be sent ({type(exc).__name__}): the endpoint's URL is "
                "malformed, or a header (an API key) holds a line break or a non-ASCII character"
            ) from None
        return Reply(answer.status, answer.headers, answer.data, answer.reason or "")

    def _origin(self, url: str) -> tuple[HTTPConnectionPool, str]:
        """The direct pool of ``url``'s origin and the target to send it, as the pool
        manager would take them (its ``urlopen``), kept per URL: a process calls one or two
        endpoints, and finding them again parsed the URL twice and built the pool's key
        every call (~40 µs of a call's ~330 through the manager). The manager closes no
        pool it holds or drops, so a kept one stays usable."""
        found = self._origins.get(url)
        if found is None:
            found = self._direct.connection_from_url(url), parse_url(url).request_uri
            if len(self._origins) >= ORIGINS_KEPT:
                self._origins.clear()
            self._origins[url] = found
        return found

    def _manager(self, scheme: str, host: str, port: int | None) -> urllib3.PoolManager:
        manager = self._via.get(scheme) or self._via.get("all")
        if manager is None or self._bypass(host, port):
            return self._direct
        return manager

    def _bypass(self, host: str, port: int | None) -> bool:
        """Whether ``NO_PROXY`` names the host, or the host and port."""
        return bool(
            proxy_bypass_environment(host, self._proxies)
            or (port and proxy_bypass_environment(f"{host}:{port}", self._proxies))
        )


def _roots() -> dict[str, str]:
    """The certificates TLS is checked against: ``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else
    certifi's (as httpx and OpenSSL's tools read them)."""
    cafile, capath = os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", "")
    if cafile and os.path.isfile(cafile):
        return {"ca_certs": cafile}
    if capath and os.path.isdir(capath):
        return {"ca_cert_dir": capath}
    return {"ca_certs": certifi.where()}


def _proxy_manager(scheme: str, proxy: str, pools: dict[str, Any]) -> urllib3.ProxyManager:
    """A pool manager through ``proxy`` (``[http://][user:password@]host:port``), the
    setting of ``<scheme>_proxy``; ValueError naming it (never its password) if unusable."""
    name = f"{scheme.upper()}_PROXY"
    if "://" not in proxy:
        proxy = f"http://{proxy}"  # as curl: a bare host:port is an HTTP proxy
    parts = urlsplit(proxy)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{name}: a {parts.scheme}:// proxy is not supported (http(s):// is)")
    headers = {}
    if parts.username is not None:
        # UTF-8, as curl and httpx send it (urllib3's own helper would send Latin-1).
        secret = unquote_to_bytes(parts.username) + b":" + unquote_to_bytes(parts.password or "")
        headers["Proxy-Authorization"] = "Basic " + b64encode(secret).decode()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)  # ValueError: not a number
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        # The address without the credentials: they go in the header only.
        manager = urllib3.ProxyManager(
            f"{parts.scheme}://{host}:{port}", proxy_headers=headers, **pools
        )
    except ValueError:  # urllib3's LocationParseError is one
        raise ValueError(f"{name}: not a proxy address (expected http://host:port)") from None
    return _expiring(manager)


class _ExpiringHTTPPool(HTTPConnectionPool):
    """A pool whose connections idle past ``IDLE_S`` are closed before reuse."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        idle_since = getattr(conn, "redfleet_idle_since", None)
        if idle_since is not None and time.monotonic() - idle_since > IDLE_S:
            conn.close()  # reconnected when next used, as urllib3 does a dropped one
        return conn

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            conn.redfleet_idle_since = time.monotonic()
        super()._put_conn(conn)


class _ExpiringHTTPSPool(_ExpiringHTTPPool, HTTPSConnectionPool):
    pass


def _expiring(manager: urllib3.PoolManager) -> urllib3.PoolManager:
    manager.pool_classes_by_scheme = {"http": _ExpiringHTTPPool, "https": _ExpiringHTTPSPool}
    return manager


_shared: Transport | None = None
_shared_lock = threading.Lock()


def shared_transport() -> Transport:
    """The process's one transport: every task slot's model calls share its pools."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Transport()
        return _shared
