"""A slow, cheap OpenAI-compatible server replaying a scripted scenario (for ``fleet_scale.py``).

Run as its own process so that its CPU is not the workers'::

    python benchmarks/slow_openai.py SCENARIO.json --delay-s 2 --port-file PATH

It listens on 127.0.0.1 and a free port (written to ``--port-file`` once it
listens), and answers every ``POST …/chat/completions`` after ``--delay-s``
seconds with the next step of the scenario's script for the asking task —
plain asyncio streams, one coroutine a connection, so 1,000 calls in flight
cost a few MB and almost no CPU. Every answer's body is built once, at start.

Which task is asking comes from the task header in the prompt (``TASK`` …
``role``/``name``/``stage``/``kind``, read by ``workers.llm.scripted.replay_of``), and
which step of its script from the run's own conversation: the assistant turns
the prompt already holds. So the replay is per job AND task AND run, with no
state shared between them: a run that is retried on another worker (a lease
lost under load) starts its script again, as the in-process ``scripted``
provider does, and its journal settles what the first run did. Scenarios
here use no ``$ref:`` arguments, which is what makes precomputed answers exact.

``GET /stats`` answers the counts as JSON (``/stats?reset-max`` then starts
the maximum in flight again): calls answered, calls in flight
now and at most, calls refused (a task with no script, or past its last step:
HTTP 400, which the worker's provider does not retry), answers by key, and
scripts started again (a job's task run again from its first step).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from workers.llm.scripted import replay_of


def script_key(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """(the job's goal, the script key) of the task whose prompt this is."""
    return replay_of([m["content"] for m in messages if isinstance(m.get("content"), str)])


def completion(key: str, index: int, step: dict[str, Any]) -> bytes:
    """The chat-completions body of one scripted step (usage: fixed, plausible numbers)."""
    calls = [
        {
            "id": f"call_{key}_{index}_{i}",
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
        }
        for i, c in enumerate(step.get("tool_calls", ()))
    ]
    message: dict[str, Any] = {"role": "assistant", "content": step.get("text") or None}
    if calls:
        message["tool_calls"] = calls
    return json.dumps(
        {
            "model": "bench",
            "choices": [{"message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {
                "prompt_tokens": 1_200,
                "completion_tokens": 60,
                "prompt_tokens_details": {"cached_tokens": 800},
            },
        }
    ).encode()


def _response(status: int, body: bytes) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class SlowServer:
    def __init__(self, scenario: dict[str, Any], delay_s: float) -> None:
        self.delay_s = delay_s
        self.answers = {
            key: [_response(200, completion(key, i, s)) for i, s in enumerate(steps)]
            for key, steps in scenario["roles"].items()
        }
        self.runs: Counter[tuple[str, str]] = Counter()  # first calls per job and script
        self.by_key: Counter[str] = Counter()
        self.answered = 0
        self.refused = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.last_refusal = ""

    def stats(self) -> dict[str, Any]:
        return {
            "answered": self.answered,
            "refused": self.refused,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "last_refusal": self.last_refusal,
            "by_key": dict(self.by_key),
            "scripts_rerun": sum(n - 1 for n in self.runs.values() if n > 1),
        }

    def _refuse(self, why: str) -> bytes:
        self.refused += 1
        self.last_refusal = why
        return _response(400, json.dumps({"error": {"message": why}}).encode())

    def _answer(self, body: bytes) -> bytes:
        try:
            messages = json.loads(body)["messages"]
            goal, key = script_key(messages)
        except (ValueError, KeyError, StopIteration) as exc:
            return self._refuse(f"no task header in the prompt ({type(exc).__name__})")
        steps = self.answers.get(key)
        if steps is None:
            return self._refuse(f"no script for {key!r}")
        index = sum(m.get("role") == "assistant" for m in messages)
        if index >= len(steps):
            return self._refuse(
                f"{key!r} of {goal!r} has {len(steps)} steps, step {index + 1} was asked for"
            )
        self.runs[(goal, key)] += index == 0
        self.by_key[key] += 1
        return steps[index]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                method, path = request_line.split(" ")[:2]
                if method == "GET" and path.startswith("/stats"):
                    writer.write(_response(200, json.dumps(self.stats()).encode()))
                    if path.endswith("?reset-max"):  # the next load's maximum starts now
                        self.max_in_flight = self.in_flight
                elif method == "POST" and path.endswith("/chat/completions"):
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                    try:
                        await asyncio.sleep(self.delay_s)  # the model "thinks"
                        answer = self._answer(body)
                    finally:
                        self.in_flight -= 1
                    writer.write(answer)
                    if answer.startswith(b"HTTP/1.1 200"):
                        self.answered += 1
                else:
                    writer.write(_response(404, b'{"error": {"message": "not found"}}'))
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


async def serve(args: argparse.Namespace) -> None:
    server_state = SlowServer(json.loads(Path(args.scenario).read_text()), args.delay_s)
    await serve_until_signalled(server_state, args.port_file)


async def serve_until_signalled(server_state: SlowServer, port_file: str) -> None:
    """Listen on 127.0.0.1 and a free port (written to ``port_file``) until SIGTERM/SIGINT."""
    server = await asyncio.start_server(server_state.handle, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    tmp = Path(f"{port_file}.tmp")
    tmp.write_text(str(port))
    os.replace(tmp, port_file)  # whole or absent: the reader never sees half a number
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", help="the scenario's .json file")
    parser.add_argument("--delay-s", type=float, default=2.0, help="seconds before each answer")
    parser.add_argument("--port-file", required=True, help="where to write the port")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
