"""A job's model calls, one row each, for its plots.

Every call is recorded once, by ``recordUsage``, which adds it to the job's
totals and appends its ``model.called`` event in one atomic step (a record
re-sent after a lost reply counts once), so the job's events of that name
are its calls, as many as ``usage.calls`` — while the job's stream keeps
them (it is capped at REDFLEET_JOB_STREAM_MAXLEN entries).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from shared_state import Event, State

from .documents import kind_of

CALLED = "model.called"


def _int(extra: dict[str, Any], name: str) -> int:
    """A count recordUsage wrote (an event with an empty value drops the field)."""
    return int(extra.get(name) or 0)


def rows(state: State, job_id: str) -> list[dict[str, Any]]:
    """Each call in order: its tokens, the high-water and cost so far, latency, task kind."""
    tasks = {t.task_id: t for t in state.tasks.list(job_id)}
    found, high_water, cost_micro = [], 0, 0
    for n, event in enumerate(state.events.scan(job_id, CALLED), start=1):
        found.append(_row(n, event, tasks, high_water, cost_micro))
        high_water, cost_micro = found[-1]["high_water"], found[-1]["cost_micro_usd_total"]
    return found


def _row(n: int, event: Event, tasks: dict, high_water: int, cost_micro: int) -> dict[str, Any]:
    extra = event.model_extra or {}
    task = tasks.get(event.task_id or "")
    input_tokens = _int(extra, "input_tokens")
    cost = _int(extra, "cost_micro_usd")
    return {
        "n": n,
        "ts_ms": int(event.ts.timestamp() * 1000),
        "task_id": event.task_id,
        "kind": kind_of(task, tasks) if task else "unknown",  # a task expired before its job
        "call": extra.get("kind", "step"),  # step, or compaction (a summary model's call)
        "model": extra.get("model", ""),
        "tool": extra.get("tool", ""),
        "input_tokens": input_tokens,
        "cached_tokens": _int(extra, "cached_tokens"),
        "output_tokens": _int(extra, "output_tokens"),
        "latency_ms": _int(extra, "latency_ms"),
        "high_water": max(high_water, input_tokens),
        "cost_micro_usd_total": cost_micro + cost,
    }


def document(state: State, job_id: str) -> dict[str, Any]:
    """The calls, the job's usage totals, and latency by task kind (calls, mean, max in ms)."""
    state.jobs.get(job_id)  # an unknown job is a 404, not a job without calls
    usage = state.usage(job_id).get()
    calls = rows(state, job_id)
    latency: dict[str, list[int]] = defaultdict(list)
    for call in calls:
        latency[call["kind"]].append(call["latency_ms"])
    return {
        "calls": calls,
        "usage": {**usage.model_dump(), "cache_hit_ratio": round(usage.cache_hit_ratio, 4)},
        "latency": {
            kind: {"calls": len(ms), "mean_ms": round(sum(ms) / len(ms)), "max_ms": max(ms)}
            for kind, ms in sorted(latency.items())
        },
    }
