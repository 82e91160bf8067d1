"""The redfleet command line, run as a real process against a private Redis."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from shared_state import JobSpec, State, free_port, keys


def run(*args: str, url: str | None, home: str | None = None, timeout: float = 120):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDFLEET_HOME")}
    if url:
        env["REDIS_URL"] = url
    if home:
        env["REDFLEET_HOME"] = home
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_submit_prints_the_job_id_and_status_lists_its_tasks(state: State, redis_url) -> None:
    out = run("submit", "write a parser", "--fanout", "2", "--json", url=redis_url)
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["job_id"]
    status = json.loads(run("status", job_id, "--json", url=redis_url).stdout)
    assert status["job_id"] == job_id and status["status"] == "queued"
    (root,) = status["tasks"]
    assert {k: root[k] for k in ("role", "status", "attempts", "owner", "token", "parent_id")} == {
        "role": "planner",
        "status": "queued",
        "attempts": 1,
        "owner": None,
        "token": 0,
        "parent_id": None,
    }
    overview = json.loads(run("status", "--json", url=redis_url).stdout)
    assert [j["job_id"] for j in overview["jobs"]] == [job_id]
    assert overview["queues"] == {"planner": 1, "coder": 0, "reviewer": 0}


def test_claims_workers_and_logs_read_redis(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    state.tasks.claim(job.job_id, job.root_task, "w-test", 60_000)
    claims = json.loads(run("claims", "--json", url=redis_url).stdout)
    token = state.tasks.get(job.job_id, job.root_task).token
    assert [(c["task_id"], c["owner"], c["token"]) for c in claims] == [
        (job.root_task, "w-test", token)
    ]
    assert 0 < claims[0]["lease_remaining_ms"] <= 60_000
    assert json.loads(run("workers", "--json", url=redis_url).stdout) == []
    assert run("workers", url=redis_url).stdout == "workers: none\n"  # not an empty frame
    lines = run("logs", job.job_id, "--json", url=redis_url).stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["job.submitted", "task.queued", "task.claimed"]
    assert events[2]["worker"] == "w-test" and events[2]["token"] == token and "ts" in events[2]


def test_logs_of_every_job_print_past_events_in_time_order(state: State, redis_url) -> None:
    # Mirrored in batches: a later batch may hold an earlier event of another job.
    for event, job_id, ts_ms in (("a", "j-1", 3_000), ("b", "j-2", 1_000), ("c", "j-2", 2_000)):
        state.client.xadd(keys.EVENTS, {"event": event, "job_id": job_id, "ts_ms": ts_ms})
    lines = run("logs", "--json", url=redis_url).stdout.splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["b", "c", "a"]


def test_logs_last_n_of_every_job_are_the_n_most_recent_by_time(state: State, redis_url) -> None:
    """A batch mirrored late holds older events than entries before it: --last N is the N
    most recent by time, not the last N entries sorted."""
    state.client.delete(keys.EVENTS)
    for mirrored_ms, event, ts_ms in (
        (3_000, "a", 3_000),
        (4_000, "b", 1_000),  # in a batch mirrored late
        (5_000, "c", 4_500),
        (6_000, "d", 2_000),  # late again
        (7_000, "e", 6_500),
    ):
        state.client.xadd(keys.EVENTS, {"event": event, "ts_ms": ts_ms}, id=f"{mirrored_ms}-0")
    for last, newest in (("2", ["c", "e"]), ("3", ["a", "c", "e"]), ("9", list("bdace"))):
        lines = run("logs", "--json", "--last", last, url=redis_url).stdout.splitlines()
        assert [json.loads(line)["event"] for line in lines] == newest, last
    # Over many pages (read 100 at least at a time), each lagging up to 1.8 s behind.
    state.client.delete(keys.EVENTS)
    for i in range(1, 451):
        lag = (i * 7919) % 10 * 200
        state.client.xadd(keys.EVENTS, {"event": f"e{i}", "ts_ms": i * 100 - lag}, id=f"{i}00-0")
    by_time = sorted(state.events.read(last=10_000), key=lambda e: e.ts)
    for last in (1, 10, 99, 100, 101, 250, 450):
        latest, newest = state.events.latest(last)
        assert [e.event for e in latest] == [e.event for e in by_time[-last:]], last
        assert newest == "45000-0"


def test_cancel_marks_the_job_cancelled_and_is_idempotent(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    first = run("cancel", job.job_id, "--json", url=redis_url)
    assert json.loads(first.stdout) == {
        "job_id": job.job_id,
        "status": "cancelled",
        "already": False,
    }
    assert state.jobs.get(job.job_id).status == "cancelled"
    again = run("cancel", job.job_id, "--json", url=redis_url)
    assert again.returncode == 0 and json.loads(again.stdout)["already"] is True


def test_cancelling_a_finished_job_is_an_error(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    root = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000).claim
    state.tasks.complete(root, "")
    assert_one_line_error(run("cancel", job.job_id, url=redis_url), "has already succeeded")


def test_up_burst_runs_the_queued_jobs_and_exits_zero(state: State, redis_url) -> None:
    jobs = [state.jobs.submit(JobSpec(goal=f"g{i}", fanout=2)) for i in range(3)]
    proc = run("up", "--burst", "--coders", "2", "--json", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert [state.jobs.get(j.job_id).status for j in jobs] == ["succeeded"] * 3
    assert json.loads(proc.stdout)["restarts"] == 0


@pytest.mark.parametrize(
    ("args", "url", "needles"),
    [
        (("status",), "nope://x", ["Redis URL"]),
        (("status",), "redis://127.0.0.1:{port}/0", ["cannot reach Redis"]),
        (("submit", "   "), "{url}", ["goal"]),
        (("submit", ""), "{url}", ["goal: must not be blank"]),
        (("status", "j-missing"), "{url}", ["no job 'j-missing'"]),
        (("logs", "j-missing"), "{url}", ["no job 'j-missing'"]),
        (("cancel", "j-missing"), "{url}", ["no job 'j-missing'"]),
    ],
)
def test_bad_input_is_one_line_naming_what_is_wrong_with_exit_code_2(
    redis_url, args, url, needles
) -> None:
    url = url.format(url=redis_url, port=free_port())
    assert_one_line_error(run(*args, url=url), *needles)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("submit", "g", "--max-attempts", "0"), "--max-attempts"),
        (("submit", "g", "--scenario", "bogus"), "--scenario"),
        (("up", "--coders", "-1"), "--coders"),
        (("worker",), "--role"),
    ],
)
def test_bad_options_show_the_usage_and_the_option_with_exit_code_2(
    redis_url, args, needle
) -> None:
    proc = run(*args, url=redis_url)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Usage: redfleet")
    assert needle in proc.stderr.split("Error:", 1)[1]


def test_without_redis_url_the_cli_starts_an_embedded_server_and_stops_it(tmp_path) -> None:
    home = str(tmp_path)
    try:
        job_id = run("submit", "embedded", url=None, home=home).stdout.strip()
        assert job_id.startswith("j-")
        info = json.loads(run("server", "status", "--json", url=None, home=home).stdout)
        assert info["running"] and info["url"].startswith("redis://127.0.0.1:")
        status = json.loads(run("status", job_id, "--json", url=None, home=home).stdout)
        assert status["status"] == "queued"
        assert run("server", "stop", url=None, home=home).stdout.strip() == "stopped"
        stopped = run("server", "status", "--json", url=None, home=home).stdout
        assert json.loads(stopped) == {"running": False}
    finally:
        run("server", "stop", url=None, home=home)  # never leave a server behind


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("submit", ""), "goal: must not be blank"),
        (("submit", "g", "--user", "a b"), "user"),
        (("submit", "g", "--approve", "rm_rf"), "--approve: 'rm_rf'"),
        (("--tenant", "acme", "submit", "g", "--tenant", "other"), "for tenant 'acme' only"),
    ],
)
def test_a_submit_refused_for_its_input_starts_no_embedded_server(tmp_path, args, needle) -> None:
    home = str(tmp_path)
    try:
        assert_one_line_error(run(*args, url=None, home=home), needle)
        stopped = run("server", "status", "--json", url=None, home=home).stdout
        assert json.loads(stopped) == {"running": False}
    finally:
        run("server", "stop", url=None, home=home)


def test_demo_fixes_and_extends_the_sample_repository_reviewed_by_its_own_tests(tmp_path) -> None:
    home = str(tmp_path / "home")
    try:
        proc = run("demo", "--json", url=None, home=home)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        url = doc["redis_url"]  # the demo's own embedded Redis, kept for a look afterwards
        assert doc["redis_home"] == f"{home}/demo"
        assert doc["status"] == "succeeded"
        assert doc["provider"].startswith("scripted")
        assert all(t["status"] == "succeeded" and t["owner"] for t in doc["tasks"])
        by_id = {t["task_id"]: t for t in doc["tasks"]}
        # At least one coder spawned a subagent, and every summary is within its cap.
        assert any(by_id[s["parent_id"]]["role"] == "coder" for s in doc["subagents"])
        assert all(0 < s["tokens"] <= s["cap"] for s in doc["subagents"])
        features = doc["report"]["features"]
        assert features and all(f["passes"] and f["evidence"] for f in features)
        for feature in features:
            evidence = run("show", feature["evidence"][0], "--json", url=url)
            log = json.loads(evidence.stdout)
            assert log["kind"] == "log" and log["job_id"] == doc["job_id"]
            assert log["content"].startswith(
                f"$ python -m pytest -q -p no:cacheprovider {feature['check']}"
            )
            assert re.search(r"\n\d+ passed(, \d+ deselected)? in [\d.]+s\n", log["content"])
        # The job changed the sample repository: one file edited in place, two added.
        changed = {d["path"]: d["kind"] for d in doc["diff"]}
        added = {"shop/restock.py": "added", "tests/test_restock.py": "added"}
        assert changed == {"shop/stock.py": "modified", **added}
        (fix,) = [d for d in doc["diff"] if d["path"] == "shop/stock.py"]
        assert (fix["added"], fix["removed"]) == (1, 1)
        listed = json.loads(run("artifacts", doc["job_id"], "--json", url=url).stdout)
        assert {a["id"] for a in listed} == {a["id"] for a in doc["artifacts"]}
        # ...and `apply` makes it a branch: a commit per feature, on which its tests pass.
        repo = doc["repo"]
        applied = json.loads(run("apply", doc["job_id"], "--repo", repo, "--json", url=url).stdout)
        assert [c["message"].split(":")[0] for c in applied["commits"]] == ["F1", "F2"]
        branch = applied["branch"]
        subprocess.run(["git", "-C", repo, "checkout", "-q", branch], check=True)
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=repo, capture_output=True, text=True,
        )  # fmt: skip
        assert tests.returncode == 0, tests.stdout
        # `status` without REDIS_URL reads the CLI's own server, not the demo's: it says so.
        plain = run("status", url=None, home=home)
        assert "jobs: none" in plain.stdout
        assert f"the demo's jobs are on its own Redis: REDIS_URL={url} redfleet" in plain.stdout
    finally:
        run("server", "stop", url=None, home=f"{home}/demo")  # never leave a server behind
        run("server", "stop", url=None, home=home)


def test_a_burst_worker_with_nothing_queued_exits_cleanly(state: State, redis_url) -> None:
    proc = run("worker", "--role", "coder", "--burst", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    started, stopped = (
        [e for e in state.events.read() if e.event == name]
        for name in ("worker.started", "worker.stopped")
    )
    assert len(started) == len(stopped) == 1
    assert state.workers.list() == []


def test_logs_say_what_they_leave_out_before_their_first_line(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    for n in range(5):
        state.events.append("note.test", {"n": n}, job_id=job.job_id)
    whole = run("logs", job.job_id, url=redis_url)
    assert whole.returncode == 0 and whole.stderr == ""  # it starts at job.submitted
    tail = run("logs", job.job_id, "--last", "2", url=redis_url)
    assert "earlier events are not shown (--last N" in tail.stderr
    # A capped stream that trimmed the job's first events says so, and from when.
    state.client.xtrim(keys.job_events(job.job_id), maxlen=3, approximate=False)
    trimmed = run("logs", job.job_id, url=redis_url)
    assert "the job's first events are gone" in trimmed.stderr
    assert "REDFLEET_JOB_STREAM_MAXLEN" in trimmed.stderr


def test_a_huge_id_is_not_echoed_back_whole(state: State, redis_url) -> None:
    huge = "j-" + "x" * 50_000
    for command in (("status", huge), ("logs", huge), ("show", "a-" + "y" * 50_000)):
        proc = run(*command, url=redis_url)
        assert_one_line_error(proc, "(50002 characters)")
        assert len(proc.stderr) < 400


def test_a_busy_metrics_port_is_named(state: State, redis_url) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run("up", "--coders", "1", "--metrics-port", str(port), url=redis_url)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr  # after `up`'s banner:
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("redfleet: error: --metrics-port")
    assert f"127.0.0.1:{port}" in error and "in use" in error


_THREADS_NUMPY_ADDS = """
import sys
def threads():
    return int(open("/proc/self/status").read().split("Threads:")[1].split()[0])
def numpy_threads(*_, **__):
    before = threads()
    import numpy  # noqa: F401  (OpenBLAS starts its threads as it loads)
    print(threads() - before)
if sys.argv[1:] == ["worker"]:
    import coordinator.cli, workers
    workers.run_worker = numpy_threads  # what the command runs once its process is set up
    coordinator.cli.app(["worker", "--role", "coder", "--burst"])
else:
    numpy_threads()
"""


def test_a_worker_process_runs_numpy_on_one_blas_thread(redis_url) -> None:
    """Its slots are its parallelism: BLAS threads on top only spin (and cost CPU)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["REDIS_URL"] = redis_url

    def added(*args: str) -> int:
        proc = subprocess.run(
            [sys.executable, "-c", _THREADS_NUMPY_ADDS, *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.split()[-1])

    if added() == 0:
        pytest.skip("numpy starts no BLAS threads here (one core): nothing to hold to one")
    assert added("worker") == 0


def test_the_cli_loads_none_of_the_runtimes_libraries_before_a_command_runs() -> None:
    """Importing the CLI, which every command does first, loads none of the worker's
    libraries (the model client, the tokenizer, numpy, RQ, the logger, .gitignore rules)
    nor the memory store: the commands that use them import them when they run."""
    heavy = ("numpy", "httpx", "urllib3", "rq", "structlog", "pathspec", "tiktoken", "tokenizers")
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, coordinator.cli; print(*sorted(sys.modules))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    loaded = {name.split(".")[0] for name in proc.stdout.split()}
    assert loaded.isdisjoint(heavy), sorted(loaded & set(heavy))
    modules = proc.stdout.split()
    assert "workers.runtime" not in modules
    assert "shared_state.memory.store" not in modules  # the memory commands' own, when run


_LOADED_BY = """
import sys
from coordinator.cli import main
sys.argv = ["redfleet", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print("LOADED", *sorted(sys.modules), file=sys.stderr)
"""


def _loaded_by(*args: str, url: str) -> set[str]:
    """The modules a run of ``redfleet ARGS`` had loaded when it ended."""
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED_BY, *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, "REDIS_URL": url},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED "))
    return set(line.split()[1:])


_COLLECTED_BY = """
import gc, sys
from coordinator import collector
from coordinator.cli import main

def collections():
    return sum(generation["collections"] for generation in gc.get_stats())

seen, real = [], (collector.hold, collector.release, collector.end)
def hold():
    real[0]()
    seen.append(("hold", gc.isenabled(), collections()))
def release(**kw):
    enabled, since = gc.isenabled(), collections() - seen[0][2]
    real[1](**kw)
    seen.append(("release", enabled, since, gc.isenabled(), gc.get_freeze_count() > 0))
def end():
    real[2]()
    seen.append(("end", gc.isenabled(), gc.get_freeze_count() > 0))
collector.hold, collector.release, collector.end = hold, release, end
sys.argv = ["redfleet", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print("COLLECTOR", [s if s[0] != "hold" else s[:2] for s in seen], file=sys.stderr)
"""


def test_a_command_collects_no_garbage_until_its_state_is_open(redis_url) -> None:
    """``status`` imports the views, pydantic and redis-py first: the collector stays off
    through them (no collection), and is on once the state is open, what they loaded
    frozen. A command that opens no state (``--version``) turns it back on as it ends,
    having frozen nothing."""
    seen = {}
    for args in (("status",), ("--version",)):
        proc = subprocess.run(
            [sys.executable, "-c", _COLLECTED_BY, *args], capture_output=True, text=True,
            timeout=60, env={**os.environ, "REDIS_URL": redis_url},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("COLLECTOR "))
        seen[args[0]] = ast.literal_eval(line.removeprefix("COLLECTOR "))
    # (release: on before, collections since hold, on after, anything frozen)
    assert seen["status"] == [
        ("hold", False), ("release", False, 0, True, True), ("end", True, True)
    ], seen  # fmt: skip
    assert seen["--version"] == [("hold", False), ("end", True, False)], seen


_LEFT_BY_A_START = """
import gc, sys, weakref
from coordinator import collector
from coordinator.connection import open_state

class Node:
    pass

collector.hold()
cycle = Node()
cycle.me, left = cycle, weakref.ref(cycle)
del cycle  # garbage only the collector frees, made while it was held off
with open_state(serving=sys.argv[1] == "serving"):
    print(left() is None, gc.isenabled())
"""


def test_a_serving_process_frees_what_its_start_left_before_freezing_the_rest(
    redis_url,
) -> None:
    """A fleet, a worker or the reaper (``open_state(serving=True)``) runs for hours: the
    garbage its start left is collected before what it keeps is frozen. A shorter command
    skips that pass; what it left stays, frozen, until it exits."""
    for kind, freed in (("serving", "True"), ("command", "False")):
        proc = subprocess.run(
            [sys.executable, "-c", _LEFT_BY_A_START, kind], capture_output=True, text=True,
            timeout=60, env={**os.environ, "REDIS_URL": redis_url},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [freed, "True"], (kind, proc.stdout)


def _packages(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_version_and_help_load_neither_settings_nor_the_redis_client(redis_url) -> None:
    """The options name plain enums (``shared_state.kinds``, ``workers.llm.names``,
    ``coordinator.durability``); settings, models and the client load when a command
    reads them. (Typer itself loads pydantic to show some options' defaults.)"""
    for args in (("--version",), ("--help",)):
        loaded = _packages(_loaded_by(*args, url=redis_url))
        assert loaded.isdisjoint({"pydantic", "pydantic_settings", "redis", "rq"}), (args, loaded)
    for args in (("memory", "--help"), ("limits", "--help"), ("submit", "--help")):
        loaded = _packages(_loaded_by(*args, url=redis_url))
        assert loaded.isdisjoint({"pydantic_settings", "redis", "rq"}), (args, loaded)


def test_reading_jobs_claims_and_logs_loads_no_rq_memory_or_model_routes(redis_url) -> None:
    """RQ loads where an envelope is touched (``Delivery.queues``): ``status`` counts the
    queues, ``claims`` and ``logs`` only read. None of the three loads memory, the model
    routes' admission, budgets or the providers' choice: ``State`` makes each store on
    first use."""
    unused = ("shared_state.memory", "shared_state.admission", "shared_state.budget",
              "workers.llm.choice", "workers.sandbox")  # fmt: skip
    for args in (("claims",), ("logs",), ("status",)):
        loaded = _loaded_by(*args, url=redis_url)
        assert "redis" in loaded, args  # it did read the server
        if args != ("status",):
            assert "rq" not in _packages(loaded), args
        assert not {m for m in loaded if m.startswith(unused)}, (args, sorted(loaded))
