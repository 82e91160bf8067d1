"""`up --metrics-port`: the fleet's metrics, scraped over HTTP from a real fleet."""

from __future__ import annotations

import json
import time
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
        if name == "task.renewed" and not renewals:
            # A job this quick held no lease through a heartbeat: nothing was renewed (a
            # renewal's role is checked where one always happens: test_heartbeat).
            continue
        roles = {role for (event, role) in events if event == name}
        assert roles and "" not in roles, (name, roles)
    assert m["redfleet_jobs_active"][()] == 0
    # Each worker's CPU by phase, sent with its heartbeats: the agent loop's steps show.
    phases = {"rq", "setup", "build", "call", "record", "tools", "heartbeat"}

    def cpu() -> dict[str, float] | None:
        family = _scrape(port).get("redfleet_worker_cpu_seconds_total", {})
        got = {dict(k)["phase"]: v for k, v in family.items()}
        return got if phases <= {p for p, v in got.items() if v > 0} else None

    wait_for(cpu, 10, "every phase's CPU to be counted")
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


def test_a_mirror_batch_sums_its_counters_once() -> None:
    """The worker sums a batch's counters: two steps and a summary give one increment each."""
    from shared_state.events import fleet_counts

    def called(ms: str, kind: str = "step") -> dict[str, str]:
        return {"event": "model.called", "role": "coder", "input_tokens": "700",
                "cached_tokens": "100", "output_tokens": "20", "cost_micro_usd": "5",
                "tenant": "acme", "latency_ms": ms, "kind": kind}  # fmt: skip

    batch = [
        called("90"),
        called("3000"),
        called("9", kind="compaction"),
        {"event": "task.requeued", "role": "coder", "reason": "lease expired at 12"},
    ]
    counts, high_water = fleet_counts(batch)
    assert high_water == 700
    assert counts["event|model.called|coder"] == 3 and counts["reaps"] == 1
    assert counts["tokens|input"] == 2_100 and counts["cost_micro_usd|acme"] == 15
    assert counts["latency|count"] == 2 and counts["latency|sum"] == 3_090
    assert counts["latency|le|100"] == 1 and counts["latency|le|2500"] == 1
    assert counts["latency|le|5000"] == 2 and "redeliveries" not in counts


def test_a_phase_inside_another_charges_its_cpu_to_itself_only() -> None:
    from workers.phases import PhaseClock

    def spin(seconds: float) -> None:  # this thread's CPU, not the clock on the wall
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    clock = PhaseClock()
    with clock.phase("setup"):  # a thread with no base is not counted
        spin(0.01)
    assert clock.take() == {}
    clock.base("rq")
    with clock.phase("setup"):
        spin(0.02)
        with clock.phase("call"):
            spin(0.05)
    spin(0.01)
    spent = clock.take()
    assert spent["call"] >= 50_000 and 20_000 <= spent["setup"] < 50_000
    assert 10_000 <= spent["rq"] < 20_000
