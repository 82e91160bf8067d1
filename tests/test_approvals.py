"""Ask before acting (`submit --approve TOOL`): a gated call waits for a person, on a real fleet.

The demo scenario's two coders each write one file with ``write_file``. Gated,
no file may reach the job's workspace before its call is approved; each
question names the call; approving every one lets the job finish with both
files, each written once.
"""

from __future__ import annotations

import json
import re

import pytest
from starlette.testclient import TestClient

from coordinator.api import Client
from coordinator.dashboard import create_app
from coordinator.errors import CoordinatorError
from shared_state import (
    EffectStatus,
    JobSpec,
    JobStatus,
    QuestionChanged,
    Role,
    Scenario,
    State,
    Task,
    TaskStatus,
    keys,
)
from workers.heartbeat import Heartbeat
from workers.llm import ProviderChoice
from workers.outcomes import Asks, Done, settle
from workers.roles import perform
from workers.roles.coder import Coder
from workers.task_run import TaskRun

from .conftest import events_named, wait_for
from .test_cli import run

GOAL = "write a greeting module with tests"


def _blocked_or_finished(state: State, job_id: str) -> list[Task] | str:
    job = state.jobs.get(job_id)
    if job.status.finished:
        return job.status.value
    return [t for t in state.tasks.list(job_id) if t.status is TaskStatus.BLOCKED]


def _written(state: State, job_id: str) -> set[str]:
    return {p.decode() for p in state.client.hkeys(keys.workspace(job_id))}


def test_a_gated_write_waits_for_approval_and_the_job_finishes_after_it(
    state: State, start_fleet, redis_url: str
) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=3_000)
    client = Client(state)
    job_id = client.submit(GOAL, fanout=2, approve=("write_file",))
    assert state.jobs.get(job_id).approve == "write_file"

    approved: list[str] = []
    while True:
        found = wait_for(lambda: _blocked_or_finished(state, job_id), 120, "a question or the end")
        if isinstance(found, str):
            break
        for task in found:
            assert task.question.startswith("may I call write_file path=")
            path = json.loads(task.question.split("path=", 1)[1].split(" ", 1)[0])
            # Blocked before the effect: the file it asks about is not written.
            assert path not in _written(state, job_id), (path, _written(state, job_id))
            if not approved:  # the first question, as a person reads it
                shown = run("status", job_id, url=redis_url).stdout
                assert f"{task.task_id} asks: may I call write_file path=" in shown
                assert f"redfleet approve {job_id} {task.task_id}" in shown
            client.approve(job_id, task.task_id)
            approved.append(path)
    assert found == "succeeded", state.jobs.get(job_id).reason
    assert sorted(approved) == sorted(_written(state, job_id))
    assert len(approved) == 2  # one question per write, none asked twice
    asks = [e for e in state.records(job_id).entries() if e.key.split(":")[1].startswith("ask ")]
    assert {e.status for e in asks} == {EffectStatus.DONE}
    assert {e.result for e in asks} == {"approved by a person"}


def test_a_rejected_call_fails_the_job_without_its_effect(state: State, start_fleet) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=3_000)
    client = Client(state)
    job_id = client.submit(GOAL, fanout=2, approve=("write_file",))
    blocked = wait_for(lambda: _blocked_or_finished(state, job_id), 120, "a question")
    assert isinstance(blocked, list)
    with pytest.raises(CoordinatorError, match="--note"):
        client.reject(job_id, blocked[0].task_id, note=" ")
    client.reject(job_id, blocked[0].task_id, note="not that file")
    job = wait_for(lambda: (j := state.jobs.get(job_id)).status.finished and j, 60, "the end")
    assert job.status is JobStatus.FAILED
    assert "not that file" in state.tasks.get(job_id, blocked[0].task_id).error
    assert _written(state, job_id) == set()


def test_the_dashboard_approves_from_its_own_page_only(state: State, start_fleet) -> None:
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=3_000)
    job_id = Client(state).submit(GOAL, fanout=1, approve=("write_file",))
    # The scripted plan dispatches two coders: either may ask first, or both at once.
    found = wait_for(lambda: _blocked_or_finished(state, job_id), 120, "a question")
    assert isinstance(found, list), f"the job ended ({found}) without asking"
    task = found[0]
    web = TestClient(create_app(state), base_url="http://127.0.0.1:8765")
    url = f"/api/jobs/{job_id}/tasks/{task.task_id}/approve"
    # Started by another site, or not as JSON: refused, the task still waits.
    for headers, code in (
        ({"sec-fetch-site": "cross-site"}, 403),
        ({"origin": "http://evil.example"}, 403),
        ({"content-type": "text/plain"}, 415),
    ):
        sent = {"content-type": "application/json", **headers}
        assert web.post(url, content=b"{}", headers=sent).status_code == code, headers
    assert state.tasks.get(job_id, task.task_id).status is TaskStatus.BLOCKED
    assert web.get(url).status_code == 405
    other = web.post(f"/api/jobs/{job_id}/tasks/c-nope/approve", json={})
    assert other.status_code == 404

    same = {"sec-fetch-site": "same-origin", "origin": "http://127.0.0.1:8765"}
    answer = web.post(url, json={"note": "go ahead"}, headers=same)
    assert answer.status_code == 200 and answer.json()["decision"] == "approved"
    # The same decision again: that question is answered (the task is queued, or already
    # asks about its next call): refused either way.
    again = web.post(url, json={"asked": task.approval_for}, headers=same)
    assert again.status_code == 409, again.text
    (approved,) = events_named(state, job_id, "task.approved")
    assert approved.model_extra["note"] == "go ahead"


def test_only_a_tool_that_acts_can_be_gated(state: State, redis_url: str) -> None:
    with pytest.raises(CoordinatorError, match=r"read_file.*write_file"):
        Client(state).submit(GOAL, approve=("read_file",))
    proc = run("submit", GOAL, "--approve", "write_file, run_checks", "--json", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    job_id = json.loads(proc.stdout)["job_id"]
    assert state.jobs.get(job_id).approve == "run_checks,write_file"
    doc = json.loads(run("status", job_id, "--json", url=redis_url).stdout)
    assert doc["approve"] == ["run_checks", "write_file"]


def _scripted(tmp_path, name: str, steps: list[dict]) -> ProviderChoice:
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps({"name": name, "roles": {"planner": steps}}))
    return ProviderChoice(script=str(script))


def test_the_approved_call_is_made_as_asked_whatever_the_model_writes_next(
    state: State, tmp_path
) -> None:
    job = state.jobs.submit(
        JobSpec(goal="g", scenario=Scenario.AGENTS, approve="write_file", max_attempts=5)
    )
    asks = [{"tool_calls": [{"name": "write_file",
                             "arguments": {"path": "a.txt", "content": "hello\n" * 400}}]},
            {"text": "done"}]  # fmt: skip

    def run_once(choice: ProviderChoice) -> object:
        got = state.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
        assert got is not None
        beat = Heartbeat(state, worker_id="w1", role=Role.PLANNER, lease_ms=60_000, info={})
        beat.leases[0].hold(got.claim)
        run = TaskRun(state, got.job, got.task, got.claim, beat.leases[0])
        outcome = perform(lambda: Coder(run, choice, "w1"))
        settle(run, outcome)
        return outcome

    asked = run_once(_scripted(tmp_path, "asks", asks))
    assert isinstance(asked, Asks) and _written(state, job.job_id) == set()
    task = state.tasks.get(job.job_id, job.root_task)
    call_id = re.search(r"the whole call: (a-[0-9a-f]+)", task.question).group(1)
    stored = json.loads(state.artifacts(job.job_id).text(call_id))
    assert stored == {
        "tool": "write_file",
        "arguments": {"path": "a.txt", "content": "hello\n" * 400},
    }
    assert "(2400 characters)" in task.question  # shown cut; the whole call is the artifact
    with pytest.raises(QuestionChanged) as moved:  # a decision names the question it answers
        Client(state).approve(job.job_id, job.root_task, asked="0" * 16)
    assert f"({task.approval_for}), not the one asked ('{'0' * 16}')" in str(moved.value)
    Client(state).approve(job.job_id, job.root_task, asked=task.approval_for)

    # The model now writes nothing: the approved call is made from what was asked.
    done = run_once(_scripted(tmp_path, "answers", [{"text": "done"}]))
    assert isinstance(done, Done)
    assert _written(state, job.job_id) == {"a.txt"}
    assert state.workspace(job.job_id).text("a.txt") == "hello\n" * 400
