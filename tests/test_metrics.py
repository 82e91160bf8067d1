"""`up --metrics-port`: the fleet's metrics, scraped over HTTP from a real fleet."""

from __future__ import annotations

import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from coordinator.metrics import FleetCollector
from shared_state import JobSpec, Scenario, State, free_port

from .conftest import events_named, wait_for
from .test_agent_jobs import GOAL
from .test_cli import run


def _scrape(port: int) -> dict[str, dict[tuple, float]]:
    """{metric sample name: {labels as sorted items: value}}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


ROLES = ("planner", "coder", "reviewer")


def _listening(port: int) -> bool:
    try:
        return bool(_scrape(port))
    except OSError:  # not yet listening
        return False


def test_scraped_metrics_match_the_finished_jobs_status(
    state: State, redis_url: str, up_process
) -> None:
    port = free_port()
    up_process(redis_url, "--metrics-port", str(port), "--coders", "1", "--lease-ms", "3000",
               "--concurrency", "3")  # fmt: skip
    wait_for(lambda: _listening(port), 30, "the metrics endpoint")
    job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
    wait_for(lambda: state.jobs.get(job.job_id).status == "succeeded", 120, "the job")
    status = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)
    usage = status["usage"]
    claims = len(events_named(state, job.job_id, "task.claimed"))

    def settled() -> dict | None:
        m = _scrape(port)  # the mirror lags by up to a heartbeat: poll until it caught up
        succeeded = m.get("redfleet_tasks_finished_total", {})
        done = (
            m["redfleet_claims_total"][()] == claims
            and m["redfleet_model_calls_total"][()] == usage["calls"]
            # The root's end comes after its last call: it may be mirrored a batch later.
            and sum(v for k, v in succeeded.items() if ("status", "succeeded") in k)
            == len(status["tasks"])
        )
        return m if done else None

    m = wait_for(settled, 30, "the counters to catch up with the job")
    tokens = m["redfleet_tokens_total"]
    assert tokens[(("kind", "input"),)] == usage["input_tokens"]
    assert tokens[(("kind", "cached"),)] == usage["cached_tokens"]
    assert tokens[(("kind", "output"),)] == usage["output_tokens"]
    assert abs(m["redfleet_cost_usd_total"][()] - usage["cost_usd"]) < 1e-6
    spend = m["redfleet_tenant_cost_usd_total"]
    assert abs(spend[(("tenant", "default"),)] - usage["cost_usd"]) < 1e-6
    assert m["redfleet_context_high_water_tokens"][()] == usage["high_water"]
    assert m["redfleet_cache_hit_ratio"][()] == usage["cached_tokens"] / usage["input_tokens"]
    assert m["redfleet_step_latency_seconds_count"][()] == usage["calls"]
    succeeded = m["redfleet_tasks_finished_total"]
    assert sum(v for k, v in succeeded.items() if ("status", "succeeded") in k) == len(
        status["tasks"]
    )
    renewals = len(events_named(state, job.job_id, "task.renewed"))
    assert m["redfleet_renewals_total"][()] == renewals
    assert m["redfleet_fenced_writes_total"][()] == 0
    # Every event that is about a task counts under that task's role.
    events = {tuple(dict(k).values()): v for k, v in m["redfleet_events_total"].items()}
    for name in ("task.claimed", "task.renewed", "model.called", "task.succeeded"):
        roles = {role for (event, role) in events if event == name}
        assert roles and "" not in roles, (name, roles)
    assert m["redfleet_jobs_active"][()] == 0
    workers = m["redfleet_workers"]
    assert {dict(k)["role"]: v for k, v in workers.items()} == {
        "planner": 1,
        "coder": 1,
        "reviewer": 1,
    }
    slots = {tuple(dict(k).values()): v for k, v in m["redfleet_worker_slots"].items()}
    assert slots == {(r, st): 3 if st == "idle" else 0 for r in ROLES for st in ("busy", "idle")}
    assert set(m["redfleet_queue_depth"]) == {(("queue", r),) for r in ROLES}


def test_reaps_are_counted_as_the_job_streams_record_them(state: State, start_fleet) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=1_000)
    job = state.jobs.submit(JobSpec(goal="p", scenario=Scenario.CRASH, fanout=2, max_attempts=2))
    wait_for(lambda: state.jobs.get(job.job_id).status == "failed", 90, "the job to fail")
    ended = [
        e
        for name in ("task.requeued", "task.dead")
        for e in events_named(state, job.job_id, name)
        if e.model_extra.get("reason", "").startswith("lease expired")
    ]
    assert len(ended) == 2  # both attempts of the poison coder

    def reaps() -> float | None:
        state.events.flush()
        families = {f.name: f for f in FleetCollector(state).collect()}
        value = families["redfleet_reaps"].samples[0].value
        return value if value == len(ended) else None

    assert wait_for(reaps, 30, "the reaps to be counted") == 2


def test_the_collector_knows_the_buckets_the_mirror_counts_into() -> None:
    import re
    from pathlib import Path

    from coordinator.metrics import LATENCY_BUCKETS_MS

    lua = Path(__file__).parent.parent / "shared_state" / "lua" / "mirrorEvents-2.lua"
    (listed,) = re.findall(r"LATENCY_BUCKETS_MS = \{([^}]*)\}", lua.read_text())
    assert tuple(int(x) for x in listed.split(",")) == LATENCY_BUCKETS_MS
