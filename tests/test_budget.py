"""The job-wide token budget holds under concurrent reservations (real processes)."""

from __future__ import annotations

import multiprocessing as mp
import random

import pytest

from shared_state import BudgetExceeded, JobSpec, State, keys

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


def test_a_job_without_a_budget_reserves_nothing_and_counts_a_calls_use_once(
    state: State,
) -> None:
    """A job known to have no budget holds nothing for a call; the call's usage record
    counts its tokens and money in the budget (``*``), once however often it is re-sent."""
    job = state.jobs.submit(JobSpec(goal="g"))
    assert state.budget(job.job_id, budgeted=False).reserve(10**9, 5.0) is None
    where = keys.script_keys("recordUsage", job.job_id)
    for _ in range(2):  # the same call id re-sent: a retry after a lost reply
        state.runner.run("recordUsage", job.job_id, where, ["c1", 100, 0, 20, 500_000, 0, "*"])
    budget = state.budget(job.job_id)
    assert budget.state().used == 120 and budget.spent_usd() == (0.5, 0.0)
    assert state.usage(job.job_id).get().calls == 1


def test_a_job_without_a_budget_still_reserves_from_its_tenants_day(state: State) -> None:
    state.spend.set_limit("acme", 1.0)
    job = state.jobs.submit(JobSpec(goal="g", tenant="acme"))
    held = state.budget(job.job_id, "acme", budgeted=False).reserve(100, 0.6)
    assert held is not None and held.tenant_key == keys.tenant_spend("acme")
    with pytest.raises(BudgetExceeded):  # the tenant's, not the job's
        state.budget(job.job_id, "acme", budgeted=False).reserve(100, 0.6)
