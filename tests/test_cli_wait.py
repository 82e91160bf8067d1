"""Waiting for a job and following it, and the CLI's small details: real CLI processes."""

from __future__ import annotations

import importlib.metadata
import json
import re

from rq import Queue

from coordinator.api import Client
from shared_state import JobSpec, Role, Scenario, State, queue_name

from .conftest import wait_for
from .test_cli import run


def test_submit_wait_exits_zero_when_the_job_succeeded(state: State, redis_url, start_fleet):
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=2_000)
    proc = run("submit", "greet", "--scenario", "noop", "--fanout", "1", "--wait", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    job_id, *progress = proc.stdout.splitlines()
    assert state.jobs.get(job_id).status == "succeeded"
    assert progress[-2].startswith(f"job {job_id} succeeded: 3/3 tasks done")
    assert progress[-1].startswith(f"job {job_id}: succeeded — greet")


def test_submit_wait_exits_one_when_the_job_failed(state: State, redis_url, start_fleet):
    # crash: the first coder kills its own worker; with one attempt the task is dead.
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=1_000)
    args = ("--scenario", "crash", "--fanout", "1", "--max-attempts", "1", "--wait", "--json")
    proc = run("submit", "boom", *args, url=redis_url)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "failed" and state.jobs.get(doc["job_id"]).status == "failed"
    assert any(t["status"] == "dead" for t in doc["tasks"])
    # What the line without --json says: not "done" for a task that died. The planner
    # waiting on the dead coder is ended by the job's end, which may come a reaper tick
    # after the job failed (the reaper that found the coder dead ends the job next tick).
    line = Client(state).progress(doc["job_id"]).line()
    assert "1 dead)" in line, line
    settled = r": (\d)/\1 tasks ended \((1 cancelled, )?1 dead\),"
    wait_for(
        lambda: re.search(settled, Client(state).progress(doc["job_id"]).line()),
        10,
        "the job's end to end the planner waiting on its dead coder",
    )


def test_submit_wait_gives_up_after_its_timeout_without_cancelling(state: State, redis_url):
    proc = run("submit", "nobody serves", "--wait", "--timeout", "1", url=redis_url)
    assert proc.returncode == 1, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    assert "gave up waiting for job" in proc.stderr and "not cancelled" in proc.stderr
    assert state.jobs.get(job_id).status == "queued"


def test_logs_follow_of_a_job_ends_once_the_job_ended(state: State, redis_url, start_fleet):
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=2_000)
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP, fanout=1))
    proc = run("logs", job.job_id, "-f", "--json", url=redis_url, timeout=60)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line)["event"] for line in proc.stdout.splitlines()]
    assert events[0] == "job.submitted" and "job.succeeded" in events
    assert events[-1] in ("job.succeeded", "task.succeeded")  # its final events, then the end


def test_logs_of_a_job_hide_lease_renewals_unless_all(state: State, redis_url, start_fleet):
    # slow: each task works ~3 s, renewing its 600 ms lease every 200 ms.
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=600)
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.SLOW, fanout=1))
    wait_for(lambda: state.jobs.get(job.job_id).status.finished, 60, "the slow job")

    def names(*flags: str) -> list[str]:
        out = run("logs", job.job_id, "--json", "--last", "10000", *flags, url=redis_url)
        return [json.loads(line)["event"] for line in out.stdout.splitlines()]

    shown, every = names(), names("--all")
    assert "task.renewed" not in shown and "job.succeeded" in shown
    assert every.count("task.renewed") > 0
    assert [n for n in every if n != "task.renewed"] == shown
    status = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)
    assert sum(t["renewals"] for t in status["tasks"]) == every.count("task.renewed")
    assert all(t["renewals"] > 0 for t in status["tasks"])


def test_version_prints_the_package_version(redis_url) -> None:
    proc = run("--version", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"redfleet {importlib.metadata.version('redfleet')}"


def test_reaper_once_prints_a_summary_line(state: State, redis_url) -> None:
    proc = run("reaper", "--once", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("reaper: ended 0 expired attempts (0 requeued, 0 dead)")
    assert "redelivered 0 lost tasks" in line and "retired 0 finished jobs" in line


def test_up_burst_says_fleet_of_1_worker_and_prints_a_summary_line(state: State, redis_url):
    proc = run("up", "--burst", "--planners", "1", "--coders", "0", "--reviewers", "0",
               "--concurrency", "1", url=redis_url)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "redfleet: fleet of 1 worker, provider scripted" in proc.stderr
    assert f"redfleet: Redis {redis_url} (REDIS_URL)" in proc.stderr
    slotted = run("up", "--burst", "--planners", "1", "--coders", "2", "--reviewers", "0",
                  url=redis_url)  # fmt: skip
    assert "redfleet: fleet of 3 workers x 4 slots, provider scripted" in slotted.stderr
    idle = run("up", "--burst", "--planners", "0", "--coders", "0", "--reviewers", "0",
               url=redis_url)  # fmt: skip
    assert idle.returncode == 0, idle.stderr
    assert "fleet of 0 workers (no task runs here: the reaper only)" in idle.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("fleet stopped: reaped 0 expired attempts (0 dead)")
    assert "0 worker restarts, 0 hung workers killed" in line


def test_rq_queue_registry_lists_the_role_queues_once_a_worker_started(state: State, redis_url):
    assert Queue.all(connection=state.client) == []
    proc = run("worker", "--role", "coder", "--burst", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    names = {q.name for q in Queue.all(connection=state.client)}
    assert names == {queue_name(role) for role in Role}
    assert state.jobs.list() == []  # before any job


def test_status_says_a_scripted_job_called_no_model(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    call = {"task_id": job.root_task, "worker": "w", "step": 1, "provider": "scripted",
            "model": "demo", "kind": "step"}  # fmt: skip
    state.usage(job.job_id).record(
        input_tokens=10, cached_tokens=0, output_tokens=5, cost_usd=0.0, event=call
    )
    proc = run("status", job.job_id, url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert "provider: scripted (a replay: no model was called; run a real one with " in proc.stdout
    doc = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)
    assert doc["providers"] == {"scripted demo": 1}


def test_submit_prints_only_the_job_id_and_notes_the_scripted_default_on_stderr(
    state: State, redis_url
) -> None:
    proc = run("submit", "g", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    (job_id,) = proc.stdout.splitlines()
    assert state.jobs.get(job_id).status == "queued"
    assert "scripted provider and calls no model" in proc.stderr
