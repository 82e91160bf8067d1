"""Task slots: several tasks per worker process, with real processes, signals and a real Redis.

Each slot holds its own claim, lease and fencing token; a SIGKILL of the
process loses all of them to the reaper, a SIGTERM lets all of them finish,
a slot stuck in a provider call neither blocks the others nor keeps its task
past its lease, and a job's fan-out leaves room for another job's task.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

from rq import Worker as RQWorker
from rq.suspension import resume, suspend

from shared_state import Envelope, JobSpec, Role, Scenario, State, Task, TaskStatus, keys
from workers import runtime, slots
from workers.llm import load_scenario

from .conftest import events_named, wait_for
from .loopback import ScriptedOpenAI
from .processes import alive, busy
from .test_agent_jobs import GOAL, finished

LEASE_MS = 1_500
SLOTS = 4


def _held_by_one_worker(state: State, job_id: str, count: int) -> tuple[str, list[Task]] | None:
    """(owner, tasks) once ``count`` of the job's coder tasks are claimed by one worker."""
    claimed = [
        t
        for t in state.tasks.list(job_id)
        if t.role is Role.CODER and t.status == TaskStatus.CLAIMED and t.owner
    ]
    for owner, n in Counter(t.owner for t in claimed).items():
        if n >= count:
            return owner, [t for t in claimed if t.owner == owner]
    return None


def _each_succeeded_once(state: State, job_id: str) -> None:
    done = Counter(e.task_id for e in events_named(state, job_id, "task.succeeded"))
    assert set(done) == {t.task_id for t in state.tasks.list(job_id)}
    assert set(done.values()) == {1}


def test_a_worker_with_four_slots_runs_four_tasks_at_once_each_under_its_own_claim(
    state: State, start_fleet
) -> None:
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=LEASE_MS, concurrency=SLOTS)
    job = state.jobs.submit(JobSpec(goal="four at once", scenario=Scenario.SLOW, fanout=SLOTS))
    owner, held = wait_for(lambda: _held_by_one_worker(state, job.job_id, SLOTS), 30,
                           "four coder tasks claimed by one worker at once")  # fmt: skip
    assert len({t.task_id for t in held}) == SLOTS
    (coder,) = [w for w in state.workers.list() if w.worker_id == owner]
    beat = wait_for(
        lambda: next(
            (w for w in state.workers.list() if w.worker_id == owner and w.busy == SLOTS), None
        ),
        10,
        "the worker's heartbeat to show four busy slots",
    )
    assert beat.slots == SLOTS
    assert sorted(beat.tasks.split()) == sorted(f"{job.job_id}/{t.task_id}" for t in held)
    # RQ sees each slot as a worker of its own, under the process's worker id.
    queue = state.delivery.queues[Role.CODER]
    names = sorted(w.name for w in RQWorker.all(queue=queue))
    assert names == [f"{owner}/{i}" for i in range(SLOTS)]
    assert coder.pid == beat.pid
    wait_for(lambda: state.jobs.get(job.job_id).status == "succeeded", 60, "the job to succeed")
    _each_succeeded_once(state, job.job_id)
    assert not events_named(state, job.job_id, "task.fenced")


def test_a_sigkilled_four_slot_worker_loses_all_four_tasks_and_each_succeeds_once(
    state: State, start_fleet
) -> None:
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=LEASE_MS, concurrency=SLOTS)
    job = state.jobs.submit(JobSpec(goal="kill four", scenario=Scenario.SLOW, fanout=SLOTS))
    owner, held = wait_for(lambda: _held_by_one_worker(state, job.job_id, SLOTS), 30,
                           "four coder tasks claimed by one worker at once")  # fmt: skip
    (victim,) = [w for w in state.workers.list() if w.worker_id == owner]
    os.kill(victim.pid, signal.SIGKILL)
    wait_for(lambda: state.jobs.get(job.job_id).status == "succeeded", 90, "the job to succeed")
    for task in held:
        after = state.tasks.get(job.job_id, task.task_id)
        assert after.attempt == 2 and after.owner not in ("", owner)
    requeued = events_named(state, job.job_id, "task.requeued")
    assert sorted(e.task_id for e in requeued) == sorted(t.task_id for t in held)
    assert {e.model_extra["reason"] for e in requeued} == {f"lease expired (owner {owner})"}
    _each_succeeded_once(state, job.job_id)
    assert not events_named(state, job.job_id, "task.fenced")


def test_sigterm_drains_every_slot_before_the_worker_exits(
    state: State, redis_url: str, up_process
) -> None:
    up = up_process(redis_url, "--coders", "1", "--concurrency", str(SLOTS),
                    "--lease-ms", str(LEASE_MS), "--json")  # fmt: skip
    listed = wait_for(lambda: up.registered(state, 3), 60, "the fleet's three workers")
    job = state.jobs.submit(JobSpec(goal="drain four", scenario=Scenario.SLOW, fanout=SLOTS))
    owner, held = wait_for(lambda: _held_by_one_worker(state, job.job_id, SLOTS), 30,
                           "four coder tasks claimed by one worker at once")  # fmt: skip
    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(40) == 0
    assert not any(alive(w.pid) for w in listed)
    assert not up.logged("fleet.worker_killed")  # every worker drained within the timeout
    assert not up.logged("lease.lost")
    succeeded = [
        e
        for e in events_named(state, job.job_id, "task.succeeded")
        if e.task_id in {t.task_id for t in held}
    ]
    assert sorted(e.task_id for e in succeeded) == sorted(t.task_id for t in held)
    assert {e.worker for e in succeeded} == {owner}
    assert all(state.tasks.get(job.job_id, t.task_id).attempt == 1 for t in held)
    assert not {w.worker_id for w in state.workers.list()} & {w.worker_id for w in listed}
    assert not RQWorker.all(connection=state.client)  # every slot deregistered from RQ too


def test_a_slot_whose_provider_hangs_blocks_no_other_slot_and_loses_its_task_when_stuck(
    state: State, start_fleet
) -> None:
    with ScriptedOpenAI(load_scenario("demo"), faults=[], malformed=set(), hang="HANG-ME") as api:
        env = (
            ("REDFLEET_PROVIDER", "openai"),
            ("REDFLEET_MODEL", "gpt-4.1-mini"),
            ("REDFLEET_BASE_URL", api.url),
            ("OPENAI_API_KEY", "sk-loopback"),
            ("REDFLEET_SLOT_STUCK_S", "4"),
        )
        start_fleet(
            planners=1, coders=1, reviewers=1, lease_ms=3_000, concurrency=2, worker_env=env
        )
        hung = state.jobs.submit(JobSpec(goal=f"HANG-ME {GOAL}", scenario=Scenario.AGENTS))
        wait_for(lambda: api.hung, 30, "the first job's planner call to hang")
        job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))
        done = finished(state, job.job_id, timeout=120)
        assert done.status == "succeeded", done.reason
        # The stuck slot gave its lease up: the task was reclaimed (and hangs again).
        root = hung.root_task
        wait_for(
            lambda: state.tasks.get(hung.job_id, root).attempt >= 2, 30, "the stuck task reclaimed"
        )
        (requeued, *_) = [
            e for e in events_named(state, hung.job_id, "task.requeued") if e.task_id == root
        ]
        assert requeued.model_extra["reason"].startswith("lease expired")
        assert state.jobs.get(hung.job_id).status == "running"


def test_a_fan_out_yields_slots_to_another_jobs_waiting_task(state: State, start_fleet) -> None:
    # Planners and a reviewer first: every coder task is queued before a coder slot exists,
    # the wide job's eight ahead of the small job's one.
    start_fleet(planners=1, coders=0, reviewers=1, lease_ms=LEASE_MS, concurrency=SLOTS)
    wide = state.jobs.submit(JobSpec(goal="wide", scenario=Scenario.SLOW, fanout=2 * SLOTS))
    wait_for(lambda: len(_queued_coders(state, wide.job_id)) == 2 * SLOTS, 30, "8 coders queued")
    small = state.jobs.submit(JobSpec(goal="small", scenario=Scenario.NOOP, fanout=1))
    wait_for(lambda: _queued_coders(state, small.job_id), 30, "the small job's coder queued")
    sent = {t.task_id: _envelope(state, t) for t in _queued_coders(state, wide.job_id)}
    start_fleet(planners=0, coders=1, reviewers=0, lease_ms=LEASE_MS, concurrency=SLOTS)
    for job in (small, wide):
        wait_for(lambda j=job: state.jobs.get(j.job_id).status == "succeeded", 90, job.goal)
    coders = {t.task_id for t in state.tasks.list(wide.job_id) if t.role is Role.CODER}
    (small_coder,) = [t.task_id for t in state.tasks.list(small.job_id) if t.role is Role.CODER]
    small_claimed = next(
        e.id for e in events_named(state, small.job_id, "task.claimed") if e.task_id == small_coder
    )
    before = [
        e
        for e in events_named(state, wide.job_id, "task.claimed")
        if e.task_id in coders and _ms(e.id) < _ms(small_claimed)
    ]
    # First in, first out would start all eight first. With a share of half the slots the
    # small job's coder gets a slot of the first four: past its share the wide job is
    # admitted only while no other job's task waits in the queue (the small one may
    # already be on its way to a slot, between its dequeue and its claim).
    assert len(before) <= SLOTS - 1, [e.task_id for e in before]
    _each_succeeded_once(state, wide.job_id)
    # The yield swapped envelopes on the queue: none was sent again, each task ran the one
    # it was first sent (a re-sent envelope is a new RQ job, recorded on its task).
    assert {t: _envelope(state, state.tasks.get(wide.job_id, t)) for t in sent} == sent


def _envelope(state: State, task: Task) -> bytes:
    return state.client.hget(keys.task(task.job_id, task.task_id), "envelope")


def _queued_coders(state: State, job_id: str) -> list[Task]:
    return [
        t
        for t in state.tasks.list(job_id)
        if t.role is Role.CODER and t.status == TaskStatus.QUEUED
    ]


def _ms(entry_id: str) -> int:
    """When a stream entry was written, in Redis time (comparable across job streams)."""
    return int(entry_id.partition("-")[0])


def test_a_second_envelope_of_a_task_a_slot_runs_is_dropped_by_the_other_slots(
    state: State, redis_url: str, up_process
) -> None:
    # The claim script answers a claim by the same worker on a live lease as a retry
    # (the same token): only the process itself can tell its second slot no.
    up = up_process(redis_url, "--coders", "1", "--concurrency", "2",
                    "--lease-ms", str(LEASE_MS))  # fmt: skip
    wait_for(lambda: up.registered(state, 3), 60, "the fleet's three workers")
    job = state.jobs.submit(JobSpec(goal="twice", scenario=Scenario.SLOW, fanout=1))
    ((_, task),) = wait_for(lambda: busy_tasks(state, job.job_id), 30, "the coder busy")
    state.delivery.send([Envelope(job.job_id, task, Role.CODER)])
    wait_for(lambda: state.jobs.get(job.job_id).status == "succeeded", 60, "the job to succeed")
    assert up.logged("delivery.duplicate", task_id=task, why="held by a slot")
    assert not up.logged("delivery.dropped")
    _each_succeeded_once(state, job.job_id)


def busy_tasks(state: State, job_id: str) -> list[tuple[str, str]]:
    """(worker, task) for each coder task of the job a worker holds now."""
    return [(w.worker_id, w.task_id) for w in busy(state, job_id, Role.CODER)]


def test_rq_suspend_seen_by_the_heartbeat_holds_every_slot_until_rq_resume(
    state: State, monkeypatch
) -> None:
    # The process's heartbeat looks for `rq suspend` once a tick for all its slots; a slot
    # that saw it waits in RQ's own loop, taking no envelope, until `rq resume`.
    job = state.jobs.submit(JobSpec(goal="held", fanout=1))
    rt = runtime.WorkerRuntime(state, role=Role.PLANNER, lease_ms=60_000, worker_id="planner-s")
    monkeypatch.setattr(runtime, "_runtime", rt)
    suspend(state.client)
    rt.heartbeat.flush()
    assert rt.heartbeat.suspended.is_set()
    # A burst ends at once, as RQ's own does (not a loop that broke, to start again).
    burst = threading.Thread(
        target=runtime._slot_main,
        args=(state, rt.heartbeat.leases[0], "planner-s/b", Role.PLANNER, threading.Event()),
        kwargs={"waiting": threading.Event(), "burst": True, "commands": False,
                "suspended": rt.heartbeat.suspended},
        daemon=True,
    )  # fmt: skip
    burst.start()
    burst.join(20)
    assert not burst.is_alive()
    stop, name = threading.Event(), "planner-s/0"
    slot = threading.Thread(
        target=runtime._slot_main,
        args=(state, rt.heartbeat.leases[0], name, Role.PLANNER, stop),
        kwargs={"waiting": threading.Event(), "burst": False, "commands": False,
                "suspended": rt.heartbeat.suspended},
    )  # fmt: skip
    slot.start()
    try:

        def suspended() -> bool:  # RQ's record of the slot, as `rq info` shows it
            return state.client.hget(f"rq:worker:{name}", "state") == b"suspended"

        wait_for(suspended, 20, "the slot to see the suspension")
        assert state.tasks.get(job.job_id, job.root_task).status is TaskStatus.QUEUED
        assert state.client.llen(state.delivery.queues[Role.PLANNER].key) == 1
        resume(state.client)
        rt.heartbeat.flush()
        assert not rt.heartbeat.suspended.is_set()
        wait_for(
            lambda: state.tasks.get(job.job_id, job.root_task).status is not TaskStatus.QUEUED,
            20,
            "the slot to take the envelope after rq resume",
        )
    finally:
        resume(state.client)
        stop.set()
        wait_for(lambda: slots.unblock(state.client, "planner-s") or not slot.is_alive(), 30)
        slot.join(30)
    assert not slot.is_alive()
