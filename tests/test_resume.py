"""`redfleet resume`: resumption checks against the records, then a new round (the seeds' cases)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from shared_state import JobSpec, Role, Scenario, State, keys
from workers.handoff import build
from workers.llm import load_scenario
from workers.roles.features import FeatureList

from .conftest import events_named, wait_for
from .loopback import ScriptedOpenAI
from .test_agent_jobs import GOAL
from .test_cli import assert_one_line_error, run

DAY_MS = 86_400_000


def _latest_features(state: State, job_id: str) -> tuple[FeatureList, dict[str, int]]:
    store = state.artifacts(job_id)
    latest = store.latest("features")
    return FeatureList.model_validate_json(store.text(latest.id)), store.stored_ms()


def test_changed_criteria_and_stale_evidence_are_redone_and_reverified_none_survives(
    state: State, start_fleet, redis_url: str
) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=5_000)
    job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
    wait_for(lambda: state.jobs.get(job.job_id).status == "succeeded", 120, "round 1")
    before_version = build(state, job.job_id).criteria_version
    features, stored = _latest_features(state, job.job_id)
    assert all(f.passes for f in features.features)
    # Two sources changed overnight: the evidence of F1 and F2 is two days old.
    now = state.client.time()[0] * 1000
    for f in features.features[:2]:
        state.client.zadd(keys.artifacts(job.job_id), {e: now - 2 * DAY_MS for e in f.evidence})

    out = run("resume", job.job_id, "--constraint", "accented letters must be transliterated",
              "--max-evidence-age", "24h", "--json", url=redis_url)  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    verdicts = {c["feature_id"]: c["verdict"] for c in doc["checks"]}
    assert verdicts == {"F1": "reverify", "F2": "reverify", "F3": "redo"}
    assert doc["started"] and doc["stage"] == "r1/resume"
    resumed_at = state.client.time()[0] * 1000

    wait_for(lambda: state.jobs.get(job.job_id).status == "succeeded", 120, "the resumed round")
    after, stored = _latest_features(state, job.job_id)
    # 0 stale verdicts survive: every passing feature's evidence is from the new round.
    assert all(f.passes and f.evidence for f in after.features)
    assert all(stored[e] >= resumed_at for f in after.features for e in f.evidence)
    # The changed feature was redone: coders ran again in the new round.
    redone = [t for t in state.tasks.list(job.job_id) if t.wave.startswith("r1/")]
    assert {t.role for t in redone} >= {Role.CODER, Role.REVIEWER}
    checked = events_named(state, job.job_id, "resume.checked")
    assert len(checked) == 3
    package = build(state, job.job_id)
    assert package.criteria_version != before_version
    assert package.constraints == ["accented letters must be transliterated"]
    assert {r.feature_id: r.verdict for r in package.resumption} == verdicts
    # Nothing but the root planner ran in both rounds.
    succeeded = Counter(e.task_id for e in events_named(state, job.job_id, "task.succeeded"))
    assert {t for t, n in succeeded.items() if n > 1} == {job.root_task}

    again = json.loads(run("resume", job.job_id, "--json", url=redis_url).stdout)
    assert not again["started"]  # fresh evidence, nothing changed: every feature keeps
    assert {c["verdict"] for c in again["checks"]} == {"keep"}


def test_a_decision_stated_early_holds_after_a_kill_and_no_feature_passes_unchecked(
    state: State, start_fleet, tmp_path: Path
) -> None:
    decision = "Decision: slugs use hyphens, never underscores."
    marker = tmp_path / "fired"
    with ScriptedOpenAI(load_scenario("demo"), faults=[], malformed=set()) as api:
        env = (
            ("REDFLEET_PROVIDER", "openai"),
            ("REDFLEET_MODEL", "gpt-4.1-mini"),
            ("REDFLEET_BASE_URL", api.url),
            ("OPENAI_API_KEY", "sk-loopback"),
            ("REDFLEET_FAILPOINTS", f"journal.after-effect.write_file@{marker}"),
        )
        start_fleet(planners=1, coders=2, reviewers=1, lease_ms=1_000, worker_env=env)
        job = state.jobs.submit(JobSpec(goal=f"{GOAL}. {decision}", scenario=Scenario.AGENTS))
        wait_for(lambda: state.jobs.get(job.job_id).status.finished, 120, "the job")
    assert marker.exists() and state.jobs.get(job.job_id).status == "succeeded"
    resumed = [t for t in state.tasks.list(job.job_id) if t.attempt > 1]
    assert resumed  # the killed coder's task was reclaimed and resumed from its records
    # The decision is in every call the resumed task made, verbatim.
    calls = [r for r in api.requests if f"name: {_name(state, job.job_id, resumed[0])}"
             in r["messages"][1]["content"]]  # fmt: skip
    assert calls and all(decision in json.dumps(r["messages"]) for r in calls)
    features, _ = _latest_features(state, job.job_id)
    store = state.artifacts(job.job_id)
    for f in features.features:  # passing only on a passing check's log
        assert f.passes and f.evidence
        assert all(store.get(e).title.endswith("exit 0") for e in f.evidence)


def _name(state: State, job_id: str, task) -> str:
    spec = json.loads(state.artifacts(job_id).text(task.input))
    return spec["name"]


def test_resume_refuses_a_running_or_behaviour_job_in_one_line(
    state: State, redis_url: str
) -> None:
    running = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.AGENTS))
    assert_one_line_error(run("resume", running.job_id, url=redis_url), "only a finished job")
    assert_one_line_error(
        run("resume", running.job_id, "--max-evidence-age", "soon", url=redis_url),
        "--max-evidence-age",
    )


def _resume(state: State, job_id: str, **changes: object) -> str:
    spec = {"stage": "r1/resume", "goal": "", "constraints": "[]", "criteria_version": "v",
            "criteria_changed": False, "features": "", "checks": ""} | changes  # fmt: skip
    return state.jobs.resume(job_id, **spec)


def _finished_agents_job_with_a_stale_child(state: State):
    """A cancelled agents job whose planner spawned two coders: one still claimed."""
    from shared_state import Child

    job = state.jobs.submit(JobSpec(goal="old goal", scenario=Scenario.AGENTS))
    root = state.tasks.claim(job.job_id, job.root_task, "planner-0", 60_000)
    ids = state.tasks.spawn(root.claim, "review", [Child(Role.CODER, "a"), Child(Role.CODER, "b")])
    child = state.tasks.claim(job.job_id, ids[0], "coder-0", 60_000)
    state.jobs.cancel(job.job_id)
    return job, ids, child


def test_a_resume_cancels_and_fences_an_earlier_rounds_unfinished_tasks(state: State) -> None:
    from shared_state import Fenced

    job, ids, child = _finished_agents_job_with_a_stale_child(state)
    _resume(state, job.job_id, goal="new goal", criteria_changed=True)
    for task_id in ids:
        assert state.tasks.get(job.job_id, task_id).status == "cancelled"
    with pytest.raises(Fenced):  # the old round's owner cannot count in the new round
        state.tasks.complete(child.claim, job.root_task, "late")
    root = state.tasks.get(job.job_id, job.root_task)
    assert (root.status, root.stage, root.pending) == ("queued", "r1/resume", 0)
    resumed = state.jobs.get(job.job_id)
    assert (resumed.status, resumed.goal, resumed.resumes) == ("running", "new goal", 1)


def test_a_worker_that_kept_the_old_spec_reads_the_resumed_one(state: State) -> None:
    job, _, child = _finished_agents_job_with_a_stale_child(state)
    assert child.job.goal == "old goal"  # cached by this store from the first claim
    _resume(state, job.job_id, goal="new goal", constraints='["ascii"]', criteria_changed=True)
    again = state.tasks.claim(job.job_id, job.root_task, "planner-1", 60_000)
    assert (again.job.goal, again.job.constraints) == ("new goal", '["ascii"]')


def test_a_resumed_jobs_artifacts_stop_expiring_and_expire_with_it_again(state: State) -> None:
    job, _, _ = _finished_agents_job_with_a_stale_child(state)
    ref = state.artifacts(job.job_id).put("log", kind="log", title="t")
    assert state.client.ttl(keys.artifact(job.job_id, ref.id)) > 0
    _resume(state, job.job_id)
    assert state.client.ttl(keys.artifact(job.job_id, ref.id)) == -1
    state.jobs.cancel(job.job_id)
    assert state.client.ttl(keys.artifact(job.job_id, ref.id)) > 0


def test_a_resume_that_loses_the_race_leaves_no_records_behind(state: State) -> None:
    from shared_state import NotResumable
    from workers import resume

    job, _, _ = _finished_agents_job_with_a_stale_child(state)
    features = FeatureList(goal="old goal", features=[
        {"id": "F1", "description": "d", "check": "test_a.py::test_x"}])  # fmt: skip
    state.artifacts(job.job_id).put(features.model_dump_json(), kind="features", title="f")
    found = resume.plan(state, job.job_id)
    before = {r.id for r in state.artifacts(job.job_id).list()}
    resume.start(state, resume.plan(state, job.job_id))  # the first one wins
    with pytest.raises(NotResumable):
        resume.start(state, found)
    kinds = Counter(r.kind for r in state.artifacts(job.job_id).list() if r.id not in before)
    assert kinds == {"features": 1, "resume": 1}  # the winner's only
    assert len(events_named(state, job.job_id, "resume.checked")) == 1


def test_a_resume_resent_after_its_round_already_ended_starts_no_second_round(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _, _ = _finished_agents_job_with_a_stale_child(state)
    runner = state.jobs.runner
    real = runner.run

    def lost_reply(name, job_id, keys_, args):
        if name != "resumeJob":
            return real(name, job_id, keys_, args)
        real(name, job_id, keys_, args)  # it ran; its reply was lost ...
        state.client.hset(keys.job(job_id), "status", "failed")  # ... and the round failed fast
        return real(name, job_id, keys_, args)  # the client sends it again

    monkeypatch.setattr(runner, "run", lost_reply)
    assert _resume(state, job.job_id) == "r1/resume"
    assert state.jobs.get(job.job_id).resumes == 1
    assert len(events_named(state, job.job_id, "job.resumed")) == 1
