"""The token-economy benchmark runs and reports every strategy's figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {
    "total_input_tokens",
    "last_call_tokens",
    "high_water",
    "cacheable_share",
    "recall",
    "cost_usd",
    "step_build_ms",
}


def test_token_economy_reports_every_strategy() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "token_economy.py"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    strategies = doc["strategies"]
    assert set(strategies) == {"naive", "sliding_window", "rolling_summary", "hybrid", "redfleet"}
    for figures in strategies.values():
        assert set(figures) >= FIELDS
        assert len(figures["step_build_ms"]) == 35
    # Deterministic figures (no timing): the engine against the naive loop.
    assert strategies["redfleet"]["total_input_tokens"] < strategies["naive"]["total_input_tokens"]
    assert strategies["redfleet"]["recall"] == 1.0
