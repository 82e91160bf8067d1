"""The benchmark runs end to end and reports every ratio (its numbers are not judged here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_claims_benchmark_quick_run_reports_the_ratios_beside_the_raw_rates() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "claims.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    for ratio in ("lua_vs_watch", "claims_vs_evalsha", "fleet_vs_rq"):
        assert doc[ratio] > 0
    rates = doc["rates"]
    for rate in ("lua_cycles_per_s", "watch_cycles_per_s", "evalsha_calls_per_s"):
        assert rates[rate] > 0
    assert rates["claims_per_s"] > 0 and rates["fleet_tasks_per_s"] > 0
    assert rates["rq_jobs_per_s"] > 0
    (run,) = doc["runs"]  # --quick: one run
    assert run["raw"]["fleet"]["failed_jobs"] == 0
    assert run["raw"]["fleet"]["fenced_events"] == 0
    assert run["raw"]["ceiling"]["claim"]["won"] == run["raw"]["ceiling"]["evalsha"]["won"]
