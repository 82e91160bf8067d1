"""The job-wide token budget holds under concurrent reservations (real processes)."""

from __future__ import annotations

import multiprocessing as mp
import random

import pytest

from shared_state import BudgetExceeded, JobSpec, State

ctx = mp.get_context("fork")
LIMIT = 50_000


def _spend(url, job_id, seed, barrier, out):
    state = State.connect(url)
    budget = state.budget(job_id)
    rng = random.Random(seed)
    granted = refused = 0
    barrier.wait()
    for _ in range(200):
        want = rng.randint(50, 900)
        try:
            held = budget.reserve(want)
        except BudgetExceeded:
            refused += 1
            continue
        used = rng.randint(0, want)
        budget.settle(held, used)
        granted += used
    out.put((granted, refused))


def test_concurrent_reservations_from_eight_processes_never_overspend(
    state: State, redis_url
) -> None:
    job = state.jobs.submit(JobSpec(goal="spend", token_budget=LIMIT))
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [
        ctx.Process(target=_spend, args=(redis_url, job.job_id, i, barrier, out)) for i in range(8)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    spent = sum(g for g, _ in results)
    final = state.budget(job.job_id).state()
    assert final.reserved == 0
    assert final.used == spent <= LIMIT
    assert sum(r for _, r in results) > 0, "the budget was never reached: the test proves nothing"
    assert LIMIT - spent < 900  # refused only when what was left could not cover a call


def test_a_call_over_the_budget_is_refused_before_it_is_sent(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g", token_budget=1_000))
    budget = state.budget(job.job_id)
    budget.reserve(800)
    with pytest.raises(BudgetExceeded) as err:
        budget.reserve(300)
    assert err.value.remaining == 200
    assert budget.state().reserved == 800


def test_a_job_without_a_budget_never_refuses(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    assert state.budget(job.job_id).reserve(10**9).state.limit == 0
