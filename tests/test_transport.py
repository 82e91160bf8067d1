"""The model calls' HTTP transport on real sockets: the environment's proxy, TLS roots,
kept-alive connections the server closed or a middlebox dropped, endpoints refused unsent."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import threading
from base64 import b64decode
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from workers.errors import BadRequest, ProviderUnavailable
from workers.llm import HttpJson, OpenAIProvider, RetryPolicy
from workers.llm import transport as transport_module
from workers.llm.transport import Transport

from .loopback import Loopback, send_json

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
                send_json(self, answer.status, answer.read().decode(), {})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the machine's own proxy settings: each test sets what it is about."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    forward = ForwardProxy()
    yield forward
    forward.close()


def test_a_call_goes_through_the_environments_proxy_with_its_credentials(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://fleet:p%40ss%C3%A4@127.0.0.1:{proxy.port}")
    with Loopback() as server:
        server.answer(200, ANSWER)
        http = HttpJson("openai", ONCE, transport=Transport())
        assert http.post(f"{server.url}/v1/chat/completions", {"n": 1}, {}) == ANSWER
    assert server.requests[0]["json"] == {"n": 1}
    ((target, credentials),) = proxy.seen
    assert target == f"{server.url}/v1/chat/completions"  # the absolute form, as to a proxy
    scheme, _, encoded = credentials.partition(" ")
    assert (scheme, b64decode(encoded)) == ("Basic", "fleet:p@ssä".encode())  # UTF-8


@pytest.mark.parametrize("bypass", ["localhost,127.0.0.1", "127.0.0.1:{port}"])
def test_a_host_in_no_proxy_is_reached_directly(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch, bypass: str
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    with Loopback() as server:
        monkeypatch.setenv("NO_PROXY", bypass.format(port=urlsplit(server.url).port))
        server.answer(200, ANSWER)
        http = HttpJson("openai", ONCE, transport=Transport())
        assert http.post(f"{server.url}/v1/chat/completions", {"n": 1}, {}) == ANSWER
    assert proxy.seen == []


def test_an_endpoint_called_again_is_sent_on_the_pool_found_for_it_the_first_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool and the target of an endpoint are found once (``Transport._origin``), not
    by the pool manager at every call; the request that goes out is the same."""
    with Loopback() as server:
        for _ in range(3):
            server.answer(200, ANSWER)
        transport = Transport()
        url = f"{server.url}/v1/chat/completions?api-version=1"
        found: list[str] = []
        take = transport._direct.connection_from_url
        monkeypatch.setattr(
            transport._direct, "connection_from_url", lambda u: found.append(u) or take(u)
        )
        for _ in range(3):
            assert transport.post(url, b"{}", {"authorization": "Bearer k"}, 5).json() == ANSWER
        assert found == [url]
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions?api-version=1"] * 3
    assert {r["headers"]["authorization"] for r in server.requests} == {"Bearer k"}
    assert {r["headers"]["user-agent"] for r in server.requests} == {"redfleet"}


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
        def shutdown_request(self, request: socket.socket) -> None:  # type: ignore[override]
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


def test_a_proxy_setting_that_cannot_be_used_is_refused_when_the_transport_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://fleet:s3cret@proxy.corp:31a8")
    with pytest.raises(ValueError, match="HTTPS_PROXY: not a proxy address") as refused:
        Transport()
    assert "s3cret" not in str(refused.value)
    monkeypatch.setenv("HTTPS_PROXY", "socks5://proxy.corp:1080")
    with pytest.raises(ValueError, match="HTTPS_PROXY: a socks5:// proxy is not supported"):
        Transport()


def test_an_endpoint_without_a_scheme_is_refused_unsent() -> None:
    """urllib3 would take it as plain HTTP: the key would go in the clear."""
    with Loopback() as server:
        bare = server.url.removeprefix("http://")
        provider = OpenAIProvider("m", base_url=f"{bare}/v1", api_key="sk-secret", retry=ONCE)
        with pytest.raises(BadRequest, match="must start with https:// or http://"):
            provider.http.post(provider.url, {}, {"Authorization": "Bearer sk-secret"})
    assert server.requests == []


def test_a_key_http_cannot_carry_is_refused_unsent_and_unquoted() -> None:
    with Loopback() as server:
        http = HttpJson("openai", ONCE, transport=Transport())
        with pytest.raises(BadRequest, match="an API key") as refused:
            http.post(f"{server.url}/v1", {}, {"Authorization": "Bearer local-key-7f3a\n"})
    assert "local-key" not in str(refused.value) and server.requests == []


def _tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A private CA, and a certificate it signed for localhost: (CA, cert, key)."""
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, csr, ext = folder / "srv.pem", folder / "srv.key", folder / "srv.csr", folder / "x"
    ext.write_text("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n")
    for command in (
        f"req -x509 -newkey rsa:2048 -nodes -keyout {ca_key} -out {ca} -days 1 -subj /CN=ca",
        f"req -newkey rsa:2048 -nodes -keyout {key} -out {csr} -subj /CN=localhost",
        f"x509 -req -in {csr} -CA {ca} -CAkey {ca_key} -CAcreateserial -out {cert} -days 1 "
        f"-extfile {ext}",
    ):
        subprocess.run(["openssl", *command.split()], check=True, capture_output=True)
    return ca, cert, key


def test_tls_is_checked_against_certifi_or_the_roots_ssl_cert_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, key = _tls_files(tmp_path)
    with Loopback() as server:
        server.answer(200, ANSWER)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.server.socket = context.wrap_socket(server.server.socket, server_side=True)
        url = f"https://localhost:{urlsplit(server.url).port}/v1/chat/completions"
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        with pytest.raises(ProviderUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            HttpJson("openai", ONCE, transport=Transport()).post(url, {}, {})
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # a proxy's, or a company's, CA
        assert HttpJson("openai", ONCE, transport=Transport()).post(url, {}, {}) == ANSWER


class _Clock:
    """``time.monotonic`` for the transport, moved on by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_connection_idle_past_its_expiry_is_not_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A middlebox that dropped an idle flow says nothing: a call sent on that connection
    would wait out its timeout. The peer here answers the first request of a connection
    and then goes silent on it, as such a flow does."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    opened: list[socket.socket] = []

    def serve_one(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")  # then silence

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            opened.append(conn)
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    clock = _Clock()
    monkeypatch.setattr(transport_module, "time", clock)
    http = HttpJson("openai", RetryPolicy(attempts=1, timeout_s=2), transport=Transport())
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        assert http.post(url, {}, {}) == {}
        clock.now += transport_module.IDLE_S + 1
        assert http.post(url, {}, {}) == {}  # on a new connection, at once
        assert len(opened) == 2
    finally:
        listener.close()
        for conn in opened:
            conn.close()
