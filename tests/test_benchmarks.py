"""The benchmarks run end to end in a tiny configuration (their numbers are not judged here)."""

from __future__ import annotations

import json

from .helpers import run_benchmark


def test_claims_benchmark_quick_run_reports_the_ratios_beside_the_raw_rates() -> None:
    proc = run_benchmark("claims.py", "--quick", "--json")
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
    # Runs opened in large jobs: both ways of reading a task's entries measured, per size.
    assert list(doc["journal"]) == ["100", "1000"]
    assert all(v["names_us"] > 0 and v["scan_us"] > 0 for v in doc["journal"].values())


SOAK_TINY = [
    "--duration", "4", "--rate", "5", "--fault-every", "0.6", "--outage", "0.5",
    "--stop-s", "2", "--stall-s", "1", "--lease-ms", "1000", "--retention", "2",
    "--drain", "30", "--observe", "2", "--planners", "1", "--coders", "2", "--reviewers", "1",
    "--slow-share", "0.1",
]  # fmt: skip


def test_soak_tiny_run_injects_every_fault_and_accounts_for_every_job() -> None:
    proc = run_benchmark("soak.py", *SOAK_TINY, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert set(doc["faults"]) == {
        "redis_kill", "worker_kill", "worker_stop", "drop_reply", "stall", "sever"
    }  # fmt: skip
    jobs = doc["jobs"]
    assert jobs["submitted"] > 0
    ended = sum(jobs[k] for k in ("succeeded", "failed", "cancelled", "running", "lost"))
    assert ended == jobs["submitted"]
    assert jobs["stuck"] + jobs["records_gone"] <= jobs["lost"]
    memory = doc["memory"]
    assert 0 < memory["before"]["keys"] <= memory["peak"]["keys"]
    assert memory["after"]["used_memory"] > 0
    assert isinstance(doc["tasks_succeeded_twice"], int) and isinstance(doc["orphans"], list)
    assert doc["fleet"]["report"] is not None  # the fleet stopped on SIGTERM and reported


def test_soak_refuses_an_unknown_fault_as_a_usage_error() -> None:
    proc = run_benchmark("soak.py", "--faults", "redis_kill,flood", timeout=60)
    assert proc.returncode == 2
    assert "unknown fault" in proc.stderr


def test_memory_eval_quick_run_holds_its_checks() -> None:
    proc = run_benchmark("memory_eval.py", "--quick", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["canary"]["canary_before"] > 0 and doc["canary"]["canary_left"] == 0
    assert doc["tenants"]["probes"] > 0 and doc["tenants"]["cross_tenant"] == 0
    assert doc["stale"]["stale_recalled"] == 0
    assert doc["stale"]["current_found"] == doc["stale"]["topics"]
    with_memory, without = doc["jobs"]["with_memory"], doc["jobs"]["without_memory"]
    assert with_memory[0]["calls"] == without[0]["calls"]  # nothing to recall in the first job
    assert all(m["calls"] < n["calls"] for m, n in zip(with_memory[1:], without[1:], strict=True))
    assert doc["decision"]["redfleet"]["adherence"] == 1.0
    (interrupted,) = doc["interrupted"]["jobs"]
    assert interrupted["killed"] and interrupted["status"] == "succeeded"
    assert doc["interrupted"]["duplicated_effects"] == 0
    # Meaning: the paraphrased questions share no word with their memory, so keywords find
    # none of them and the embedder some; fused, the lexical questions and the identifiers
    # are found as keywords find them.
    m = doc["meaning"]
    assert m["keyword_paraphrased_recall_at_5"] == 0 < m["dense_paraphrased_recall_at_5"]
    assert m["hybrid_paraphrased_recall_at_5"] > 0
    assert m["hybrid_lexical_recall_at_5"] >= m["keyword_lexical_recall_at_5"]
    assert m["hybrid_identifier_recall_at_1"] >= m["keyword_identifier_recall_at_1"]
    # Episodes are embedded by what they say, without the ids they cite: fewer tokens (what
    # an embedding costs), and found by meaning.
    e = doc["episodes"]
    assert e["as_stored"]["tokens_per_episode"] < e["whole_text"]["tokens_per_episode"]
    assert e["as_stored"]["paraphrased_recall_at_5"] > 0


def test_fleet_scale_quick_run_measures_fleet_a_and_accounts_for_every_call() -> None:
    proc = run_benchmark("fleet_scale.py", "--quick", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    (a, *rest) = doc["loads"]
    assert a["fleet"] == "a" and a["slots_per_process"] == 1
    assert all(r["fleet"] == "b" for r in rest)  # only when `up` has --concurrency
    for load in doc["loads"]:
        assert "stopped" not in load, load["stopped"]
        assert load["jobs"]["succeeded"] == load["jobs"]["submitted"] > 0
        # Every call the loopback answered is one the workers recorded, none refused.
        assert load["calls"]["answered"] == load["calls"]["model_called_events"] > 0
        assert load["calls"]["refused"] == 0
        assert load["calls"]["answered"] == load["jobs"]["submitted"] * doc["calls_per_job"]
        assert 1 <= load["running"]["peak_sampled"] <= load["slots"]
        assert load["running"]["peak_from_events"] <= load["slots"]
        assert load["memory"]["pss_total_mb"] > 0 and load["cpu"]["worker_s"] > 0
        assert load["throughput"]["tasks_per_s"] > 0 and load["redis"]["per_task"] > 0
        assert load["orphans"] == [] and load["fleet_exit"]["exit_code"] == 0
    assert {"running_tasks", "mb_per_agent", "throughput_share"} <= set(doc["goals"])
    assert all(isinstance(doc["goals"][g]["met"], bool) for g in GOAL_NAMES)


GOAL_NAMES = ("running_tasks", "mb_per_agent", "throughput_share")


def test_fleet_scale_refuses_a_load_without_slots_as_a_usage_error() -> None:
    proc = run_benchmark("fleet_scale.py", "--loads-b", "10x0", timeout=60)
    assert proc.returncode == 2
    assert "PROCESSESxSLOTS" in proc.stderr


def test_repo_audit_tiny_run_finds_what_the_honest_model_was_shown() -> None:
    proc = run_benchmark(
        "repo_audit.py", "--files", "12", "--slots", "2", "--delay-s", "0", "--json"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (generated,) = json.loads(proc.stdout)["results"]
    (run,) = generated["runs"]
    assert run["status"] == "succeeded" and run["calls"] > 0
    # Every def of a small repository reaches the honest model whole: nothing is missed.
    assert (run["recall"], run["precision"]) == (1.0, 1.0)
    assert generated["naive"]["recall"] == 1.0 and generated["naive"]["input_tokens"] > 0
    assert generated["import"]["again_sent"] == 0 and generated["import"]["first_sent"] > 0


def test_admission_quick_run_meets_its_goals_where_today_does_not() -> None:
    proc = run_benchmark("admission.py", "--quick", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    today, admitted = doc["today"], doc["admission"]
    assert admitted["attempts_burned"] == 0 and admitted["tasks_failed"] == 0
    assert admitted["outage_failed_tasks"] == 0
    assert admitted["429_per_1000"] < today["429_per_1000"]
    assert today["attempts_burned_by_429"] > 0  # the herd the fleet-wide limits prevent
    assert admitted["token_share"] > 0.8
    assert abs(admitted["tenant_b_share"] - 0.75) <= 0.15


def test_failover_quick_run_loses_nothing_with_replicated_acks() -> None:
    proc = run_benchmark("failover.py", "--quick", "--json", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    replicated, default = doc["replicated"], doc["default"]
    assert replicated["failovers"] == default["failovers"] == 2  # a kill and a pause each
    assert replicated["jobs_submitted"] > 0 and replicated["succeeded"] > 0
    for what in ("lost", "doubled", "two_owners", "stuck"):
        assert replicated[what] == 0, (what, replicated)
    assert replicated["workers_started"] == 4  # no worker died of a failover
    assert replicated["cost"]["waits_per_task"] > 0 == default["cost"]["waits_per_task"]


def test_rq_settings_tiny_run_counts_each_row_and_the_fleets_envelope_costs_least() -> None:
    proc = run_benchmark("rq_settings.py", "--jobs", "20", "--repeat", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["row"]: r for r in json.loads(proc.stdout)["rows"]}
    defaults, fleet = rows["rq defaults"], rows["+ start, end batched, no result"]
    # Counted by the server: RQ's path costs the same in the slot's class (a turn of RQ's
    # loop may heartbeat now and then: within a command an envelope).
    assert abs(defaults["commands"] - rows["slot, RQ's own paths"]["commands"]) < 1
    assert rows["result_ttl=0"]["commands"] > defaults["commands"]  # the delete's walk
    assert fleet["worker_round_trips"] < defaults["worker_round_trips"]
    assert min(r["commands"] for r in rows.values()) == fleet["commands"]
    # The end's MULTI ahead of the slot's next dequeue: the same commands, a trip fewer
    # (less a turn's heartbeat now and then, within 20 jobs).
    carried = rows["+ end with the next dequeue"]
    assert abs(carried["commands"] - fleet["commands"]) < 1
    assert carried["worker_round_trips"] < fleet["worker_round_trips"] - 0.5
