"""A loopback HTTP server that answers from a script and records every request."""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def send_json(
    handler: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str]
) -> None:
    """Answer ``handler``'s request: ``body`` as JSON (a str: as it is), with ``headers``."""
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Loopback:
    """Serve queued (status, body, headers) answers on 127.0.0.1 and a free port."""

    def __init__(self) -> None:
        self.answers: deque[tuple[int, Any, dict[str, str]]] = deque()
        self.requests: list[dict[str, Any]] = []
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                loopback.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "json": json.loads(body or b"null"),
                        "body": body,
                    }
                )
                send_json(self, *loopback.answers.popleft())

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


class ScriptedOpenAI:
    """An OpenAI-compatible chat-completions server that replays a scripted scenario.

    It reads which task is asking from the task header in the prompt (role,
    name, kind, stage), answers with that script's next step, and can be told
    to fail first: ``faults`` are (status, body) answers served, in order,
    before any scripted one, and ``malformed`` names script keys whose first
    request gets a tool call with arguments that are not JSON. A request whose
    prompt contains ``hang`` (when given) gets no answer until ``release`` is set:
    a provider that hangs.
    """

    def __init__(
        self,
        scenario: Any,
        *,
        faults: list[tuple[int, Any]],
        malformed: set[str],
        hang: str = "",
    ):
        from workers.context import Message
        from workers.llm import ScriptedProvider
        from workers.llm.scripted import replay_of

        self.faults = deque(faults)
        self.malformed = set(malformed)
        self.requests: list[dict[str, Any]] = []
        self.providers: dict[str, Any] = {}
        self.release = threading.Event()
        self.hung = 0  # requests held by ``hang`` so far
        lock = threading.Lock()
        replay = self

        def key_of(messages: list[dict[str, Any]]) -> str:
            return replay_of([m["content"] or "" for m in messages])[1]

        def answer(body: dict[str, Any]) -> tuple[int, Any]:
            if hang and any(hang in (m.get("content") or "") for m in body["messages"]):
                with lock:
                    replay.hung += 1
                replay.release.wait(120)
                return 503, {"error": {"message": "released"}}
            with lock:
                replay.requests.append(body)
                if replay.faults:
                    return replay.faults.popleft()
                key = key_of(body["messages"])
                if key in replay.malformed:
                    replay.malformed.discard(key)
                    call = {
                        "id": "bad",
                        "type": "function",
                        "function": {"name": "write_file", "arguments": "{not json"},
                    }
                    return 200, _completion(None, [call], 100, 0, 5)
                if key not in replay.providers:
                    replay.providers[key] = ScriptedProvider(scenario, key)
            messages = [
                Message(role=m["role"], content=m.get("content") or "") for m in body["messages"]
            ]
            step = replay.providers[key].complete(messages, [], max_tokens=body["max_tokens"])
            calls = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in step.tool_calls
            ]
            usage = step.usage
            return 200, _completion(
                step.text or None,
                calls,
                usage.input_tokens,
                usage.cached_tokens,
                usage.output_tokens,
            )

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                status, body = answer(json.loads(self.rfile.read(length)))
                send_json(self, status, body, {"retry-after": "0"})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _completion(
    text: str | None, calls: list[dict[str, Any]], prompt: int, cached: int, output: int
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {
        "model": "gpt-4.1-mini",
        "choices": [{"message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }
