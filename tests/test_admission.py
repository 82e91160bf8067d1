"""Fleet-wide admission to model providers: shared limits, cool-downs, no attempt burned.

Real worker-like processes call a loopback OpenAI-compatible server through
one route on a real Redis; the server counts what reaches it (arrival times,
calls at once, tokens), so a limit is checked where the provider would check
it.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from shared_state import (
    BudgetExceeded,
    JobSpec,
    Scenario,
    State,
    TenantBudgetExceeded,
    keys,
)
from shared_state.admission import (
    Grant,
    Outcome,
    Route,
    RouteLimits,
    Routes,
    TenantShare,
    route_id,
)
from shared_state.client import connect
from workers.context.messages import Message
from workers.llm import OpenAIProvider, load_scenario

from .conftest import events_named, wait_for
from .loopback import ScriptedOpenAI
from .proxy import FaultProxy
from .test_agent_jobs import GOAL
from .test_cli import assert_one_line_error, run
from .test_lost_replies import lose_reply_to

PROMPT = "x" * 400  # 100 tokens by the estimate, and 100 of output: 200 a call


class Provider:
    """A loopback chat-completions server that counts: when each request arrived, how many
    were in flight at once, the tokens each used; ``decide`` may answer otherwise."""

    def __init__(self, delay_s: float = 0.05) -> None:
        self.arrivals: list[float] = []
        self.keys: list[str] = []  # the API key of each arrival: which tenant's caller it is
        self.answered: list[tuple[float, int]] = []  # (time, status)
        self.in_flight = 0
        self.most_at_once = 0
        self.in_flight_by: dict[str, int] = {}
        self.most_at_once_by: dict[str, int] = {}
        self.decide: Callable[[int], tuple[int, dict[str, str]]] = lambda n: (200, {})
        lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                key = self.headers.get("authorization", "").removeprefix("Bearer ")
                with lock:
                    n = len(provider.arrivals)
                    provider.arrivals.append(time.monotonic())
                    provider.keys.append(key)
                    provider.in_flight += 1
                    provider.most_at_once = max(provider.most_at_once, provider.in_flight)
                    at_once = provider.in_flight_by.get(key, 0) + 1
                    provider.in_flight_by[key] = at_once
                    most = max(provider.most_at_once_by.get(key, 0), at_once)
                    provider.most_at_once_by[key] = most
                time.sleep(delay_s)  # the model at work
                status, headers = provider.decide(n)
                body = {"error": {"message": "slow down"}} if status != 200 else {
                    "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 100},
                }  # fmt: skip
                data = json.dumps(body).encode()
                with lock:
                    provider.in_flight -= 1
                    provider.in_flight_by[key] -= 1
                    provider.answered.append((time.monotonic(), status))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider()
    yield p
    p.close()


def calls(
    redis_url: str,
    base_url: str,
    threads: int,
    each: int,
    results: Any,
    tenant: str = "default",
    priority: int = 0,
) -> None:
    """A worker process: ``threads`` task slots, each making ``each`` calls on the route for
    ``tenant``'s job of ``priority`` (its API key names the tenant, for the server)."""
    routes = Routes(connect(redis_url))

    def slot() -> None:
        model = OpenAIProvider("m", base_url=base_url, api_key=f"sk-{tenant}", routes=routes,
                               tenant=tenant, priority=priority)  # fmt: skip
        for _ in range(each):
            try:
                model.complete([Message(role="user", content=PROMPT)], [], max_tokens=100)
                results.put("ok")
            except Exception as exc:
                results.put(f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=slot) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def run_processes(
    redis_url: str,
    base_url: str,
    n: int,
    threads: int,
    each: int,
    *,
    tenants: tuple[str, ...] = ("default",),
    priority: int = 0,
) -> list[str]:
    """``n`` processes (the i-th for ``tenants[i % len]``) making their calls; the results."""
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    procs = [
        spawn.Process(
            target=calls,
            args=(redis_url, base_url, threads, each, results, tenants[i % len(tenants)], priority),
        )
        for i in range(n)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=180) for _ in range(n * threads * each)]
    for p in procs:
        p.join(30)
    return out


def openai_env(base_url: str, model: str = "gpt-4.1-mini", **more: str) -> tuple:
    """A fleet's workers' environment for the openai provider at ``base_url``."""
    return (
        ("REDFLEET_PROVIDER", "openai"),
        ("REDFLEET_MODEL", model),
        ("REDFLEET_BASE_URL", base_url),
        ("OPENAI_API_KEY", "sk-loopback"),
        *more.items(),
    )


def most_in_any_window(times: list[float], weights: list[int], window: float) -> int:
    """The largest sum of ``weights`` of events within any ``window`` seconds."""
    best = 0
    for i, start in enumerate(times):
        best = max(
            best, sum(w for t, w in zip(times[i:], weights[i:], strict=True) if t - start <= window)
        )
    return best


def test_two_processes_sharing_a_route_never_exceed_its_limits(
    state: State, redis_url: str, provider: Provider
) -> None:
    route = route_id("openai", "m", provider.url)
    # Buckets hold 10 s: 20 requests, 2,500 tokens at first; then 2/s and 250/s.
    state.routes.set_limits(route, RouteLimits(rpm=120, tpm=15_000, concurrency=2))
    started = time.monotonic()
    results = run_processes(redis_url, provider.url, n=2, threads=5, each=2)
    assert results == ["ok"] * 20
    arrivals = sorted(provider.arrivals)
    assert provider.most_at_once <= 2
    for window in (1.0, 3.0, 5.0):
        assert most_in_any_window(arrivals, [1] * 20, window) <= 20 + 2 * window + 1
        assert most_in_any_window(arrivals, [200] * 20, window) <= 2_500 + 250 * window + 200
    # 4,000 tokens through a 2,500-token bucket refilled at 250/s: the limit held them.
    assert arrivals[-1] - started >= (4_000 - 2_500) / 250 - 1
    (shown,) = state.routes.show()
    assert (shown.admitted, shown.ok, shown.in_flight, shown.waiting) == (20, 20, 0, 0)
    assert shown.waits > 0


def test_a_429_with_retry_after_cools_the_route_for_every_process(
    state: State, redis_url: str, provider: Provider
) -> None:
    provider.decide = lambda n: (429, {"retry-after": "2"}) if n == 0 else (200, {})
    first = threading.Thread(
        target=lambda: run_processes(redis_url, provider.url, n=1, threads=1, each=1)
    )
    first.start()
    wait_for(lambda: provider.answered, 30, "the 429")
    limited_at = provider.answered[0][0]
    # Another process, started once the first was told to slow down: it waits too.
    assert run_processes(redis_url, provider.url, n=1, threads=1, each=1) == ["ok"]
    first.join(60)
    later = sorted(provider.arrivals)[1:]
    assert len(later) == 2 and min(later) >= limited_at + 2.0 - 0.05
    (shown,) = state.routes.show()
    assert (shown.limited, shown.ok, shown.cool_why) == (1, 2, "limited")


def test_an_outage_of_30_s_fails_no_task_and_uses_no_attempt(state: State, start_fleet) -> None:
    """Five answers of 503 in a row cool the route for 1 + 2 + 4 + 8 + 16 s: the job waits
    them out and every task succeeds on its first attempt."""
    faults = [(503, {"error": {"message": "down"}})] * 5
    with ScriptedOpenAI(load_scenario("demo"), faults=faults, malformed=set()) as api:
        env = openai_env(api.url)
        start_fleet(planners=1, coders=2, reviewers=1, lease_ms=5_000, worker_env=env)
        started = time.monotonic()
        job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS, max_attempts=2))
        wait_for(lambda: state.jobs.get(job.job_id).status.finished, 180, "the job")
    assert state.jobs.get(job.job_id).status == "succeeded"
    assert time.monotonic() - started >= 30
    assert all(t.attempt == 1 for t in state.tasks.list(job.job_id))
    assert events_named(state, job.job_id, "task.requeued") == []
    (shown,) = state.routes.show()
    assert shown.failed == 5 and shown.route == route_id("openai", "gpt-4.1-mini", api.url)


def test_a_lost_reply_of_the_admission_scripts_is_re_sent_and_counted_once(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    state.routes.set_limits("r", RouteLimits(tpm=6_000))
    route = Route(remote.client, "r")
    lose_reply_to(proxy, "admitCall")
    grant = route.acquire(300)
    assert proxy.dropped == 1
    held = state.client.hmget(keys.route("r"), "admitted", "tok")
    assert int(held[0]) == 1 and float(held[1]) == 1_000 - 300  # 10 s of 6,000/min, once
    assert state.client.zcard(keys.route_inflight("r")) == 1
    lose_reply_to(proxy, "settleCall")
    route.settle(grant, used=100)
    assert proxy.dropped == 2
    assert float(state.client.hget(keys.route("r"), "tok")) == 1_000 - 100  # refunded once
    assert state.client.zcard(keys.route_inflight("r")) == 0

    # A route without limits admits without asking; its failure, re-sent, counts once.
    free = Route(remote.client, "free")
    grant = free.acquire(300)
    assert grant.call_id == ""
    lose_reply_to(proxy, "settleCall")
    free.settle(grant, used=0, outcome=Outcome.FAILED)
    assert proxy.dropped == 3
    failed, failures = state.client.hmget(keys.route("free"), "failed", "failures")
    assert (int(failed), int(failures)) == (1, 1)  # the cool-down was not doubled


def test_a_call_that_died_gives_its_slot_back_when_its_lease_ends(state: State) -> None:
    state.routes.set_limits("r", RouteLimits(concurrency=1))
    state.client.zadd(keys.route_inflight("r"), {"dead-caller": 1})  # its lease long over
    grant = Route(state.client, "r").acquire(10, max_wait_s=5)
    assert isinstance(grant, Grant) and grant.call_id
    assert state.client.zrange(keys.route_inflight("r"), 0, -1) == [grant.call_id.encode()]


def test_a_caller_that_gives_up_takes_its_ticket_back(state: State) -> None:
    """A waiter past its bound leaves the queue: the next caller is not held behind it."""
    from shared_state.errors import AdmissionTimedOut

    state.routes.set_limits("r", RouteLimits(concurrency=1))
    route = Route(state.client, "r")
    holding = route.acquire(10)
    with pytest.raises(AdmissionTimedOut):
        route.acquire(10, max_wait_s=0.3)
    assert state.client.zcard(keys.route_waiting("r")) == 0
    route.settle(holding, used=10)
    started = time.monotonic()
    route.acquire(10, max_wait_s=5)
    assert time.monotonic() - started < 1  # not the 10 s a stale ticket would hold it


def test_a_route_is_named_by_host_and_path_never_by_credentials() -> None:
    assert route_id("openai", "gpt-4.1-mini", "https://api.openai.com/v1/") == (
        "openai:gpt-4.1-mini@api.openai.com/v1"
    )
    named = route_id("openai", "m", "http://user:s3cret-pass@127.0.0.1:8080/v1")
    assert named == "openai:m@127.0.0.1:8080/v1" and "s3cret" not in named


def test_outcomes_follow_the_status() -> None:
    from shared_state.admission import outcome_of

    assert [outcome_of(s) for s in (200, 400, 429, 529, 500, 503, None)] == [
        Outcome.OK, Outcome.OK, Outcome.LIMITED, Outcome.LIMITED, Outcome.FAILED,
        Outcome.FAILED, Outcome.FAILED,
    ]  # fmt: skip


def test_limits_are_set_and_shown_at_the_cli_and_bad_input_is_named(
    state: State, redis_url: str, tmp_path: Path
) -> None:
    route = "openai:gpt-4.1-mini@api.openai.com/v1"
    done = run("limits", "set", route, "--rpm", "500", "--tpm", "200000", url=redis_url)
    assert done.returncode == 0 and "500 rpm, 200,000 tpm" in done.stdout
    shown = json.loads(run("limits", "show", "--json", url=redis_url).stdout)["routes"]
    assert [(r["route"], r["limits"]) for r in shown] == [
        (route, {"rpm": 500, "tpm": 200_000, "concurrency": 0})
    ]
    assert "500 rpm" in run("limits", "show", url=redis_url).stdout
    assert_one_line_error(run("limits", "set", "gpt-4", "--rpm", "5", url=redis_url),
                          "expected provider:model@endpoint")  # fmt: skip
    bad = tmp_path / "limits.json"
    bad.write_text(json.dumps({route: {"rpm": -1}}))
    assert_one_line_error(
        run("up", "--limits", str(bad), "--burst", url=redis_url), "rpm", "greater than or equal"
    )
    bad.write_text(json.dumps({route: {"rpn": 5}}))
    assert_one_line_error(run("up", "--limits", str(bad), "--burst", url=redis_url), "rpn")


@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "limited"])
def test_a_cooling_route_is_passed_over_at_once_for_the_fallback(
    state: State, provider: Provider, limited: bool
) -> None:
    from workers.llm.failover import Failover

    backup = Provider()
    try:
        routes = Routes(state.client)
        first = OpenAIProvider("gpt-4.1", base_url=provider.url, api_key="k", routes=routes)
        second = OpenAIProvider("gpt-4.1-mini", base_url=backup.url, api_key="k", routes=routes)
        if limited:  # asked through the script, which says the whole cool-down at once
            routes.set_limits(first.route_id, RouteLimits(rpm=600))
        grant = routes.route(first.route_id).acquire(10)
        routes.route(first.route_id).settle(grant, used=0, outcome=Outcome.LIMITED,
                                            retry_after_ms=60_000)  # fmt: skip
        started = time.monotonic()
        answer = Failover([first, second], after_s=5).complete(
            [Message(role="user", content="hi")], [], max_tokens=10
        )
        assert time.monotonic() - started < 2  # no waiting on a route cooling for a minute
        assert provider.arrivals == [] and len(backup.arrivals) == 1
        assert (answer.route, answer.served_by) == (second.route_id, "gpt-4.1-mini")
    finally:
        backup.close()


def test_the_fallback_takes_over_from_a_dead_provider_and_every_call_records_it(
    state: State, start_fleet
) -> None:
    with socket.socket() as s:  # a port nothing listens on: the primary is down
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with ScriptedOpenAI(load_scenario("demo"), faults=[], malformed=set()) as api:
        env = openai_env(dead, "gpt-4.1", REDFLEET_FALLBACK=f"openai:gpt-4.1-mini@{api.url}",
                         REDFLEET_FALLBACK_AFTER_S="2")  # fmt: skip
        start_fleet(planners=1, coders=2, reviewers=1, lease_ms=5_000, worker_env=env)
        job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
        wait_for(lambda: state.jobs.get(job.job_id).status.finished, 180, "the job")
    assert state.jobs.get(job.job_id).status == "succeeded"
    called = events_named(state, job.job_id, "model.called")
    backup = route_id("openai", "gpt-4.1-mini", api.url)
    assert called and {e.model_extra["route"] for e in called} == {backup}
    assert {e.model_extra["model"] for e in called} == {"gpt-4.1-mini"}
    assert all(t.attempt == 1 for t in state.tasks.list(job.job_id))
    shown = {r.route: r for r in state.routes.show()}
    assert shown[route_id("openai", "gpt-4.1", dead)].failed >= 1
    # Priced as the model that answered: gpt-4.1-mini's prices, not gpt-4.1's.
    from workers.context import price_of

    usage = state.usage(job.job_id).get()

    def cost(model: str) -> float:
        p = price_of(model)
        fresh = usage.input_tokens - usage.cached_tokens
        return (fresh * p.input + usage.cached_tokens * p.cached_input
                + usage.output_tokens * p.output) / 1e6  # fmt: skip

    assert abs(usage.cost_usd - cost("gpt-4.1-mini")) < 1e-6 * usage.calls  # each call rounded
    assert cost("gpt-4.1") > 4 * usage.cost_usd


def test_tenants_share_a_busy_route_by_weight_and_a_cap_holds_one_back(
    state: State, redis_url: str, provider: Provider
) -> None:
    """Tenant b (weight 3) and tenant a (weight 1), each with more calls waiting than the
    route lets through: while both wait, b gets three calls to a's one; and tenant c,
    capped at one call at once, never has two in flight."""
    route = route_id("openai", "m", provider.url)
    state.routes.set_limits(route, RouteLimits(concurrency=2))
    state.routes.set_tenant("b", TenantShare(weight=3))
    state.routes.set_tenant("c", TenantShare(concurrency=1))
    results = run_processes(redis_url, provider.url, n=3, threads=4, each=12,
                            tenants=("a", "b", "c"))  # fmt: skip
    assert results == ["ok"] * 144
    assert provider.most_at_once <= 2 and provider.most_at_once_by["sk-c"] == 1
    # While a and b both wait (until b has had most of its calls): b's share of theirs.
    order = [k for k in provider.keys if k in ("sk-a", "sk-b")]
    b_done = [n for n, k in enumerate(order) if k == "sk-b"][36]  # b's 37th call
    window = order[8:b_done]  # after the first calls, which came before any wait
    share = window.count("sk-b") / len(window)
    assert 0.75 - 0.1 <= share <= 0.75 + 0.1, (share, len(window))
    (shown,) = state.routes.show()
    assert shown.by_tenant == {"a": 48, "b": 48, "c": 48}


def test_a_high_priority_call_goes_before_those_already_waiting(state: State) -> None:
    state.routes.set_limits("r", RouteLimits(concurrency=1))
    route = Route(state.client, "r")
    holding = route.acquire(10)
    order: list[int] = []

    def call(priority: int) -> None:
        grant = route.acquire(10, priority=priority)
        order.append(priority)
        time.sleep(0.02)  # the call, at work
        route.settle(grant, used=10)

    waiting = [threading.Thread(target=call, args=(0,)) for _ in range(3)]
    for n, t in enumerate(waiting, start=1):
        t.start()
        wait_for(lambda n=n: state.client.zcard(keys.route_waiting("r")) == n, 10, "a ticket")
    urgent = threading.Thread(target=call, args=(9,))
    urgent.start()
    wait_for(lambda: state.client.zcard(keys.route_waiting("r")) == 4, 10, "its ticket")
    route.settle(holding, used=10)
    for t in [*waiting, urgent]:
        t.join(30)
    assert order == [9, 0, 0, 0]  # the last to ask, first to go


def test_a_job_its_money_budget_stopped_goes_on_after_retry_with_a_raised_one(
    state: State, redis_url: str, start_fleet
) -> None:
    with ScriptedOpenAI(load_scenario("demo"), faults=[], malformed=set()) as api:
        env = openai_env(api.url)
        start_fleet(planners=1, coders=1, reviewers=1, lease_ms=5_000, worker_env=env)
        # A call reserves its most cost (every output token at gpt-4.1-mini's prices): about
        # $0.002 here, so the job stops within its first few calls. One coder slot: no
        # other call is on the wire when one is refused, so the loopback's replay (a step
        # per call, per task) stays in step with what the job's records say was done.
        job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS, budget_usd=0.005))
        wait_for(lambda: state.jobs.get(job.job_id).status.finished, 120, "the stop")
        stopped = state.jobs.get(job.job_id)
        assert stopped.status == "failed" and "money budget" in stopped.reason
        assert f"redfleet retry {job.job_id} --budget-usd" in stopped.reason
        spent, limit = state.budget(job.job_id).spent_usd()
        assert 0 < spent <= limit == 0.005  # never overspent

        done = run("retry", job.job_id, "--budget-usd", "5", "--json", url=redis_url)
        assert done.returncode == 0, done.stderr
        wait_for(lambda: state.jobs.get(job.job_id).status.finished, 120, "the job")
    finished = state.jobs.get(job.job_id)
    assert finished.status == "succeeded" and finished.budget_usd == 5
    spent, limit = state.budget(job.job_id).spent_usd()
    assert spent > 0.005 and limit == 5
    assert abs(spent - state.usage(job.job_id).get().cost_usd) < 1e-5  # what usage says it cost


def test_a_tenants_daily_budget_stops_its_jobs_and_they_go_on_once_it_is_raised(
    state: State, redis_url: str, start_fleet
) -> None:
    set_it = run("limits", "tenant", "acme", "--daily-usd", "0.005", "--json", url=redis_url)
    assert set_it.returncode == 0, set_it.stderr
    assert json.loads(set_it.stdout)["daily_usd"] == 0.005
    with ScriptedOpenAI(load_scenario("demo"), faults=[], malformed=set()) as api:
        start_fleet(
            planners=1, coders=1, reviewers=1, lease_ms=5_000, worker_env=openai_env(api.url)
        )
        # No budget of its own: the tenant's day stops it, within its first few calls (one
        # coder slot, as in the test above, keeps the loopback's replay in step).
        job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS, tenant="acme"))
        wait_for(lambda: state.jobs.get(job.job_id).status.finished, 120, "the stop")
        stopped = state.jobs.get(job.job_id)
        assert stopped.status == "failed" and "tenant acme" in stopped.reason, stopped.reason
        assert "daily money budget" in stopped.reason
        spent, limit = state.spend.today(["acme"])["acme"]
        assert 0 < spent <= limit == 0.005  # never overspent, however many slots called
        # Another tenant's calls are not held by acme's budget.
        other = state.jobs.submit(JobSpec(goal=GOAL, tenant="zen"))
        with pytest.raises(TenantBudgetExceeded, match="tenant acme"):
            state.budget(job.job_id, "acme").reserve(100, 0.01)
        held = state.budget(other.job_id, "zen").reserve(100, 0.01)
        state.budget(other.job_id, "zen").settle(held, 0)

        # Raised (the weight kept), the job goes on where it stopped.
        assert run("limits", "tenant", "acme", "--weight", "3", url=redis_url).returncode == 0
        raised = run("limits", "tenant", "acme", "--daily-usd", "5", url=redis_url)
        assert "weight 3" in raised.stdout and "$5.00 a day" in raised.stdout, raised.stdout
        assert run("retry", job.job_id, url=redis_url).returncode == 0
        wait_for(lambda: state.jobs.get(job.job_id).status.finished, 120, "the job")
    assert state.jobs.get(job.job_id).status == "succeeded"
    shown = json.loads(run("limits", "show", "--json", url=redis_url).stdout)["tenants"]["acme"]
    assert shown["weight"] == 3 and shown["daily_usd"] == 5
    # Today's spend is what acme's job cost (zen's is not counted against acme).
    assert abs(shown["spent_today_usd"] - state.usage(job.job_id).get().cost_usd) < 1e-5


def test_a_call_refused_by_either_budget_holds_nothing_in_the_other(state: State) -> None:
    state.spend.set_limit("acme", 0.05)
    job = state.jobs.submit(JobSpec(goal="g", tenant="acme", budget_usd=0.02))
    budget = state.budget(job.job_id, "acme")
    with pytest.raises(BudgetExceeded) as refused:  # the job's: $0.03 > $0.02
        budget.reserve(100, 0.03)
    assert not isinstance(refused.value, TenantBudgetExceeded)
    held = budget.reserve(100, 0.015)
    other = state.jobs.submit(JobSpec(goal="g", tenant="acme", budget_usd=1))
    with pytest.raises(TenantBudgetExceeded):  # the day's: $0.015 held + $0.04 > $0.05
        state.budget(other.job_id, "acme").reserve(100, 0.04)
    budget.settle(held, 90, 0.01)
    assert state.client.hmget(keys.budget(other.job_id), "reserved", "reserved_usd") == [b"0", b"0"]
    day = state.client.hmget(keys.tenant_spend("acme"), "reserved_usd", "used_usd")
    assert day == [b"0", b"10000"]  # only what was spent, in micro-dollars
    assert state.spend.today(["acme"]) == {"acme": (0.01, 0.05)}


def test_each_routes_admission_is_in_the_metrics(state: State) -> None:
    from coordinator.metrics import FleetCollector

    state.routes.set_limits("r", RouteLimits(concurrency=1))
    route = Route(state.client, "r")
    first = route.acquire(10)
    route.settle(first, used=10, outcome=Outcome.LIMITED, retry_after_ms=30_000)
    samples = {
        (s.name, s.labels.get("route")): s.value
        for family in FleetCollector(state).collect()
        for s in family.samples
    }
    assert samples[("redfleet_route_calls_total", "r")] == 1
    assert samples[("redfleet_route_429s_total", "r")] == 1
    assert 29 <= samples[("redfleet_route_cooling_seconds", "r")] <= 30
    assert samples[("redfleet_route_in_flight", "r")] == 0
