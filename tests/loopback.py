"""A loopback HTTP server that answers from a script and records every request."""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Loopback:
    """Serve queued (status, body, headers) answers on 127.0.0.1 and a free port."""

    def __init__(self) -> None:
        self.answers: deque[tuple[int, Any, dict[str, str]]] = deque()
        self.requests: list[dict[str, Any]] = []
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                loopback.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "json": json.loads(self.rfile.read(length) or b"null"),
                    }
                )
                status, body, headers = loopback.answers.popleft()
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, status: int, body: Any, **headers: str) -> Loopback:
        self.answers.append((status, body, headers))
        return self

    def __enter__(self) -> Loopback:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
