"""Admission at fleet scale: shared route limits against a provider that enforces its own.

A loopback OpenAI-compatible provider (in this process, a thread per call)
enforces a requests-per-minute and a tokens-per-minute limit over a sliding
minute and answers 429 with ``Retry-After`` beyond them; every call it
accepts takes ``--delay-s``. It can be taken down (503) for ``--outage-s``.
Against it, side by side in one run, two fleets of ``--slots`` model-calling
slots (threads in ``--procs`` worker processes, each slot a loop of agent
tasks of ``--calls`` model calls through ``OpenAIProvider``, the workers'
own code path; a call that fails spends the task's attempt, and a task
fails after 3):

  today      each call retries alone: 4 tries with backoff, honouring
             Retry-After (up to 8 s) — no route;
  admission  every call admitted by the fleet's route (``shared_state.
             admission``), its limits set at 95% of the provider's; half the
             slots for tenant a (weight 1), half for tenant b (weight 3).

Each fleet runs ``--warm-s`` (the first minute, not counted), then
``--measure-s`` counted, then the provider goes down for ``--outage-s``
and comes back for ``--tail-s``. Reported per fleet: 429s per 1,000 calls
after the warm-up, attempts burned (by a 429, and in all), tasks failed
(and those failed during the outage), the tokens per minute the provider
served as a share of its limit (the counted window), p95 of a call's time
beyond the model's delay (waiting for admission, or retrying: p50, p95, and
the mean Little's law gives when every slot has work — slots / calls per
second — less the delay), and the two tenants' shares of the calls served
while both had work waiting. (Demand is many times what the provider
allows, so a call waits in either fleet; today's waits are counted only for
the calls that got through.)

Goals (issue 21): ≤ 1 429 per 1,000 calls after the first minute, 0
attempts burned by 429s, ≥ 90% of the token limit used while work waits,
tenant shares within 10% of their weights, 0 tasks failed by a 30 s outage.

A measurement, not a test: exit 0 whatever it finds. ``--json`` prints one
JSON document; progress goes to stderr.

Run:  .venv/bin/python benchmarks/admission.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rich.console import Console
from rich.table import Table

from shared_state import RedisServer, State
from shared_state.admission import RouteLimits, Routes, TenantShare, route_id
from shared_state.client import connect

PROMPT_CHARS = 1_600  # 400 tokens by the estimate (4 characters a token)
MAX_OUTPUT = 100
COMPLETION = 100  # the output tokens the provider says each call wrote
GOALS = {"429_per_1000": 1.0, "attempts_burned_by_429": 0, "token_share": 0.9,
         "tenant_share_error": 0.1, "outage_failed_tasks": 0}  # fmt: skip


@dataclass
class Provider:
    """The loopback provider: sliding-minute limits, a fixed delay, an off switch."""

    rpm: int
    tpm: int
    delay_s: float
    down: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    window: deque = field(default_factory=deque)  # (time, tokens) of calls accepted
    log: list = field(default_factory=list)  # (time, status, tokens, tenant)

    def decide(self, tokens: int, tenant: str) -> tuple[int, dict[str, str]]:
        now = time.monotonic()
        with self.lock:
            if self.down.is_set():
                self.log.append((now, 503, 0, tenant))
                return 503, {}
            while self.window and self.window[0][0] <= now - 60:
                self.window.popleft()
            used = sum(t for _, t in self.window)
            if len(self.window) + 1 > self.rpm or used + tokens > self.tpm:
                # Retry when the oldest call of the minute leaves it.
                wait = self.window[0][0] + 60 - now if self.window else 1.0
                self.log.append((now, 429, 0, tenant))
                return 429, {"retry-after": f"{max(1, round(wait))}"}
            self.window.append((now, tokens))
            self.log.append((now, 200, tokens, tenant))
            return 200, {}

    def serve(self) -> ThreadingHTTPServer:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                tenant = self.headers.get("authorization", "").removeprefix("Bearer sk-")
                chars = sum(len(m.get("content") or "") for m in body["messages"])
                prompt = chars // 4
                status, headers = provider.decide(prompt + COMPLETION, tenant)
                if status == 200:
                    time.sleep(provider.delay_s)  # the model at work
                reply = {
                    "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": COMPLETION},
                }
                data = json.dumps(reply if status == 200 else {"error": {"message": "no"}})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.request_queue_size = 1024
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def slots(
    redis_url: str, base_url: str, n: int, tenant: str, calls: int, admitted: bool, until: float,
    out: Any,
) -> None:  # fmt: skip
    """A worker process: ``n`` slots, each running tasks of ``calls`` model calls until
    ``until`` (a wall-clock time): a call that fails spends the task's attempt."""
    from workers.context.messages import Message
    from workers.errors import ProviderUnavailable
    from workers.llm import OpenAIProvider

    routes = Routes(connect(redis_url)) if admitted else None
    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def slot() -> None:
        model = OpenAIProvider("m", base_url=base_url, api_key=f"sk-{tenant}", routes=routes,
                               tenant=tenant)  # fmt: skip
        message = [Message(role="user", content="x" * PROMPT_CHARS)]
        while time.time() < until:
            attempt, started, burned = 1, time.time(), []
            done = 0
            while done < calls and attempt <= 3 and time.time() < until:
                t0 = time.time()
                try:
                    model.complete(message, [], max_tokens=MAX_OUTPUT)
                    done += 1
                    lat = time.time() - t0
                    with lock:
                        records.append({"kind": "call", "at": t0, "s": lat})
                except ProviderUnavailable as exc:
                    burned.append((time.time(), "429" in str(exc)))
                    attempt, done = attempt + 1, 0
            with lock:
                records.append({"kind": "task", "at": started, "end": time.time(),
                                "ok": done >= calls, "burned": burned,
                                "cut": done < calls and attempt <= 3})  # fmt: skip

    threads = [threading.Thread(target=slot) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(records)


def run_fleet(args: argparse.Namespace, state: State, url: str, admitted: bool,
              console: Console) -> dict[str, Any]:  # fmt: skip
    provider = Provider(args.rpm, args.tpm, args.delay_s)
    server = provider.serve()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    state.client.flushall()
    if admitted:
        routes = Routes(state.client)
        routes.set_limits(
            route_id("openai", "m", base),
            RouteLimits(rpm=int(args.rpm * 0.95), tpm=int(args.tpm * 0.95)),
        )
        routes.set_tenant("b", TenantShare(weight=3))  # fmt: skip
    start = time.time() + 3  # the processes' start-up is not the provider's minute
    measure = (start + args.warm_s, start + args.warm_s + args.measure_s)
    outage = (measure[1], measure[1] + args.outage_s)
    until = outage[1] + args.tail_s
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    per = args.slots // args.procs
    procs = [
        spawn.Process(
            target=slots,
            args=(url, base, per, "ab"[i % 2], args.calls, admitted, until, out),
        )
        for i in range(args.procs)
    ]
    for p in procs:
        p.start()
    name = "admission" if admitted else "today"
    with console.status(f"{name}: {per * args.procs} slots"):
        while time.time() < outage[0]:
            time.sleep(0.2)  # the schedule: the outage starts at a set time
        provider.down.set()
        while time.time() < outage[1]:
            time.sleep(0.2)
        provider.down.clear()
        records = [r for _ in procs for r in out.get(timeout=args.tail_s + 600)]
    for p in procs:
        p.join(30)
    server.shutdown()
    server.server_close()
    return report(provider, records, measure, outage, args, start)


def report(provider: Provider, records: list[dict[str, Any]], measure: tuple[float, float],
           outage: tuple[float, float], args: argparse.Namespace,
           start: float) -> dict[str, Any]:  # fmt: skip
    # The provider's log is on its monotonic clock: align it to wall time once.
    shift = time.time() - time.monotonic()
    log = [(at + shift, status, tokens, tenant) for at, status, tokens, tenant in provider.log]
    after_warm = [
        e for e in log if e[0] >= start + args.warm_s and not outage[0] <= e[0] < outage[1]
    ]
    limited = sum(1 for e in after_warm if e[1] == 429)
    served = [e for e in log if measure[0] <= e[0] < measure[1] and e[1] == 200]
    minutes = (measure[1] - measure[0]) / 60
    tasks = [r for r in records if r["kind"] == "task"]
    burned = [b for t in tasks for b in t["burned"]]
    calls = [r for r in records if r["kind"] == "call" and measure[0] <= r["at"] < measure[1]]
    extra = sorted(max(0.0, r["s"] - args.delay_s) for r in calls)
    by_tenant = {t: sum(1 for e in served if e[3] == t) for t in "ab"}
    both = sum(by_tenant.values())
    return {
        "calls_after_warmup": len(after_warm),
        "429_per_1000": round(1000 * limited / max(1, len(after_warm)), 2),
        "attempts_burned": len(burned),
        "attempts_burned_by_429": sum(1 for _, by_429 in burned if by_429),
        "tasks": len(tasks),
        "tasks_failed": sum(1 for t in tasks if not t["ok"] and not t["cut"]),
        "outage_failed_tasks": sum(
            1 for t in tasks if not t["ok"] and not t["cut"] and t["end"] >= outage[0]
        ),
        "tokens_per_min": round(sum(e[2] for e in served) / minutes),
        "token_share": round(sum(e[2] for e in served) / minutes / args.tpm, 3),
        "p50_extra_s": round(statistics.median(extra), 2) if extra else 0,
        "p95_extra_s": round(statistics.quantiles(extra, n=20)[-1], 2) if len(extra) > 1 else 0,
        # Little's law: with every slot busy, a call takes slots / calls per second in all.
        "expected_extra_s": round(
            args.slots / max(1, len(served)) * (measure[1] - measure[0]) - args.delay_s, 2
        ),
        "tenant_b_share": round(by_tenant["b"] / both, 3) if both else 0,
    }


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    doc: dict[str, Any] = {"goals": GOALS, "params": {k: v for k, v in vars(args).items()
                                                     if k not in ("json",)}}  # fmt: skip
    with RedisServer() as server:
        state = State.connect(server.url)
        doc["today"] = run_fleet(args, state, server.url, False, console)
        doc["admission"] = run_fleet(args, state, server.url, True, console)
        state.client.close()
    a = doc["admission"]
    doc["passed"] = {
        "429_per_1000": a["429_per_1000"] <= GOALS["429_per_1000"],
        "attempts_burned_by_429": a["attempts_burned_by_429"] == 0,
        "token_share": a["token_share"] >= GOALS["token_share"],
        "tenant_share": abs(a["tenant_b_share"] - 0.75) <= GOALS["tenant_share_error"],
        "outage_failed_tasks": a["outage_failed_tasks"] == 0,
    }
    return doc


def print_table(doc: dict[str, Any], console: Console) -> None:
    t = Table(title=f"admission: {doc['params']['slots']} slots against a provider enforcing "
                    f"{doc['params']['rpm']:,} rpm and {doc['params']['tpm']:,} tpm",
              title_justify="left")  # fmt: skip
    for col in ("", "today (per-call retries)", "admission", "goal"):
        t.add_column(col)
    today, a = doc["today"], doc["admission"]
    rows = [
        ("429s per 1,000 calls after the first minute", "429_per_1000", "<= 1"),
        ("attempts burned by 429s", "attempts_burned_by_429", "0"),
        ("attempts burned in all", "attempts_burned", ""),
        ("tasks failed (of tasks run)", "tasks_failed", ""),
        ("tasks failed by a 30 s outage", "outage_failed_tasks", "0"),
        ("tokens per minute served (share of the limit)", "token_share", ">= 0.9"),
        ("a call's time beyond the model's delay, p50 (s)", "p50_extra_s", ""),
        ("... p95 (s)", "p95_extra_s", ""),
        ("... mean by Little's law: slots / calls per s - delay (s)", "expected_extra_s", ""),
        ("tenant b's share of calls (weights 1:3)", "tenant_b_share", "0.75 +- 0.1"),
    ]
    for name, key, goal in rows:
        t.add_row(name, str(today[key]), str(a[key]), goal)
    console.print(t)
    held = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in doc["passed"].items())
    console.print(f"goals held: {held}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--quick", action="store_true", help="a small, short run (smoke test)")
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3, help="model calls per task")
    parser.add_argument("--rpm", type=int, default=1_200)
    parser.add_argument("--tpm", type=int, default=600_000)
    parser.add_argument("--delay-s", type=float, default=0.5)
    parser.add_argument("--warm-s", type=float, default=60)
    parser.add_argument("--measure-s", type=float, default=60)
    parser.add_argument("--outage-s", type=float, default=30)
    parser.add_argument("--tail-s", type=float, default=40)
    args = parser.parse_args(argv)
    if args.quick:
        args.slots, args.procs, args.warm_s, args.measure_s = 20, 2, 5, 10
        args.outage_s, args.tail_s, args.rpm, args.tpm = 5, 15, 120, 60_000
    console = Console(stderr=args.json)
    doc = run(args, console)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, console)


if __name__ == "__main__":
    sys.exit(main())
