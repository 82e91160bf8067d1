"""A job's usage: every call's tokens and cost, summed in Redis, shown by status."""

from __future__ import annotations

import json

from shared_state import JobSpec, MemoryArtifacts, State
from workers.context import CallLedger, ContextEngine, ContextRequest, WorkingState, price_of

from .test_cli import run


def test_calls_of_two_tasks_add_up_in_the_jobs_usage(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    engine = ContextEngine(MemoryArtifacts())
    ledgers = [CallLedger(job=state.usage(job.job_id)) for _ in range(2)]
    for ledger in ledgers:
        for step in range(3):
            prompt = engine.build(
                ContextRequest(system="sys", tools=[], state=WorkingState(goal="g"), history=[])
            )
            ledger.record_prompt(prompt, step=step, output_tokens=7, cached_tokens=step)
        ledger.record_compaction(step=3, input_tokens=100, output_tokens=10)
    usage = state.usage(job.job_id).get()
    calls = [c for ledger in ledgers for c in ledger.calls]
    assert usage.calls == 8 and usage.compaction_calls == 2
    assert usage.input_tokens == sum(c.input_tokens for c in calls)
    assert usage.cached_tokens == 2 * (0 + 1 + 2)
    assert usage.output_tokens == 2 * (3 * 7 + 10)
    assert usage.high_water == max(c.input_tokens for c in calls)
    expected = sum(c.cost_usd(price_of("default")) for c in calls)
    assert abs(usage.cost_usd - expected) < 1e-5
    doc = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)
    assert doc["usage"]["calls"] == 8 and doc["usage"]["output_tokens"] == 62
