"""Agents jobs through real fleets: small records, crash-safe effects, a real provider's wire."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared_state import EffectStatus, JobSpec, Role, Scenario, State, keys
from workers.llm import load_scenario

from .conftest import events_named, wait_for
from .loopback import ScriptedOpenAI
from .test_cli import run

GOAL = "Build slug.py: slugify with tests"
EDGE_TEST = "def test_edge_empty_and_punctuation"
SIZE_LIMIT = 2048


def finished(state: State, job_id: str, timeout: float = 90):
    return wait_for(
        lambda: (job := state.jobs.get(job_id)).status.finished and job,
        timeout=timeout,
        what=f"job {job_id} to finish",
    )


def _assert_small(state: State, pattern: str) -> set[bytes]:
    """Every field of every hash matching ``pattern`` is at most 2 KiB; the keys looked at."""
    hashes = {k for k in state.client.scan_iter(pattern) if state.client.type(k) == b"hash"}
    for key in hashes:
        sizes = {f.decode(): len(v) for f, v in state.client.hgetall(key).items()}
        assert max(sizes.values()) <= SIZE_LIMIT, (key, sizes)
    return hashes


def _assert_wave_small(state: State, role: Role, count: int) -> None:
    """The ``count`` envelopes waiting in ``role``'s queue are among the small hashes."""
    waiting = {b"rq:job:" + i for i in state.delivery.waiting_ids({role})}
    assert len(waiting) == count
    assert waiting <= _assert_small(state, "rq:job:*")


def test_envelopes_and_task_records_carry_no_payload_over_2_kib(state: State, start_fleet) -> None:
    # An envelope taken by a worker soon runs and expires: look at each wave while it waits,
    # by starting each role's workers only once the previous wave is queued.
    job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
    _assert_wave_small(state, Role.PLANNER, 1)
    depth = state.delivery.depths
    start_fleet(planners=1, coders=0, reviewers=0, lease_ms=5_000)
    wait_for(lambda: depth()["coder"] == 2, what="the coder envelopes")
    _assert_wave_small(state, Role.CODER, 2)
    start_fleet(planners=0, coders=2, reviewers=0, lease_ms=5_000)
    wait_for(lambda: depth()["reviewer"] == 1, what="the reviewer envelope")
    _assert_wave_small(state, Role.REVIEWER, 1)
    start_fleet(planners=0, coders=0, reviewers=1, lease_ms=5_000)
    assert finished(state, job.job_id).status == "succeeded"
    assert len(_assert_small(state, keys.task(job.job_id, "*"))) == 5
    # The payloads went into artifacts, which the records name by id.
    store = state.artifacts(job.job_id)
    assert store.get(state.jobs.get(job.job_id).result).kind == "report"
    assert {r.kind for r in store.list()} >= {"features", "file", "log", "summary", "verdict"}


@pytest.mark.parametrize("point", ["after-intent", "after-effect"])
def test_a_coder_killed_mid_effect_resumes_and_the_effect_happens_once(
    state: State, start_fleet, tmp_path: Path, point: str
) -> None:
    marker = tmp_path / "fired"
    failpoint = f"journal.{point}.append_file@{marker}"
    job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
    start_fleet(
        planners=1, coders=2, reviewers=1, lease_ms=1_000,
        worker_env=(("REDFLEET_FAILPOINTS", failpoint),),
    )  # fmt: skip
    done = finished(state, job.job_id)
    assert done.status == "succeeded", done.reason
    assert marker.exists()  # a coder really was killed at that point
    records, store = state.records(job.job_id), state.artifacts(job.job_id)
    (appender,) = [
        t for t in state.tasks.list(job.job_id) if t.role is Role.CODER and t.stage == "resume"
    ]
    assert appender.attempt == 2  # reclaimed after the kill, by the reaper
    assert events_named(state, job.job_id, "task.requeued")
    # The effect counted in the result: the appended tests are in the file once.
    test_file = store.text(records.files()["test_slug.py"])
    assert test_file.count(EDGE_TEST) == 1
    (entry,) = [e for e in records.journal(appender.task_id).values() if e.tool == "append_file"]
    assert entry.status is EffectStatus.DONE
    if point == "after-effect":
        # It had happened: the check found it, the replayed call got the recorded result.
        assert entry.result == "settled on resume: the effect was found"
    else:
        # It had not: the check said so, and the replayed call made it, once.
        assert entry.result.startswith("appended ")


def test_a_job_through_the_openai_wire_survives_faults_and_records_usage_per_step(
    state: State, start_fleet, redis_url: str
) -> None:
    faults = [(429, {"error": {"message": "rate limited"}}), (500, {"error": {"message": "boom"}})]
    with ScriptedOpenAI(load_scenario("demo"), faults=faults, malformed={"coder.impl"}) as api:
        job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
        env = (
            ("REDFLEET_PROVIDER", "openai"),
            ("REDFLEET_MODEL", "gpt-4.1-mini"),
            ("REDFLEET_BASE_URL", api.url),
            ("OPENAI_API_KEY", "sk-loopback"),
        )
        start_fleet(planners=1, coders=2, reviewers=1, lease_ms=5_000, worker_env=env)
        done = finished(state, job.job_id)
    assert done.status == "succeeded", done.reason
    # The malformed call went back to the model as a tool error, and the run went on.
    rejected = [
        m
        for r in api.requests
        for m in r["messages"]
        if m["role"] == "tool" and "rejected: arguments are not JSON" in (m["content"] or "")
    ]
    assert rejected
    calls = events_named(state, job.job_id, "model.called")
    assert calls and all(e.provider == "openai" and e.model == "gpt-4.1-mini" for e in calls)
    assert all(int(e.input_tokens) > 0 and int(e.output_tokens) > 0 for e in calls)
    # Successful answers only: the 429 and 500 were retried inside one call.
    assert len(calls) == len(api.requests) - len(faults)
    status = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)
    usage = status["usage"]
    assert usage["calls"] == len(calls)
    assert usage["input_tokens"] == sum(int(e.input_tokens) for e in calls)
    assert usage["cached_tokens"] == sum(int(e.cached_tokens) for e in calls) > 0
    assert usage["output_tokens"] == sum(int(e.output_tokens) for e in calls)
    assert usage["cost_usd"] > 0
    # `logs --json` prints a whole number as a number, whichever script or worker wrote it
    # (a stream holds strings): no field of any event is left a string of digits.
    logs = run("logs", job.job_id, "--json", "--all", "--last", "100000", url=redis_url)
    printed = [json.loads(line) for line in logs.stdout.splitlines()]
    assert {e["event"] for e in printed} >= {"task.claimed", "task.renewed", "model.called"}
    assert {k for e in printed for k, v in e.items() if isinstance(v, str) and v.isdigit()} == set()
    assert all(isinstance(e["input_tokens"], int) for e in printed if e["event"] == "model.called")


def _call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


TEST_M = "from m import double\n\n\ndef test_double():\n    assert double(3) == 6\n"
BUGGY = {
    "name": "buggy",
    "roles": {
        "planner": [
            _call("write_features", features=[
                {"id": "F1", "description": "double(x) returns 2x", "check": "test_m.py"}]),
            _call("dispatch_coders", tasks=[{"name": "impl", "brief": "write m.py and tests"}]),
        ],
        "coder.impl": [
            _call("write_file", path="m.py", content="def double(x):\n    return x + 1\n"),
            _call("write_file", path="test_m.py", content=TEST_M),
            {"text": "m.py and test_m.py written"},
        ],
        "planner/review": [_call("dispatch_reviewer", brief="check F1")],
        "reviewer.review": [
            _call("run_checks", feature_ids=["F1"]),
            _call("submit_verdicts", verdicts=[{"feature_id": "F1", "passes": True}]),
            _call("submit_verdicts", verdicts=[{"feature_id": "F1", "passes": False}]),
        ],
        "planner/report": [
            _call("dispatch_fixes", tasks=[{"name": "impl", "brief": "fix double"}]),
            {"text": "F1 still fails"},
        ],
    },
}  # fmt: skip


def test_a_failing_feature_gets_bounded_fix_rounds_and_never_passes_without_evidence(
    state: State, start_fleet, tmp_path: Path
) -> None:
    script = tmp_path / "buggy.json"
    script.write_text(json.dumps(BUGGY))
    job = state.jobs.submit(JobSpec(goal="double", scenario=Scenario.AGENTS))
    start_fleet(planners=1, coders=1, reviewers=1, worker_env=(("REDFLEET_SCRIPT", str(script)),))
    done = finished(state, job.job_id)
    assert done.status == "failed"
    assert "1 of 1 features fail after 2 review round(s): F1" in done.reason
    roles = sorted(t.role.value for t in state.tasks.list(job.job_id))
    assert roles == ["coder", "coder", "planner", "reviewer", "reviewer"]
    store = state.artifacts(job.job_id)
    # The reviewer's claim that F1 passes was refused both times: no check had passed.
    verdicts = [json.loads(store.text(r.id)) for r in store.list() if r.kind == "verdict"]
    assert verdicts and all(not v["passes"] for d in verdicts for v in d["verdicts"])
    report = json.loads(store.text(done.reason.rsplit("report ", 1)[1]))
    (feature,) = report["features"]
    assert not feature["passes"] and report["rounds"] == 2
    (log,) = feature["evidence"]
    assert "assert 4 == 6" in store.text(log)
