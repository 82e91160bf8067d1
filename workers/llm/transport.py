"""How a worker process reaches its model providers over HTTP: urllib3's connection pools.

One ``Transport`` per process (``shared_transport``), shared by its task
slots: a pool per origin, its connections kept alive (no new TCP and TLS
handshake a call) and checked before reuse (one the server closed while
idle is replaced, not sent on). Certificates are checked against certifi's
roots. A proxy is taken from the environment, as curl and httpx take it:
``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` (any case) by the URL's
scheme, ``NO_PROXY`` for the hosts that bypass it; an HTTPS URL goes
through an ``http://`` proxy by CONNECT, and a proxy URL's user and
password are sent as its Basic credentials.

Why urllib3 and not httpx (which the embeddings endpoint and the benchmarks
still use): a model call costs its worker 0.35-0.6 ms less CPU through it,
measured side by side (``benchmarks/fleet_scale.py`` counts the ``call``
phase), and a fleet makes hundreds of calls a second.

Every attempt is one request: nothing is retried here (``HttpJson`` decides
what is retried, and how long to wait), and a redirect is returned, not
followed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies_environment, proxy_bypass_environment

import certifi
import urllib3

# An attempt that got no answer: no connection, a reset, a timeout, a proxy or TLS failure.
TransportError = urllib3.exceptions.HTTPError
KEEP_ALIVE = 256  # connections kept per origin (beyond them a call opens, then closes one)


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
        self._proxies = getproxies_environment()  # by scheme; "no": the hosts that bypass
        self._pools = {"ca_certs": certifi.where(), "maxsize": KEEP_ALIVE, "retries": False}
        self._direct = urllib3.PoolManager(**self._pools)
        self._via: dict[str, urllib3.ProxyManager] = {}
        self._lock = threading.Lock()

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> Reply:
        """POST ``body`` (JSON) once; TransportError if no answer came."""
        answer = self._manager(url).request(
            "POST",
            url,
            body=body,
            headers={"Content-Type": "application/json", **headers},
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
            redirect=False,
        )
        return Reply(answer.status, answer.headers, answer.data, answer.reason or "")

    def _manager(self, url: str) -> urllib3.PoolManager:
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme) or self._proxies.get("all")
        if not proxy or proxy_bypass_environment(parts.hostname or "", self._proxies):
            return self._direct
        with self._lock:
            manager = self._via.get(proxy)
            if manager is None:
                manager = self._via[proxy] = _proxy_manager(proxy, self._pools)
            return manager


def _proxy_manager(proxy: str, pools: dict[str, Any]) -> urllib3.ProxyManager:
    """A pool manager through ``proxy`` (``http://[user:password@]host:port``)."""
    if "://" not in proxy:
        proxy = f"http://{proxy}"  # as curl: a bare host:port is an HTTP proxy
    parts = urlsplit(proxy)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"a {parts.scheme}:// proxy is not supported (http:// and https:// are)")
    headers = {}
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers = urllib3.make_headers(proxy_basic_auth=credentials)
    address = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # without the credentials
    return urllib3.ProxyManager(address, proxy_headers=headers, **pools)


_shared: Transport | None = None
_shared_lock = threading.Lock()


def shared_transport() -> Transport:
    """The process's one transport: every task slot's model calls share its pools."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Transport()
        return _shared
