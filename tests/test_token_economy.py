"""The token-economy benchmark runs its three workloads and reports every strategy's figures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .helpers import run_benchmark

STRATEGIES = {"naive", "sliding_window", "rolling_summary", "hybrid", "redfleet"}
FIELDS = {
    "total_input_tokens",
    "last_call_tokens",
    "high_water",
    "cacheable_share",
    "recall",
    "recall_via_handle",
    "cleared_before_seen",
    "orphans",
    "state_tokens",
    "kill_switch",
    "cost_usd",
    "build_ms",
    "uncached_input_tokens",
}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    proc = run_benchmark("token_economy.py", "--json", "--quick")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_token_economy_reports_every_strategy_on_every_workload(doc: dict[str, Any]) -> None:
    for workload in ("enrichment", "audit_300", "oncall"):
        strategies = doc[workload]["strategies"]
        assert set(strategies) == STRATEGIES
        assert all(set(figures) >= FIELDS for figures in strategies.values())
        ours, naive = strategies["redfleet"], strategies["naive"]
        # Deterministic figures (no timing): the engine against the naive loop.
        assert ours["total_input_tokens"] < naive["total_input_tokens"]
        assert ours["cleared_before_seen"] == 0 and ours["orphans"] == 0
        assert ours["recall_via_handle"] == 1.0 and not ours["kill_switch"]
        # The floor is a lower bound on the uncached input of every strategy shown
        # each result whole: none measured here may be under it.
        bound = doc[workload]["floor"]
        assert bound["uncached_tokens_at_least"] > 0
        assert bound["strategies_under_it"] == []
        assert ours["total_input_tokens"] / naive["total_input_tokens"] >= (
            bound["input_vs_naive_at_least"] if ours["cacheable_share"] >= 0.75 else 0
        )
        # Every goal but the one timed (build growth) is a deterministic figure: all met.
        met = doc[workload]["redfleet_vs_goals"]["met"]
        assert [goal for goal, ok in met.items() if not ok and goal != "build_growth"] == []
    assert len(doc["enrichment"]["strategies"]["redfleet"]["step_build_ms"]) == 35
    assert doc["enrichment"]["strategies"]["redfleet"]["recall"] == 1.0


def test_the_oncall_workload_reports_each_item_with_its_shape(doc: dict[str, Any]) -> None:
    strategies = doc["oncall"]["strategies"]
    items = strategies["redfleet"]["items"]
    shapes = {i["shape"] for i in items}
    assert {"three-line code block", "cron line", "CJK text", "corrected value"} <= shapes
    assert all(i["verbatim"] for i in items)
    # The same items against a sliding window: the report names what it misses.
    window = strategies["sliding_window"]["items"]
    assert [i for i in window if not i["verbatim"]] and {i["shape"] for i in window} == shapes
