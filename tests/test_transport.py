"""The model calls' HTTP transport on real sockets: the environment's proxy, kept-alive
connections the server closed."""

from __future__ import annotations

import http.client
import threading
from base64 import b64decode
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from workers.llm import HttpJson, RetryPolicy
from workers.llm.transport import Transport

from .loopback import Loopback

ONCE = RetryPolicy(attempts=1, timeout_s=5)
ANSWER = {"choices": [{"message": {"content": "ok"}}]}


class ForwardProxy:
    """An HTTP forward proxy on loopback: records each request line and its credentials,
    and passes the request on."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (request target, Proxy-Authorization)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                proxy.seen.append((self.path, self.headers.get("proxy-authorization", "")))
                target = urlsplit(self.path)
                body = self.rfile.read(int(self.headers["content-length"]))
                upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=5)
                headers = {"content-type": self.headers["content-type"]}
                upstream.request("POST", target.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    forward = ForwardProxy()
    yield forward
    forward.close()


def test_a_call_goes_through_the_environments_proxy_with_its_credentials(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://fleet:p%40ss@127.0.0.1:{proxy.port}")
    with Loopback() as server:
        server.answer(200, ANSWER)
        http = HttpJson("openai", ONCE, transport=Transport())
        assert http.post(f"{server.url}/v1/chat/completions", {"n": 1}, {}) == ANSWER
    assert server.requests[0]["json"] == {"n": 1}
    ((target, credentials),) = proxy.seen
    assert target == f"{server.url}/v1/chat/completions"  # the absolute form, as to a proxy
    scheme, _, encoded = credentials.partition(" ")
    assert (scheme, b64decode(encoded)) == ("Basic", b"fleet:p@ss")


def test_a_host_in_no_proxy_is_reached_directly(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    with Loopback() as server:
        server.answer(200, ANSWER)
        http = HttpJson("openai", ONCE, transport=Transport())
        assert http.post(f"{server.url}/v1/chat/completions", {"n": 1}, {}) == ANSWER
    assert proxy.seen == []


def test_a_kept_alive_connection_the_server_closed_is_replaced_not_sent_on() -> None:
    """The server keeps no connection alive after answering, without saying so: the pool's
    connection is dead when the next call comes, and that call, allowed one attempt, is
    sent on a new one."""
    closed = threading.Semaphore(0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as far as the client can tell

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def shutdown_request(self, request: socket) -> None:  # type: ignore[override]
            super().shutdown_request(request)
            closed.release()

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        http = HttpJson("openai", ONCE, transport=Transport())
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
        for _ in range(3):
            assert http.post(url, {}, {}) == {}
            assert closed.acquire(timeout=10)  # the server closed the connection just used
    finally:
        server.shutdown()
        server.server_close()
