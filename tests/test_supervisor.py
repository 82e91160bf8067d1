"""The supervisor and its workers, with real processes and real signals.

Workers die with their supervisor (SIGKILL of ``redfleet up``), a hangup
drains like SIGTERM, and a hung worker is killed and replaced.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter

from shared_state import Event, JobSpec, Role, Scenario, State

from .conftest import events_named, wait_for
from .processes import alive, busy

LEASE_MS = 1_500


def _succeeded(state: State, job_id: str) -> bool:
    return state.jobs.get(job_id).status == "succeeded"


def test_the_workers_of_a_killed_supervisor_drain_and_its_job_succeeds_on_another_fleet(
    state: State, redis_url: str, up_process, start_fleet
) -> None:
    up = up_process(redis_url, "--coders", "2", "--lease-ms", str(LEASE_MS))
    listed = wait_for(lambda: up.registered(state, 4), 60, "the fleet's four workers")
    pids = {w.pid for w in listed}
    job = state.jobs.submit(JobSpec(goal="orphans", scenario=Scenario.SLOW, fanout=2))
    wait_for(lambda: len(busy(state, job.job_id, Role.CODER)) == 2, 30, "both coders busy")
    up.proc.kill()
    up.proc.wait()
    wait_for(lambda: not any(alive(p) for p in pids), 20, "every worker of the fleet to exit")
    assert not {w.pid for w in state.workers.list()} & pids  # each deregistered on its way out
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=LEASE_MS)
    wait_for(lambda: _succeeded(state, job.job_id), 90, "the job to succeed on the other fleet")
    done = Counter(e.task_id for e in events_named(state, job.job_id, "task.succeeded"))
    assert set(done) == {t.task_id for t in state.tasks.list(job.job_id)}
    assert set(done.values()) == {1}
    assert not events_named(state, job.job_id, "task.fenced")


def test_a_hangup_drains_the_fleet_as_sigterm_does(
    state: State, redis_url: str, up_process
) -> None:
    up = up_process(redis_url, "--coders", "1", "--lease-ms", str(LEASE_MS), "--json")
    listed = wait_for(lambda: up.registered(state, 3), 60, "the fleet's three workers")
    job = state.jobs.submit(JobSpec(goal="hangup", scenario=Scenario.SLOW, fanout=1))
    (coder,) = wait_for(lambda: busy(state, job.job_id, Role.CODER), 30, "the coder busy")
    up.proc.send_signal(signal.SIGHUP)
    assert up.proc.wait(30) == 0
    assert not any(alive(w.pid) for w in listed)
    assert not {w.pid for w in state.workers.list()} & {w.pid for w in listed}
    assert {doc["worker"] for _, doc in up.logged("worker.stopped")} == {
        w.worker_id for w in listed
    }
    assert not up.logged("fleet.worker_killed")  # every worker drained within the timeout
    # The coder finished the task it held before it exited.
    ended = events_named(state, job.job_id, "task.succeeded")
    assert [(e.task_id, e.worker) for e in ended] == [(coder.task_id, coder.worker_id)]
    assert up.report()["restarts"] == 0


def test_a_stopped_worker_is_killed_as_hung_and_replaced_and_its_task_succeeds_once(
    state: State, start_fleet
) -> None:
    running = start_fleet(planners=1, coders=2, reviewers=1, lease_ms=1_000)
    job = state.jobs.submit(JobSpec(goal="hung", scenario=Scenario.SLOW, fanout=1))
    (victim,) = wait_for(lambda: busy(state, job.job_id, Role.CODER), 30, "a busy coder")
    coders = {w.pid for w in state.workers.list() if w.role is Role.CODER}
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: running.fleet.report.hung == 1,
            running.fleet.spec.hung_after_s + 10,
            "the supervisor to kill the hung worker",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):  # only if it was not killed
            os.kill(victim.pid, signal.SIGCONT)
    assert not alive(victim.pid)
    wait_for(
        lambda: {w.pid for w in state.workers.list() if w.role is Role.CODER} - coders,
        30,
        "a new coder in the killed one's place",
    )

    def ended() -> list[Event]:
        done = events_named(state, job.job_id, "task.succeeded")
        return [e for e in done if e.task_id == victim.task_id]

    (done,) = wait_for(ended, 30, "the hung worker's task to succeed elsewhere")
    assert done.worker != victim.worker_id
    wait_for(lambda: _succeeded(state, job.job_id), 60, "the job to succeed")
    assert len(ended()) == 1  # once, also after the rest of the job ran
    assert running.fleet.report.restarts == 1


# Imported by every Python process started with this directory on PYTHONPATH: the worker
# spends its start-up spinning (as many workers importing on a few cores do) or asleep.
SLOW_START = """
import os, time
how = os.environ.pop("SLOW_START", "")
if how == "spin":
    end = time.monotonic() + 9
    while time.monotonic() < end:
        pass
elif how == "sleep":
    time.sleep(60)
"""


def test_a_worker_slow_to_start_is_hung_only_if_it_uses_no_cpu(
    state: State, start_fleet, tmp_path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(SLOW_START)

    def fleet(how: str):
        env = (("PYTHONPATH", str(tmp_path)), ("SLOW_START", how))
        # A grace of 0.5 s and a bound of 5 s: the spinning start outlasts both.
        return start_fleet(planners=1, coders=0, reviewers=0, lease_ms=1_000,
                           startup_grace_s=0.5, worker_env=env)  # fmt: skip

    busy_start = fleet("spin")
    (planner,) = wait_for(
        lambda: [w for w in state.workers.list() if w.role is Role.PLANNER], 60, "the planner"
    )
    assert busy_start.fleet.report.hung == 0 and busy_start.fleet.report.restarts == 0
    assert planner.pid == busy_start.fleet.slots[0].process.pid
    busy_start.stop()

    asleep = fleet("sleep")
    wait_for(
        lambda: asleep.fleet.report.hung >= 1,
        asleep.fleet.spec.hung_after_s + 20,
        "the supervisor to kill the worker that sleeps through its start",
    )
