"""A task that needs a person: blocked, then approved or rejected (real server)."""

from __future__ import annotations

import json

import pytest

from coordinator.api import Client
from coordinator.reaper import Reaper
from shared_state import (
    EffectStatus,
    Fenced,
    JobStatus,
    JournalEntry,
    NotBlocked,
    State,
    TaskStatus,
    keys,
)

from .conftest import events_named
from .helpers import job_with_children
from .test_cli import assert_one_line_error, run


def _blocked(state: State, n: int = 1):
    job, _parent, ids = job_with_children(state, n)
    claims = []
    for task_id in ids:
        claimed = state.tasks.claim(job.job_id, task_id, f"coder-{task_id}", 60_000)
        state.tasks.block(claimed.claim, f"may I delete {task_id}?", approval_for="d1", stage="go")
        claims.append(claimed.claim)
    return job, ids, claims


def test_a_blocked_task_states_its_question_and_holds_no_lease(state: State) -> None:
    job, (task_id,), (claim,) = _blocked(state)
    task = state.tasks.get(job.job_id, task_id)
    assert (task.status, task.question, task.approval_for, task.stage, task.owner) == (
        TaskStatus.BLOCKED,
        f"may I delete {task_id}?",
        "d1",
        "go",
        "",
    )
    assert state.jobs.get(job.job_id).status is JobStatus.BLOCKED
    assert state.client.zscore(keys.leases(job.job_id), task_id) is None
    (event,) = events_named(state, job.job_id, "task.blocked")
    assert event.model_extra["question"] == task.question
    # a re-sent block is answered from the record; the old token writes nothing else
    state.tasks.block(claim, task.question, approval_for="d1", stage="go")
    with pytest.raises(Fenced):
        state.tasks.complete(claim, "")
    line = Client(state).progress(job.job_id).line()  # what `submit --wait` shows
    assert f"{task_id} asks: {task.question} (redfleet approve {job.job_id} {task_id})" in line
    # nothing to reap: a blocked task waits as long as it takes
    Reaper(state, redeliver_after_ms=60_000).tick()
    assert state.tasks.get(job.job_id, task_id).status is TaskStatus.BLOCKED


def test_approve_queues_the_task_with_the_approval_bound_to_its_call(state: State) -> None:
    job, (task_id,), _ = _blocked(state)
    depth = state.delivery.depths()["coder"]
    state.tasks.decide(job.job_id, task_id, approve=True, note="yes, only that", by="cli:ann")
    assert state.delivery.depths()["coder"] == depth + 1  # delivered to resume
    task = state.tasks.get(job.job_id, task_id)
    assert task.status is TaskStatus.QUEUED
    assert (task.approved_for, task.approval_note) == ("d1", "yes, only that")
    assert state.jobs.get(job.job_id).status is JobStatus.RUNNING
    assert (
        task_id.encode()
        in b" ".join(
            state.client.hvals(
                state.delivery.queues["coder"].get_job_ids()[-1].join(["rq:job:", ""])
            )
        )
        or state.delivery.depths()["coder"] >= 1
    )
    with pytest.raises(NotBlocked, match=r"is not blocked \(queued\)"):
        state.tasks.decide(job.job_id, task_id, approve=True, note="", by="cli:ann")


def test_the_job_stays_blocked_while_any_task_is(state: State) -> None:
    job, (a, b), _ = _blocked(state, 2)
    state.tasks.decide(job.job_id, a, approve=True, note="", by="cli:ann")
    assert state.jobs.get(job.job_id).status is JobStatus.BLOCKED
    state.tasks.decide(job.job_id, b, approve=True, note="", by="cli:ann")
    assert state.jobs.get(job.job_id).status is JobStatus.RUNNING


def test_reject_ends_the_task_with_the_note_and_fails_the_job(state: State) -> None:
    job, (task_id,), _ = _blocked(state)
    state.tasks.decide(job.job_id, task_id, approve=False, note="not that table", by="cli:ann")
    assert state.tasks.get(job.job_id, task_id).status is TaskStatus.DEAD
    failed = state.jobs.get(job.job_id)
    assert failed.status is JobStatus.FAILED
    assert "rejected by cli:ann: not that table" in failed.reason


def test_approve_and_reject_at_the_cli(state: State, redis_url: str) -> None:
    job, (a, b), _ = _blocked(state, 2)
    shown = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)
    questions = {t["task_id"]: t["question"] for t in shown["tasks"]}
    assert questions[a] == f"may I delete {a}?"
    ok = run("approve", job.job_id, a, "--note", "go ahead", url=redis_url)
    assert ok.returncode == 0 and "approved" in ok.stdout
    assert_one_line_error(run("approve", job.job_id, a, url=redis_url), "not blocked")
    assert_one_line_error(run("approve", "j-000000000000", a, url=redis_url), "j-000000000000")
    assert_one_line_error(run("approve", job.job_id, "c-nope", url=redis_url), "c-nope")
    assert_one_line_error(run("reject", job.job_id, b, "--note", " ", url=redis_url), "--note")
    out = run("reject", job.job_id, b, "--note", "no", "--json", url=redis_url)
    assert json.loads(out.stdout)["decision"] == "rejected"
    assert state.jobs.get(job.job_id).status is JobStatus.FAILED


def test_an_unsettleable_effect_blocks_and_its_approval_lets_only_that_effect_through(
    state: State,
) -> None:
    from workers.errors import Blocked
    from workers.heartbeat import Heartbeat
    from workers.journal import approval_digest
    from workers.task_run import TaskRun

    from .test_journal import Bump, _left_intent, claimed, journal

    run, bump = claimed(state), Bump(found=None, idempotent=False)
    key = _left_intent(run, bump)
    with pytest.raises(Blocked) as raised:
        journal(run, bump).reconcile()
    assert key in raised.value.question
    entry = state.records(run.job.job_id).journal(run.task.task_id)[key]
    assert raised.value.approval_for == approval_digest(entry)
    run.block(raised.value.question, approval_for=raised.value.approval_for)
    job_id, task_id = run.job.job_id, run.task.task_id
    assert state.tasks.get(job_id, task_id).status is TaskStatus.BLOCKED
    assert state.jobs.get(job_id).status is JobStatus.BLOCKED

    state.tasks.decide(job_id, task_id, approve=True, note="it did not go out", by="cli:ann")
    again = state.tasks.claim(job_id, task_id, "w2", 60_000)
    beat = Heartbeat(state, worker_id="w2", role=again.task.role, lease_ms=60_000, info={})
    beat.leases[0].hold(again.claim)
    resumed = TaskRun(state, again.job, again.task, again.claim, beat.leases[0])
    notes = journal(resumed, bump).reconcile()
    assert bump.effects == [7]  # made once, on the approval
    assert notes and "made again on a person's approval" in notes[0]
    # Another unsettled effect is not covered by that approval.
    other = journal(resumed, bump)
    other_key = other.key("bump", "counter", {"n": 8})
    left = JournalEntry(
        key=other_key, task_id=task_id, tool="bump", status=EffectStatus.INTENT, detail={"n": 8}
    )
    state.records(job_id).write(resumed.claim, journal=[left])
    with pytest.raises(Blocked):
        journal(resumed, bump).reconcile()
    assert bump.effects == [7]


def test_an_approval_is_used_once_a_crash_while_making_it_blocks_again(state: State) -> None:
    from workers.errors import Blocked
    from workers.journal import approval_digest

    from .test_journal import Bump, _left_intent, claimed, journal

    run, bump = claimed(state), Bump(found=None, idempotent=False)
    key = _left_intent(run, bump)
    entry = state.records(run.job.job_id).journal(run.task.task_id)[key]
    # As if approved, then the worker died between making it and recording it:
    state.records(run.job.job_id).write(
        run.claim, journal=[entry.to(EffectStatus.APPROVED, "being made on a person's approval")]
    )
    state.client.hset(keys.task(run.job.job_id, run.task.task_id), "approved_for",
                      approval_digest(entry))  # fmt: skip
    again = state.tasks.get(run.job.job_id, run.task.task_id)
    run.task = again  # the resumed attempt reads its task record afresh
    with pytest.raises(Blocked):
        journal(run, bump).reconcile()
    assert bump.effects == []  # not made a second time on the same approval
