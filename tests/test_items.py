"""Jobs over many items through a real fleet: batches, statuses moved by code, a bounded planner."""

from __future__ import annotations

import json
from pathlib import Path

from coordinator.importer import import_workspace
from shared_state import JobSpec, Role, Scenario, State
from workers.context import ROLE_BUDGETS
from workers.roles.items import ItemList, ItemResult

from .conftest import events_named
from .test_agent_jobs import finished
from .test_cli import run

# Each item is valid when it names a book: book-<digits>. The check runs per item ({item}),
# or once over the whole list.
VALIDATE = """import re, sys
names = sys.argv[1:] or open("items.txt").read().split()
bad = [n for n in names if not re.fullmatch(r"book-[0-9]+", n)]
print("invalid:", bad) if bad else print("ok", len(names))
sys.exit(1 if bad else 0)
"""


def _call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


ITEMS = {
    "name": "items",
    "roles": {
        "planner": [
            _call("write_features", features=[
                {"id": "F1", "description": "every book is converted and validates",
                 "check": "workspace"}]),
            _call("plan_items", source="lines", path="items.txt", batch_size=50,
                  brief="Convert each book listed in your batch."),
        ],
        "coder.batch-*": [
            _call("read_lines", id="$ref:batch", start=1, end=60),
            _call("report_items", all_done=True),
            {"text": "every book of the batch converted"},
        ],
        "planner/review": [_call("dispatch_reviewer", brief="check every item")],
        "reviewer.review": [
            _call("run_checks", feature_ids=["F1"]),
            _call("submit_verdicts", verdicts=[{"feature_id": "F1", "passes": True}]),
            _call("submit_verdicts", verdicts=[{"feature_id": "F1", "passes": False}]),
        ],
        "planner/report": [
            _call("dispatch_batches", brief="Convert the books that failed again."),
            {"text": "the items as the list says"},
        ],
    },
}  # fmt: skip


def _job(state: State, tmp_path: Path, name: str, lines: list[str], check: str) -> str:
    root = tmp_path / name
    root.mkdir()
    (root / "items.txt").write_text("\n".join(lines) + "\n")
    (root / "validate.py").write_text(VALIDATE)
    tree = import_workspace(state.client, "default", root).tree
    spec = JobSpec(goal=f"convert {name}", scenario=Scenario.AGENTS, workspace=tree, check=check)
    return state.jobs.submit(spec).job_id


def _planner_inputs(state: State, job_id: str) -> list[int]:
    calls = events_named(state, job_id, "model.called")
    planner = {t.task_id for t in state.tasks.list(job_id) if t.role is Role.PLANNER}
    return [int(e.model_extra["input_tokens"]) for e in calls if e.task_id in planner]


def test_a_job_over_many_items_validates_each_by_its_check_and_the_planner_stays_bounded(
    state: State, start_fleet, tmp_path: Path, redis_url: str
) -> None:
    script = tmp_path / "items.json"
    script.write_text(json.dumps(ITEMS))
    # 24 books, two of them misnamed: checked one by one.
    few = [f"book-{n}" for n in range(22)] + ["Book 22", "book_23"]
    small = _job(state, tmp_path, "few", few, "python validate.py {item}")
    # 500 books, all fine: checked by one run over the list.
    large = _job(state, tmp_path, "many", [f"book-{n}" for n in range(500)], "python validate.py")
    start_fleet(planners=1, coders=2, reviewers=1, worker_env=(("REDFLEET_SCRIPT", str(script)),))
    done_small, done_large = finished(state, small, 180), finished(state, large, 180)

    assert done_large.status == "succeeded", done_large.reason
    progress = state.records(large).progress()
    assert {k: progress[k] for k in ("total", "validated", "failed", "pending")} == {
        "total": "500", "validated": "500", "failed": "0", "pending": "0"
    }  # fmt: skip
    coders = [t for t in state.tasks.list(large) if t.role is Role.CODER]
    assert len(coders) == 10  # one per batch of 50

    # Only a passing check validates: the two misnamed books fail, twice, and the job says so.
    assert done_small.status == "failed"
    assert "1 of 1 features fail after 2 review round(s): F1" in done_small.reason
    store = state.artifacts(small)
    items = ItemList.model_validate_json(store.text(state.records(small).progress()["items"]))
    failed = sorted(i.item for i in items.items if i.status == "failed")
    assert failed == ["Book 22", "book_23"]
    validated = [i for i in items.items if i.status == "validated"]
    assert len(validated) == 22 and all(i.evidence for i in validated)
    assert "ok 1" in store.text(validated[0].evidence[0])  # its own run, with its item

    # The planner never read the items: its largest call is the same for 24 or 500 of them,
    # and within its role's budget.
    most_small, most_large = max(_planner_inputs(state, small)), max(_planner_inputs(state, large))
    assert most_large <= most_small + 100, (most_small, most_large)
    assert most_large <= ROLE_BUDGETS["planner"].ceiling
    shown = run("status", large, url=redis_url).stdout
    assert "items: 500 of 500 done (500 validated, 0 failed, 0 pending)" in shown


def test_coders_reports_move_items_to_done_or_failed_never_to_validated() -> None:
    items = ItemList.of("lines of x", ["a", "b", "c"])
    checked = items.checked([])
    reported = checked.reported(
        [ItemResult(id="I0001", status="done"), ItemResult(id="I0002", status="failed")]
    )
    assert [i.status for i in reported.items] == ["done", "failed", "pending"]
    assert reported.line() == "1 of 3 items done (0 validated, 1 failed, 1 pending)"
