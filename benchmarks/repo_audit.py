"""A codebase audit through a real fleet, against an honest model: "find every function
without a docstring".

    python benchmarks/repo_audit.py [--repo PATH ...] [--slots 1,4,16] [--delay-s 1] [--json]

By default it generates a repository (a few hundred Python files of mixed
sizes, four of them over 2,000 lines, nested packages, non-Python files, a
git commit), and ``--repo`` adds any folder of Python files beside it (e.g.
``.venv/lib/python3*/site-packages/rq``, code nobody here wrote). Ground truth
is ``ast`` over each repository: every ``def`` and ``async def`` (methods and
nested functions too) for which ``ast.get_docstring`` is None.

Each run imports the repository as a workspace (``submit --workspace``), starts
a real fleet (``redfleet up``: an embedded-style private redis-server, one
planner, one reviewer, coder slots as asked) and submits the job with a check
that validates the audit's coverage and shape, not its truth. The model is
``honest_model.py`` in its own process, an OpenAI-compatible server that
answers each call after ``--delay-s`` from nothing but the request: the
planner plans a batch of files per coder (``plan_items``), each coder reads
its files with ``read_file`` and reports a function only when its source is
in the context it was sent, appending findings to its audit file. The report
is the audit files the job wrote; recall and precision are against ground
truth. The naive agent beside it is the same model policy in one
conversation over every file that keeps its whole transcript; its input is
counted per call as that transcript.

Reported: recall and precision (the fleet's and the naive agent's), input
tokens against the naive agent's, tokens per file, wall time with each number
of coder slots and the ratios to one slot, Redis memory per MB of workspace,
and the import (first and repeated submit: seconds, bytes sent). Goals:
recall and precision 1.0, input <= 0.25 x naive, 16 slots >= 8 x faster than
1, a repeated submit sends <= 1% of the bytes.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from honest_model import FIX_GOAL, GOAL, answer, count_tokens
from rich.console import Console
from rich.table import Table

from coordinator.apply import apply_job
from coordinator.importer import ImportReport, import_workspace
from shared_state import JobSpec, RedisServer, Scenario, State
from workers.context import ROLE_BUDGETS, Slot
from workers.roles.coder import SYSTEM as CODER_SYSTEM
from workers.roles.task import WORKSPACE_NOTE
from workers.tools import lines_budget

HERE = Path(__file__).parent
GOALS = {
    "recall": 1.0,
    "precision": 1.0,
    "input_vs_naive": 0.25,
    "speedup_16": 8.0,
    "resend_share": 0.01,
}
_FINDING = re.compile(r"^(?P<path>[^#\s][^:]*):(?P<line>\d+):(?P<name>\w+)$")
_DONE = re.compile(r"^# done (?P<path>.+) (?P<a>\d+)-(?P<b>\d+) of (?P<n>\d+)$")

# The job's check: the audit covers every Python file whole, and names real defs. It cannot
# know which functions lack a docstring: that is what recall and precision measure.
VALIDATOR = r"""import re, sys
from pathlib import Path
problems, covered = [], {}
for audit in sorted(Path("audit").glob("*.txt")):
    for line in audit.read_text().splitlines():
        if line.startswith("# progress "):
            continue
        done = re.match(r"^# done (.+) (\d+)-(\d+) of (\d+)$", line)
        if done:
            covered.setdefault(done[1], set()).update(range(int(done[2]), int(done[3]) + 1))
            continue
        found = re.match(r"^([^:]+):(\d+):(\w+)$", line)
        if not found or not Path(found[1]).is_file():
            problems.append(f"{audit}: not a finding: {line!r}")
            continue
        text = Path(found[1]).read_text().splitlines()
        n = int(found[2])
        if n > len(text) or not re.match(rf"\s*(async\s+)?def\s+{found[3]}\b", text[n - 1]):
            problems.append(f"{audit}: no def {found[3]} at {found[1]}:{n}")
for path in sorted(p for p in Path(".").rglob("*.py") if p.parts[0] != "audit"):
    n = len(path.read_text().splitlines())
    missing = set(range(1, n + 1)) - covered.get(str(path), set())
    if missing:
        problems.append(f"{path}: {len(missing)} of {n} lines never read")
print("\n".join(problems[:50]) or "the audit covers every file")
sys.exit(1 if problems else 0)
"""


# -- the repositories -------------------------------------------------------------------------


def generate(root: Path, files: int = 240, seed: int = 7) -> Path:
    """A repository of ``files`` Python files in nested packages (four over 2,000 lines)
    and some files of other kinds, committed to git when git is there."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    packages = [f"app/{a}/{b}" for a in ("core", "api", "jobs", "store") for b in ("x", "y", "z")]
    for n in range(files):
        package = packages[n % len(packages)]
        lines = 2_100 + 150 * n if n < 4 else rng.choice([30, 60, 120, 200, 320, 500])
        path = root / package / f"mod_{n:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_module(rng, n, lines))
    for package in packages:
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text(f'"""The {package} package."""\n')
    (root / "README.md").write_text("# app\n\nA generated repository for the audit benchmark.\n")
    (root / "config.toml").write_text('[app]\nname = "app"\n')
    (root / "data" / "sample.json").parent.mkdir()
    (root / "data" / "sample.json").write_text(json.dumps({"rows": list(range(50))}))
    (root / "logo.png").write_bytes(bytes(range(256)) * 8)
    _commit(root)
    return root


# What a function should return, said in its docstring, and its value for the test's numbers.
EXPRESSIONS: dict[str, Callable[[int, int], int]] = {
    "a + b": lambda a, b: a + b,
    "a - b": lambda a, b: a - b,
    "a * b": lambda a, b: a * b,
    "max(a, b)": max,
    "min(a, b)": min,
    "a * 2 + b": lambda a, b: a * 2 + b,
    "a // b": lambda a, b: a // b,
}


def generate_fix(root: Path, modules: int = 30, broken: int = 5, seed: int = 11) -> set[str]:
    """A repository whose tests fail where ``broken`` functions do not return what their
    docstrings say; the modules a fix must touch."""
    rng = random.Random(seed)
    (root / "app" / "ops").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "app" / "__init__.py").write_text('"""The app."""\n')
    (root / "app" / "ops" / "__init__.py").write_text('"""Its operations."""\n')
    wrong = set(rng.sample(range(modules), broken))
    for m in range(modules):
        code, tests, imports = [f'"""Operations, group {m}."""', ""], [], []
        for k in range(4):
            name, said = f"op_{m}_{k}", rng.choice(sorted(EXPRESSIONS))
            does = (
                rng.choice([e for e in sorted(EXPRESSIONS) if e != said])
                if (m in wrong and k == 1)
                else said
            )
            code += ["", f"def {name}(a, b):", f'    """Return {said}."""', f"    return {does}"]
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            imports.append(f"from app.ops.ops_{m:02d} import {name}")
            tests += [
                "",
                "",
                f"def test_{name}():",
                f"    assert {name}({a}, {b}) == {EXPRESSIONS[said](a, b)}",
            ]
        (root / "app" / "ops" / f"ops_{m:02d}.py").write_text("\n".join(code) + "\n")
        (root / "tests" / f"test_ops_{m:02d}.py").write_text("\n".join(imports + tests) + "\n")
    _commit(root)
    return {f"app/ops/ops_{m:02d}.py" for m in wrong}


def _commit(root: Path) -> None:
    if shutil.which("git"):
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "bench",
            "GIT_AUTHOR_EMAIL": "b@example.invalid",
            "GIT_COMMITTER_NAME": "bench",
            "GIT_COMMITTER_EMAIL": "b@example.invalid",
        }
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "generated"]):
            subprocess.run(["git", "-C", str(root), *args], env=env, check=True)


def _module(rng: random.Random, n: int, lines: int) -> str:
    """A module of about ``lines`` lines: functions and classes of many shapes."""
    out = [f'"""Module {n}: generated for the audit benchmark."""', "", "import asyncio", ""]
    k = 0
    while len(out) < lines:
        k += 1
        out += [*_shape(rng, f"f{n}_{k}", k), ""]
    return "\n".join(out) + "\n"


def _shape(rng: random.Random, name: str, k: int) -> list[str]:
    doc = rng.random() < 0.5
    body = [f'    """What {name} does."""'] if doc else []
    kind = k % 9
    if kind == 0:  # a class with methods, some documented
        return [
            f"class C{name}:",
            f'    """A class: {name}."""',
            "",
            f"    def m_{name}(self, x):",
            *([f'        """Method of {name}."""'] if doc else []),
            "        return x",
            "",
            f"    def n_{name}(self):",
            "        # a comment, then the body",
            "        return 1",
        ]
    if kind == 1:  # a nested function
        return [
            f"def {name}(x):",
            *body,
            f"    def inner_{name}(y):",
            "        return y",
            f"    return inner_{name}(x)",
        ]
    if kind == 2:  # async, multi-line signature
        return [
            f"async def {name}(",
            "    a: int,",
            "    b: dict[str, int] | None = None,",
            ") -> int:",
            *body,
            "    await asyncio.sleep(0)",
            "    return a",
        ]
    if kind == 3:  # a docstring that quotes code with def in it
        return [
            f"def {name}():",
            '    """Example:',
            "",
            "        def fake():",
            "            pass",
            '    """',
            "    return None",
        ]
    if kind == 4:  # one-liners
        return [f"def {name}(): return 1", f'def d{name}(): """Doc."""']
    if kind == 5:  # an f-string first is not a docstring
        return [f"def {name}(x):", '    f"{x}"', "    return x"]
    if kind == 6:  # a decorator, a comment before the docstring
        return ["@staticmethod", f"def {name}(x):", "    # why", *body, "    return x"]
    long = [f"    v{i} = {i}" for i in range(rng.randint(3, 25))]
    return [f"def {name}(a, b=':', c='('):", *body, *long, "    return a"]


def ground_truth(root: Path) -> tuple[set[str], int]:
    """``path:line:name`` of every function without a docstring, and the Python files."""
    found, files = set(), 0
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        files += 1
        for node in ast.walk(tree):
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and ast.get_docstring(node, clean=False) is None:
                found.add(f"{rel}:{node.lineno}:{node.name}")
    return found, files


def findings(text: str) -> set[str]:
    return {line for line in text.splitlines() if _FINDING.match(line)}


def scores(found: set[str], truth: set[str]) -> dict[str, float]:
    hits = len(found & truth)
    return {
        "recall": round(hits / len(truth), 4) if truth else 1.0,
        "precision": round(hits / len(found), 4) if found else 1.0,
        "missed": len(truth - found),
        "extra": len(found - truth),
    }


# -- the fleet ----------------------------------------------------------------------------------


class Model:
    """``honest_model.py`` in its own process."""

    def __init__(self, folder: Path, delay_s: float, label: str) -> None:
        port_file = folder / f"model-{label}.port"
        port_file.unlink(missing_ok=True)  # never a port of an earlier run's server
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "honest_model.py"),
                "--delay-s",
                str(delay_s),
                "--port-file",
                str(port_file),
            ],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the honest model server did not start")
            time.sleep(0.05)
        self.base_url = f"http://127.0.0.1:{int(port_file.read_text())}/v1"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@dataclass
class Run:
    repo: str
    slots: int
    status: str
    seconds: float
    input_tokens: int
    calls: int
    found: int
    recall: float
    precision: float
    missed: int
    extra: int
    reason: str = ""


@dataclass
class Ran:
    job_id: str
    status: str
    seconds: float
    input_tokens: int
    calls: int
    reason: str


def run_job(
    state: State,
    url: str,
    model: Model,
    folder: Path,
    imported: ImportReport,
    slots: int,
    *,
    goal: str,
    check: str,
    label: str,
    timeout_s: float,
) -> Ran:
    """One job over the workspace on a fresh fleet (``redfleet up``) with ``slots`` coder
    slots; its wall time from submit to its end."""
    env = {
        **os.environ,
        "REDIS_URL": url,
        "REDFLEET_LOG_LEVEL": "warning",
        "OPENAI_API_KEY": "honest",
        "REDFLEET_HOME": str(folder / "home"),
    }
    up = [sys.executable, "-m", "coordinator", "up", "--planners", "1", "--coders", "1"]
    up += ["--reviewers", "1", "--concurrency", str(slots), "--provider", "openai"]
    up += ["--model", "honest", "--base-url", model.base_url]
    with (folder / f"fleet-{label}-{slots}.log").open("wb") as log:
        fleet = subprocess.Popen(up, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            spec = JobSpec(
                goal=goal,
                scenario=Scenario.AGENTS,
                workspace=imported.tree,
                workspace_commit=imported.commit,
                check=check,
            )
            started = time.monotonic()
            job = state.jobs.submit(spec)
            while not (done := state.jobs.get(job.job_id)).status.finished:
                if time.monotonic() - started > timeout_s:
                    state.jobs.cancel(job.job_id, reason="benchmark timeout")
                time.sleep(0.2)
            seconds = time.monotonic() - started
        finally:
            fleet.send_signal(signal.SIGINT)
            fleet.wait(60)
    usage = state.usage(job.job_id).get()
    return Ran(
        job.job_id,
        done.status.value,
        round(seconds, 1),
        usage.input_tokens,
        usage.calls,
        done.reason[:200],
    )


def audited(state: State, ran: Ran, label: str, slots: int, truth: set[str]) -> Run:
    """The findings of a finished audit job (its audit/*.txt files) against ground truth."""
    ws = state.workspace(ran.job_id)
    audit = "".join(
        ws.text(path) for path in ws.files() if path.startswith("audit/") and path.endswith(".txt")
    )
    found = findings(audit)
    return Run(
        label,
        slots,
        ran.status,
        ran.seconds,
        ran.input_tokens,
        ran.calls,
        len(found),
        **scores(found, truth),
        reason=ran.reason,
    )


# -- the naive agent ----------------------------------------------------------------------------


_TOOLS = [
    {"type": "function", "function": {"name": name, "description": what, "parameters": {}}}
    for name, what in (
        ("read_lines", "Read numbered lines of an artifact."),
        ("read_file", "Numbered lines start..end of a workspace file."),
        ("append_file", "Append text to a workspace file."),
        ("report_items", "Report items of your batch."),
    )
]


def naive(root: Path, paths: list[str], max_calls: int = 20_000) -> dict[str, Any]:
    """The same model in one conversation over every file, the whole transcript kept."""
    most = lines_budget(ROLE_BUDGETS["coder"].tokens(Slot.RESULTS))
    listing = "".join(f"{n}: I{n:04d}\t{p}\n" for n, p in enumerate(paths, start=1))
    handle = f"[artifact a-{'0' * 16} batch 1B untrusted: every file]"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": CODER_SYSTEM + WORKSPACE_NOTE},
        {
            "role": "user",
            "content": f"TASK\nrole: coder\nstage: start\ngoal of the job: {GOAL}\n"
            f"inputs (read them with the reader tools):\n{handle}",
        },
    ]
    transcript = count_tokens(messages, _TOOLS)
    audit, total_input, calls = "", 0, 0
    while calls < max_calls:
        calls += 1
        total_input += transcript
        reply = answer(messages)
        if not reply["tool_calls"]:
            break
        wire = [
            {
                "id": f"n{calls}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(reply["tool_calls"])
        ]
        turn = [{"role": "assistant", "content": reply["content"], "tool_calls": wire}]
        for call, (name, args) in zip(wire, reply["tool_calls"], strict=True):
            if name == "read_lines":
                result = listing
            elif name == "read_file":
                result = _read(root, args["path"], args["start"], args["end"], most)
            elif name == "append_file":
                audit += args["text"]
                result = f"appended {len(args['text'].encode())} bytes to {args['path']}"
            else:
                result = "recorded"
            turn.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        messages += turn
        transcript += count_tokens(turn, [])
    return {"input_tokens": total_input, "calls": calls, "audit": audit}


def _read(root: Path, path: str, start: int, end: int, most: int) -> str:
    """read_file's answer, as the workspace tool words it."""
    from honest_model import TOKENS

    target = root / path
    if not target.is_file():
        return f"error: read_file: no file {path!r} in the workspace"
    lines = target.read_text().splitlines()
    shown, used, last = [], 0, min(end, len(lines))
    for n in range(start, min(end, len(lines)) + 1):
        line = f"{n}: {lines[n - 1]}"
        used += TOKENS.count(line) + 1
        if used > most and shown:
            last = n - 1
            break
        shown.append(line)
    head = f"{path}: lines {start}-{last} of {len(lines)}"
    return head + "\n" + "\n".join(shown)


# -- the benchmark ------------------------------------------------------------------------------


def bench(
    root: Path, label: str, slots: list[int], delay_s: float, folder: Path, timeout_s: float
) -> dict[str, Any]:
    truth, py_files = ground_truth(root)
    server = RedisServer().start()
    try:
        state = State.connect(server.url)
        before = state.client.info("memory")["used_memory"]
        first = import_workspace(state.client, "default", root)
        after = state.client.info("memory")["used_memory"]
        again = import_workspace(state.client, "default", root)
        validator = folder / f"validate_{label}.py"
        validator.write_text(VALIDATOR)
        model = Model(folder, delay_s, label)
        try:
            check = f"python {validator}"
            runs = []
            for n in slots:
                ran = run_job(
                    state,
                    server.url,
                    model,
                    folder,
                    first,
                    n,
                    goal=GOAL,
                    check=check,
                    label=label,
                    timeout_s=timeout_s,
                )
                runs.append(audited(state, ran, label, n, truth))
                print(f"repo_audit: {label}, {n} coder slots: {runs[-1]}", file=sys.stderr)
        finally:
            model.stop()
        state.client.close()
    finally:
        server.stop()
    paths = sorted({t.split(":")[0] for t in truth} | _py_paths(root))
    baseline = naive(root, paths)
    naive_found = findings(baseline["audit"])
    mb = first.bytes / 1e6
    best = runs[-1]
    one = next((r for r in runs if r.slots == 1), None)
    return {
        "repo": label,
        "python_files": py_files,
        "functions_without_docstring": len(truth),
        "runs": [asdict(r) for r in runs],
        "naive": {
            "input_tokens": baseline["input_tokens"],
            "calls": baseline["calls"],
            **scores(naive_found, truth),
        },
        "input_vs_naive": round(best.input_tokens / max(1, baseline["input_tokens"]), 4),
        "tokens_per_file": round(best.input_tokens / max(1, py_files)),
        "speedup": {r.slots: round(one.seconds / r.seconds, 2) for r in runs} if one else {},
        "redis_bytes_per_workspace_mb": round((after - before) / mb) if mb else None,
        "import": {
            "files": first.files,
            "bytes": first.bytes,
            "first_s": round(first.seconds, 3),
            "first_sent": first.sent,
            "again_s": round(again.seconds, 3),
            "again_sent": again.sent,
            "again_share": round(again.sent / max(1, first.bytes), 4),
        },
    }


def bench_fix(folder: Path, slots: int, delay_s: float, timeout_s: float) -> dict[str, Any]:
    """The fix workload: a repository whose tests fail, fixed by the fleet, applied as a
    branch on which the repository's own tests pass."""
    repo = folder / "fix"
    needed = generate_fix(repo)
    failing_before = _pytest(repo)
    server = RedisServer().start()
    try:
        state = State.connect(server.url)
        imported = import_workspace(state.client, "default", repo)
        model = Model(folder, delay_s, "fix")
        try:
            ran = run_job(
                state,
                server.url,
                model,
                folder,
                imported,
                slots,
                goal=FIX_GOAL,
                check="pytest -q",
                label="fix",
                timeout_s=timeout_s,
            )
        finally:
            model.stop()
        changed = sorted(c.path for c in state.workspace(ran.job_id).changes())
        applied = apply_job(state, ran.job_id, repo) if ran.status == "succeeded" else None
        state.client.close()
    finally:
        server.stop()
    passing_after = None
    if applied is not None:
        subprocess.run(["git", "-C", str(repo), "checkout", "-q", applied.branch], check=True)
        passing_after = _pytest(repo) == 0
    return {
        "run": asdict(ran),
        "tests_failed_before": failing_before != 0,
        "branch": applied.branch if applied else None,
        "commits": len(applied.commits) if applied else 0,
        "tests_pass_on_branch": passing_after,
        "changed": changed,
        "needed": sorted(needed),
        "touches_only_needed": set(changed) == needed,
    }


def _pytest(repo: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=repo,
        capture_output=True,
    )
    return done.returncode


def _py_paths(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts
    }


def verdicts(result: dict[str, Any]) -> dict[str, bool]:
    runs = result["runs"]
    checks = {
        "recall": all(r["recall"] >= GOALS["recall"] for r in runs),
        "precision": all(r["precision"] >= GOALS["precision"] for r in runs),
        "input_vs_naive": result["input_vs_naive"] <= GOALS["input_vs_naive"],
        "resend_share": result["import"]["again_share"] <= GOALS["resend_share"],
        "succeeded": all(r["status"] == "succeeded" for r in runs),
    }
    if 16 in result["speedup"]:
        checks["speedup_16"] = result["speedup"][16] >= GOALS["speedup_16"]
    return checks


def show(results: list[dict[str, Any]]) -> None:
    console = Console(width=max(160, Console().width))
    table = Table(title="repo audit: find every function without a docstring (honest model)")
    for column in (
        "repo",
        "run",
        "status",
        "recall",
        "precision",
        "input tokens",
        "vs naive",
        "calls",
        "wall s",
        "speedup",
    ):
        table.add_column(column)
    for res in results:
        for r in res["runs"]:
            table.add_row(
                res["repo"],
                f"fleet, {r['slots']} coder slots",
                r["status"],
                str(r["recall"]),
                str(r["precision"]),
                f"{r['input_tokens']:,}",
                f"{r['input_tokens'] / max(1, res['naive']['input_tokens']):.4f}",
                str(r["calls"]),
                str(r["seconds"]),
                str(res["speedup"].get(r["slots"], "")),
            )
        n = res["naive"]
        table.add_row(
            res["repo"],
            "naive single agent",
            "",
            str(n["recall"]),
            str(n["precision"]),
            f"{n['input_tokens']:,}",
            "1",
            str(n["calls"]),
            "",
            "",
        )
    console.print(table)
    for res in results:
        imp = res["import"]
        console.print(
            f"{res['repo']}: {res['python_files']} Python files, "
            f"{res['functions_without_docstring']} functions without a docstring; "
            f"{res['tokens_per_file']:,} input tokens a file; Redis "
            f"{res['redis_bytes_per_workspace_mb']:,} bytes per MB of workspace; import "
            f"{imp['files']} files {imp['bytes']:,} B in {imp['first_s']} s, again "
            f"{imp['again_sent']} B sent ({imp['again_share']:.2%}) in {imp['again_s']} s; "
            f"goals: {verdicts(res)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", action="append", default=[], help="also audit this folder")
    parser.add_argument("--slots", default="1,4,16", help="coder slots per run (generated repo)")
    parser.add_argument("--delay-s", type=float, default=1.0, help="the model's time per call")
    parser.add_argument("--files", type=int, default=240, help="files of the generated repo")
    parser.add_argument("--timeout-s", type=float, default=3_600, help="per job")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--workload",
        choices=["audit", "fix"],
        default="audit",
        help="audit: find functions without a docstring; fix: make a repository's failing "
        "tests pass and apply the result as a branch",
    )
    args = parser.parse_args()
    slots = [int(s) for s in args.slots.split(",")]
    if args.workload == "fix":
        with tempfile.TemporaryDirectory(prefix="redfleet-fix-") as tmp:
            doc = bench_fix(Path(tmp), max(slots), args.delay_s, args.timeout_s)
        met = doc["tests_pass_on_branch"] is True and doc["touches_only_needed"]
        if args.json:
            print(json.dumps({**doc, "met": met}, indent=1))
        else:
            Console().print(doc, f"goal met: {met}")
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="redfleet-audit-") as tmp:
        folder = Path(tmp)
        generated = generate(folder / "generated", args.files)
        results.append(bench(generated, "generated", slots, args.delay_s, folder, args.timeout_s))
        for repo in args.repo:
            label = Path(repo).name
            results.append(
                bench(Path(repo), label, [max(slots)], args.delay_s, folder, args.timeout_s)
            )
    if args.json:
        print(
            json.dumps(
                {
                    "goals": GOALS,
                    "results": results,
                    "met": {r["repo"]: verdicts(r) for r in results},
                },
                indent=1,
            )
        )
    else:
        show(results)


if __name__ == "__main__":
    main()
