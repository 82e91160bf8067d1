"""Races between real processes on a real Redis: claims and fan-in."""

from __future__ import annotations

import multiprocessing as mp
import random
from collections import Counter, defaultdict

from shared_state import Claim, Role, State, TaskStatus

from .conftest import events_named
from .helpers import job_with_children

PROCS = 8
ctx = mp.get_context("fork")


def _claim_all(url, job_id, ids, lease_ms, rounds, barrier, out, seed):
    state = State.connect(url)
    order = list(ids)
    random.Random(seed).shuffle(order)
    won = []
    barrier.wait()
    for _ in range(rounds):
        for task_id in order:
            claimed = state.tasks.claim(job_id, task_id, f"p{seed}", lease_ms)
            if claimed is not None:
                won.append((task_id, claimed.claim.token))
    out.put((f"p{seed}", won))


def _race(url, job_id, ids, *, lease_ms, rounds):
    barrier, out = ctx.Barrier(PROCS), ctx.Queue()
    procs = [
        ctx.Process(target=_claim_all, args=(url, job_id, ids, lease_ms, rounds, barrier, out, i))
        for i in range(PROCS)
    ]
    for p in procs:
        p.start()
    by_proc = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return by_proc


def test_eight_processes_racing_for_1000_tasks_give_each_task_exactly_one_owner(
    state: State, redis_url: str
) -> None:
    job, _, ids = job_with_children(state, 1000)
    by_proc = _race(redis_url, job.job_id, ids, lease_ms=600_000, rounds=1)
    wins = Counter(task_id for won in by_proc.values() for task_id, _ in won)
    assert set(wins) == set(ids)
    assert max(wins.values()) == 1
    for proc, won in by_proc.items():
        for task_id, token in won:
            stored = state.tasks.get(job.job_id, task_id)
            assert (stored.owner, stored.token, stored.status) == (proc, token, TaskStatus.CLAIMED)
    assert len(events_named(state, job.job_id, "task.claimed")) == 1001  # + the planner


def test_tokens_strictly_increase_per_task_when_leases_expire_under_contention(
    state: State, redis_url: str
) -> None:
    # Sized so every event fits in the job stream (capped at 10,000 entries).
    job, _, ids = job_with_children(state, 100, max_attempts=100)
    by_proc = _race(redis_url, job.job_id, ids, lease_ms=2, rounds=3)
    tokens_won = Counter(token for won in by_proc.values() for _, token in won)
    claimed = [e for e in events_named(state, job.job_id, "task.claimed") if e.task_id in set(ids)]
    per_task: dict[str, list[int]] = defaultdict(list)
    for event in claimed:  # stream order is the order the server applied the claims
        per_task[event.task_id].append(event.token)
    assert sum(tokens_won.values()) == len(claimed)
    assert any(len(tokens) > 1 for tokens in per_task.values()), "no lease was ever taken over"
    for tokens in per_task.values():
        assert tokens == sorted(set(tokens))  # each claim a higher token, none repeated


def _finish_child(url, parent_id, claim_json, barrier):
    state = State.connect(url)
    claim = Claim.model_validate_json(claim_json)
    barrier.wait()
    state.tasks.complete(claim, parent_id)


def test_children_finishing_at_once_on_different_processes_requeue_the_parent_once(
    state: State, redis_url: str
) -> None:
    parents = []
    for _ in range(20):
        job, parent, ids = job_with_children(state, PROCS)
        claimed = [state.tasks.claim(job.job_id, i, f"w{n}", 600_000) for n, i in enumerate(ids)]
        barrier = ctx.Barrier(PROCS)
        procs = [
            ctx.Process(
                target=_finish_child,
                args=(redis_url, parent.task_id, c.claim.model_dump_json(), barrier),
            )
            for c in claimed
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        parents.append((job.job_id, parent.task_id))
    planner_queue = state.delivery.queues[Role.PLANNER]
    envelopes = Counter(j.split("_")[1] for j in planner_queue.get_job_ids())  # job_task_random
    for job_id, parent_id in parents:
        requeues = [
            e
            for e in events_named(state, job_id, "task.queued")
            if e.task_id == parent_id and e.model_extra.get("reason") == "children done"
        ]
        assert len(requeues) == 1
        parent = state.tasks.get(job_id, parent_id)
        assert (parent.status, parent.pending) == (TaskStatus.QUEUED, 0)
        assert envelopes[parent_id] == 2  # the first delivery and the re-queue


def test_spawn_with_no_children_is_refused(state: State) -> None:
    import pytest

    _, parent, _ = job_with_children(state, 1)
    with pytest.raises(ValueError):
        state.tasks.spawn(parent, "x", [])
