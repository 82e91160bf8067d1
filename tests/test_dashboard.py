"""`redfleet dashboard`: its JSON, pages, token gate and /metrics against a private Redis."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from coordinator.api import Client
from coordinator.dashboard import create_app, is_loopback, require_token
from coordinator.dashboard.auth import COOKIE
from coordinator.errors import CoordinatorError
from shared_state import JobSpec, Scenario, State, free_port, keys

from .conftest import wait_for
from .test_agent_jobs import GOAL, finished
from .test_cli import assert_one_line_error, run

SECRET = "k7q-dashboard-secret"
HOSTILE = '<script>alert("goal")</script><img src=x onerror=alert(1)> & "quotes"'


@pytest.fixture
def web(state: State) -> TestClient:
    return TestClient(create_app(state), base_url="http://127.0.0.1:8765")


def test_a_finished_jobs_documents_match_its_status_and_records(
    state: State, start_fleet, redis_url: str, web: TestClient
) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=3_000)
    job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
    assert finished(state, job.job_id, 120).status == "succeeded"
    status = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)

    doc = web.get(f"/api/jobs/{job.job_id}").json()
    assert {k: v for k, v in doc.items() if k != "tasks" and k in status} == {
        k: v for k, v in status.items() if k != "tasks"
    }
    assert [{k: t[k] for k in status["tasks"][0]} for t in doc["tasks"]] == status["tasks"]
    kinds = sorted(t["kind"] for t in doc["tasks"])
    assert kinds == ["coder", "coder", "planner", "reviewer", "subagent"]
    assert all(t["lease_remaining_ms"] is None for t in doc["tasks"])  # nothing is claimed
    report = json.loads(state.artifacts(job.job_id).text(status["result"]))
    assert [{k: f[k] for k in report["features"][0]} for f in doc["features"]] == report["features"]
    assert {f["verdict"] for f in doc["features"]} == {"passes"}
    assert {a["id"] for a in doc["artifacts"]} == {r.id for r in state.artifacts(job.job_id).list()}

    calls = web.get(f"/api/jobs/{job.job_id}/calls").json()
    recorded = state.client.scard(keys.usage_calls(job.job_id))
    assert len(calls["calls"]) == recorded == status["usage"]["calls"] > 0
    assert calls["usage"] == status["usage"]
    assert [c["n"] for c in calls["calls"]] == list(range(1, recorded + 1))
    assert calls["calls"][-1]["high_water"] == status["usage"]["high_water"]
    assert calls["calls"][-1]["cost_micro_usd_total"] == round(status["usage"]["cost_usd"] * 1e6)
    assert sum(c["input_tokens"] for c in calls["calls"]) == status["usage"]["input_tokens"]
    assert sum(v["calls"] for v in calls["latency"].values()) == recorded

    events = web.get(f"/api/jobs/{job.job_id}/events").json()
    names = [e["event"] for e in events["events"]]
    assert names[0] == "job.submitted" and "job.succeeded" in names
    assert "task.renewed" not in names
    again = web.get(f"/api/jobs/{job.job_id}/events", params={"after": events["last"]}).json()
    assert again == {"events": [], "last": events["last"], "more": False}

    artifact = web.get(f"/api/jobs/{job.job_id}/artifacts/{status['result']}").json()
    assert artifact["content"] == state.artifacts(job.job_id).text(status["result"])

    listed = web.get("/api/jobs", params={"status": "succeeded"}).json()
    (row,) = listed["jobs"]
    assert (row["job_id"], row["done"], row["total"]) == (job.job_id, 5, 5)
    assert row["unsucceeded"] == {}
    assert row["tokens"] == status["usage"]["input_tokens"] + status["usage"]["output_tokens"]
    assert web.get("/api/jobs", params={"status": "running"}).json()["jobs"] == []

    workers = web.get("/api/workers").json()
    assert sorted(w["role"] for w in workers["workers"]) == [
        "coder", "coder", "planner", "reviewer"
    ]  # fmt: skip
    assert workers["queues"] == {"planner": 0, "coder": 0, "reviewer": 0}


def test_a_cancelled_jobs_row_says_its_tasks_ended_cancelled_not_done(
    state: State, web: TestClient
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    Client(state).cancel(job.job_id)
    (row,) = web.get("/api/jobs").json()["jobs"]
    assert (row["status"], row["done"], row["total"]) == ("cancelled", 1, 1)
    assert row["unsucceeded"] == {"cancelled": 1}


def test_workers_show_every_field_their_heartbeat_carries(state: State, web: TestClient) -> None:
    state.workers.beat(
        "coder-h-1",
        60_000,
        {"pid": 1, "host": "h", "role": "coder", "state": "busy", "slots": 4, "busy": 2,
         "tasks": "j-1/c-1 j-1/c-2", "zone": "eu-1"},
    )  # fmt: skip
    (worker,) = web.get("/api/workers").json()["workers"]
    # Typed as `redfleet workers --json` has them; a field this version does not know, as is.
    assert (worker["slots"], worker["busy"], worker["pid"]) == (4, 2, 1)
    assert worker["tasks"] == ["j-1/c-1", "j-1/c-2"] and worker["worker_id"] == "coder-h-1"
    assert worker["zone"] == "eu-1"


def test_an_unknown_job_or_artifact_is_a_404_with_a_message(state: State, web: TestClient) -> None:
    for path in ("/api/jobs/j-nope", "/api/jobs/j-nope/calls", "/api/jobs/j-nope/events"):
        reply = web.get(path)
        assert reply.status_code == 404, path
        assert reply.json() == {
            "error": "no job 'j-nope' (unknown, or expired after its retention)"
        }
    assert web.get("/jobs/j-nope").status_code == 404
    job = state.jobs.submit(JobSpec(goal="g"))
    reply = web.get(f"/api/jobs/{job.job_id}/artifacts/a-missing")
    assert reply.status_code == 404 and "a-missing" in reply.json()["error"]
    bad = web.get("/api/jobs", params={"status": "sleeping"})
    assert bad.status_code == 400 and "status: one of" in bad.json()["error"]
    bad = web.get(f"/api/jobs/{job.job_id}/events", params={"after": "0-0 +"})
    assert bad.status_code == 400 and "after: a stream id" in bad.json()["error"]
    # A bare time is a stream id as Redis reads it: "0" is the stream's start.
    assert web.get(f"/api/jobs/{job.job_id}/events", params={"after": "0"}).json()["events"]
    assert web.post("/api/jobs").status_code == 405  # read-only


def test_a_hostile_goal_is_escaped_in_the_page_and_exact_in_the_json(
    state: State, web: TestClient
) -> None:
    job = state.jobs.submit(JobSpec(goal=HOSTILE))
    page = web.get(f"/jobs/{job.job_id}")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "<img" not in page.text
    assert "&lt;script&gt;alert(&quot;goal&quot;)&lt;/script&gt;&lt;img" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert web.get(f"/api/jobs/{job.job_id}").json()["goal"] == HOSTILE
    assert web.get("/api/jobs").json()["jobs"][0]["goal"] == HOSTILE


def test_metrics_are_the_fleet_collectors(state: State, web: TestClient) -> None:
    state.jobs.submit(JobSpec(goal="g"))
    reply = web.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }
    for name in (
        "redfleet_claims_total",
        "redfleet_renewals_total",
        "redfleet_fenced_writes_total",
        "redfleet_model_calls_total",
        "redfleet_cache_hit_ratio",
        "redfleet_step_latency_seconds_count",
    ):
        assert name in samples, name
    assert samples["redfleet_jobs_active"] == 1


def test_with_a_token_a_request_needs_it_as_a_bearer_or_a_cookie(state: State) -> None:
    web = TestClient(create_app(state, tokens={"s3cret-t0ken": None}))
    for path in ("/", "/api/jobs", "/metrics", "/static/dashboard.js"):
        assert web.get(path).status_code == 401, path
    assert web.get("/api/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert web.get("/api/jobs", params={"token": "wrong"}).status_code == 401
    bearer = {"Authorization": "Bearer s3cret-t0ken"}
    assert web.get("/api/jobs", headers=bearer).status_code == 200
    assert web.get("/metrics", headers=bearer).status_code == 200

    given = web.get(
        "/", params={"token": "s3cret-t0ken", "status": "failed"}, follow_redirects=False
    )
    assert given.status_code == 303
    assert given.headers["location"] == "/?status=failed"  # the token leaves the address
    cookie = given.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=s3cret-t0ken") and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert web.get("/api/jobs").status_code == 200  # the client keeps the cookie
    stranger = TestClient(create_app(state, tokens={"s3cret-t0ken": None}))
    stranger.cookies.set(COOKIE, "guess")
    assert stranger.get("/api/jobs").status_code == 401


def test_without_a_token_only_a_loopback_host_is_answered(state: State) -> None:
    web = TestClient(create_app(state))
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "localhost", "127.0.0.2"):
        assert web.get("/api/jobs", headers={"Host": host}).status_code == 200, host
    # A page that rebinds its own name to 127.0.0.1 still sends that name.
    for host in ("attacker.example:8765", "attacker.example", "10.0.0.7:8765", ""):
        refused = web.get("/api/jobs", headers={"Host": host})
        assert refused.status_code == 421, host
        assert "--token" in refused.json()["error"]
    # With a token, the token is the gate: any name reaches it.
    gated = TestClient(create_app(state, tokens={"s3cret-t0ken": None}))
    bearer = {"Authorization": "Bearer s3cret-t0ken", "Host": "dash.example:8765"}
    assert gated.get("/api/jobs", headers=bearer).status_code == 200


def test_off_loopback_a_token_is_required_before_anything_starts(redis_url: str) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")
    assert not is_loopback("dashboard.example")
    require_token("127.0.0.1", {})
    require_token("0.0.0.0", {"t": None})
    require_token("0.0.0.0", {"t": "acme"})
    with pytest.raises(CoordinatorError, match="--token"):
        require_token("0.0.0.0", {})
    proc = run("dashboard", "--host", "0.0.0.0", "--port", str(free_port()), url=redis_url)
    assert_one_line_error(proc, "--token", "REDFLEET_DASHBOARD_TOKEN")


def test_the_command_serves_the_dashboard_on_the_embedded_settings_path(
    state: State, redis_url: str
) -> None:
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "REDFLEET_DASHBOARD_TOKEN": SECRET}
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "dashboard", "--port", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job = state.jobs.submit(JobSpec(goal="g"))
        url = f"http://127.0.0.1:{port}/api/jobs"

        def answered() -> httpx.Response | None:
            try:
                return httpx.get(url, headers={"Authorization": f"Bearer {SECRET}"}, timeout=5)
            except httpx.TransportError:  # not listening yet
                return None

        reply = wait_for(answered, 30, "the dashboard to answer")
        assert [j["job_id"] for j in reply.json()["jobs"]] == [job.job_id]
        assert httpx.get(url, timeout=5).status_code == 401  # the env var's token holds
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"dashboard on http://127.0.0.1:{port}/" in err
    assert SECRET not in err  # the token is never logged
    # Every other line is the fleet's JSON, uvicorn's start and stop lines included.
    lines = [json.loads(line) for line in err.splitlines() if not line.startswith("redfleet: ")]
    served = [line for line in lines if line.get("logger") == "uvicorn.error"]
    events = [line["event"] for line in served]
    assert any(e.startswith("Started server process") for e in events), lines
    assert any(e.startswith("Finished server process") for e in events), lines
    assert all({"level", "timestamp"} <= set(line) for line in served)


def test_a_port_in_use_is_a_one_line_error(redis_url: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = run("dashboard", "--port", str(port), url=redis_url)
    assert_one_line_error(proc, f"--host/--port: cannot listen on 127.0.0.1:{port}")


def test_answers_are_capped_and_paged(state: State, web: TestClient, monkeypatch) -> None:
    from coordinator.dashboard import documents

    job = state.jobs.submit(JobSpec(goal="g"))
    first = web.get(f"/api/jobs/{job.job_id}/events").json()
    monkeypatch.setattr(documents, "EVENTS_PER_ANSWER", 1_000)
    for n in range(2_500):  # a burst between two polls
        state.events.append("note.test", {"n": n}, job_id=job.job_id)
    seen, after, polls = [], first["last"], 0
    while True:
        page = web.get(f"/api/jobs/{job.job_id}/events", params={"after": after}).json()
        polls += 1
        assert len(page["events"]) <= 1_000
        seen += [int(e["n"]) for e in page["events"]]
        after = page["last"]
        if not page["more"]:
            break
    assert seen == list(range(2_500)) and polls == 3  # every event once, in order

    monkeypatch.setattr(documents, "CONTENT_CHARS", 1_000)
    ref = state.artifacts(job.job_id).put("é" * 2_500, kind="log", title="big")
    url = f"/api/jobs/{job.job_id}/artifacts/{ref.id}"
    parts, offset = [], 0
    while offset is not None:
        doc = web.get(url, params={"offset": offset}).json()
        assert len(doc["content"]) <= 1_000 and doc["length"] == 2_500
        parts.append(doc["content"])
        offset = doc["next"]
    assert "".join(parts) == "é" * 2_500 and len(parts) == 3
    assert web.get(url, params={"offset": "-1"}).status_code == 400


def test_a_bad_artifact_is_shown_as_such_not_a_failed_poll(state: State, web: TestClient) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    store = state.artifacts(job.job_id)
    store.put("{not json", kind="features", title="feature list")
    doc = web.get(f"/api/jobs/{job.job_id}")
    assert doc.status_code == 200
    assert doc.json()["features"] == [] and "unreadable" in doc.json()["features_error"]
    ref = store.put("log", kind="log", title="bytes")
    state.client.hset(keys.artifact(job.job_id, ref.id), "content", b"ok \xff\xfe end")
    shown = web.get(f"/api/jobs/{job.job_id}/artifacts/{ref.id}").json()
    assert shown["content"] == "ok \ufffd\ufffd end" and "not UTF-8" in shown["unreadable"]


def test_the_token_redirect_never_leaves_the_site(state: State) -> None:
    web = TestClient(create_app(state, tokens={"s3cret-t0ken": None}))
    for path in ("//evil.example/", "///evil.example/x", "/\\evil.example/"):
        url = f"http://testserver{path}?token=s3cret-t0ken"  # the path as sent, not a host
        web.cookies.clear()  # each time through the gate, not past it with the cookie
        given = web.get(url, follow_redirects=False)
        assert given.status_code == 303, path
        location = given.headers["location"]
        assert location.startswith("/") and not location.startswith(("//", "/\\")), location


def test_the_fleet_page_shows_each_routes_use_and_a_tenant_sees_only_its_own_calls(
    state: State, web: TestClient
) -> None:
    from shared_state.admission import Outcome, RouteLimits

    name = "openai:gpt-4.1-mini@127.0.0.1:9/v1"
    state.routes.set_limits(name, RouteLimits(rpm=600, concurrency=4))
    route = state.routes.route(name)
    for tenant in ("alpha", "beta", "beta"):
        route.settle(route.acquire(100, tenant=tenant), used=80)
    route.settle(route.acquire(100, tenant="alpha"), used=0, outcome=Outcome.LIMITED,
                 retry_after_ms=30_000)  # fmt: skip
    doc = web.get("/api/workers").json()["routes"]
    (row,) = [r for r in doc["rows"] if r["route"] == name]
    assert doc["columns"][0] == "route" and set(doc["columns"]) == set(row)
    assert (row["limits"], row["calls"], row["429s"]) == ("600 rpm, 4 at once", 4, 1)
    assert row["by tenant"] == "alpha 2, beta 2" and row["cooling"].endswith("(limited)")

    scoped = TestClient(create_app(state, tokens={"t-alpha": "alpha"}))
    mine = scoped.get("/api/workers", headers={"Authorization": "Bearer t-alpha"}).json()
    (row,) = [r for r in mine["routes"]["rows"] if r["route"] == name]
    assert row["by tenant"] == "alpha 2"  # beta's calls are beta's
