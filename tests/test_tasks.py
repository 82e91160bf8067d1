"""Claims, leases and fencing on a real Redis server (the Lua scripts)."""

from __future__ import annotations

import pytest

from shared_state import (
    Child,
    Fenced,
    JobFinished,
    JobSpec,
    RecordChanged,
    Role,
    State,
    TaskStatus,
    keys,
)
from shared_state.scripts import server_ms
from shared_state.tasks import Claimed

from .conftest import events_named, wait_for
from .helpers import job_with_children


def test_claim_succeeds_once_and_a_second_claim_is_refused(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    first = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000)
    second = state.tasks.claim(job.job_id, job.root_task, "w2", 10_000)
    assert first is not None and first.claim.token >= 1 and first.task.owner == "w1"
    assert first.job.job_id == job.job_id
    assert second is None
    assert state.tasks.get(job.job_id, job.root_task).owner == "w1"
    assert state.jobs.get(job.job_id).status == "running"


def test_claim_takes_over_an_expired_lease_with_a_higher_token(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    first = state.tasks.claim(job.job_id, job.root_task, "w1", 1).claim
    wait_for(lambda: state.tasks.get(job.job_id, job.root_task).lease_until < _now(state))
    taken = state.tasks.claim(job.job_id, job.root_task, "w2", 10_000)
    assert taken is not None and taken.claim.token > first.token and taken.task.attempt == 2
    requeued = events_named(state, job.job_id, "task.requeued")
    assert [e.model_extra["reason"] for e in requeued] == ["lease expired (owner w1)"]


def test_a_write_after_the_lease_ran_out_says_so(state: State) -> None:
    job, _, (child_id, *_) = job_with_children(state, 1)
    held = state.tasks.claim(job.job_id, child_id, "w1", 1).claim
    wait_for(lambda: state.tasks.get(job.job_id, child_id).lease_until < _now(state))
    expired = f"task {child_id}: the lease of token {held.token} has expired$"
    with pytest.raises(Fenced, match=expired):
        state.tasks.renew(held, 10_000)


def test_a_stale_token_is_refused_on_every_write_and_recorded(state: State) -> None:
    job, parent, (child_id, *_) = job_with_children(state, 1)
    old = state.tasks.claim(job.job_id, child_id, "w1", 1).claim
    wait_for(lambda: state.tasks.get(job.job_id, child_id).lease_until < _now(state))
    new = state.tasks.claim(job.job_id, child_id, "w2", 10_000).claim
    for write in (
        lambda: state.tasks.renew(old, 10_000),
        lambda: state.tasks.complete(old, parent.task_id),
        lambda: state.tasks.fail(old, "boom"),
        lambda: state.tasks.spawn(old, "x", [_child()]),
        lambda: state.records(job.job_id).write(old, checkpoint="{}", files={"a.py": "a-1"}),
    ):
        stale = rf"token {old.token} is stale .* token {new.token} owned by w2"
        with pytest.raises(Fenced, match=stale):
            write()
    fenced = events_named(state, job.job_id, "task.fenced")
    ops = [e.model_extra["op"] for e in fenced]
    assert ops == ["renew", "complete", "fail", "spawn", "write"]
    records = state.records(job.job_id)
    assert records.checkpoint(child_id) is None and records.files() == {}
    assert all(e.worker == "w1" and e.token == old.token for e in fenced)
    stored = state.tasks.get(job.job_id, child_id)
    assert (stored.status, stored.owner, stored.token) == (TaskStatus.CLAIMED, "w2", new.token)
    state.tasks.complete(new, parent.task_id)
    assert state.tasks.get(job.job_id, child_id).status == TaskStatus.SUCCEEDED


def test_renew_extends_the_lease_on_server_time(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    claim = state.tasks.claim(job.job_id, job.root_task, "w1", 1_000).claim
    until = state.tasks.renew(claim, 60_000)
    assert until >= _now(state) + 50_000
    assert state.client.zscore(keys.leases(job.job_id), claim.task_id) == until


def test_last_child_requeues_the_parent_exactly_once(state: State) -> None:
    job, parent, ids = job_with_children(state, 3)
    assert state.tasks.get(job.job_id, parent.task_id).status == TaskStatus.WAITING
    outcomes = []
    for i, child_id in enumerate(ids):
        child = state.tasks.claim(job.job_id, child_id, f"w{i}", 10_000).claim
        outcomes.append(state.tasks.complete(child, parent.task_id).parent_requeued)
    assert outcomes == ["", "", parent.task_id]
    resumed = state.tasks.get(job.job_id, parent.task_id)
    assert resumed.status == TaskStatus.QUEUED and resumed.stage == "review"
    again = state.tasks.claim(job.job_id, parent.task_id, "w9", 10_000)
    assert again is not None and again.claim.token > resumed.token


def test_completing_the_root_task_completes_the_job(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    root = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000).claim
    assert state.tasks.complete(root, "").job_finished
    assert state.jobs.get(job.job_id).status == "succeeded"
    assert len(events_named(state, job.job_id, "job.succeeded")) == 1


def test_reap_requeues_an_expired_attempt_and_kills_it_at_max_attempts(state: State) -> None:
    job, _, (child_id, *_) = job_with_children(state, 1, max_attempts=2)
    for attempt, expected in ((1, "requeued"), (2, "dead")):
        claimed = state.tasks.claim(job.job_id, child_id, f"w{attempt}", 1)
        assert claimed is not None and claimed.task.attempt == attempt
        wait_for(lambda: state.tasks.get(job.job_id, child_id).lease_until < _now(state))
        assert state.tasks.reap(job.job_id, child_id) == expected
    assert state.tasks.get(job.job_id, child_id).status == TaskStatus.DEAD
    failed = state.jobs.get(job.job_id)
    assert failed.status == "failed"
    expected = f"task {child_id} (coder) dead after 2 attempt(s): lease expired (owner w2)"
    assert failed.reason == expected


def test_reap_leaves_a_live_lease_alone(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    state.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    assert state.tasks.reap(job.job_id, job.root_task) is None
    assert state.tasks.get(job.job_id, job.root_task).owner == "w1"


def test_a_retryable_failure_requeues_and_a_final_one_fails_the_job(state: State) -> None:
    job, _, (child_id, *_) = job_with_children(state, 1)
    first = state.tasks.claim(job.job_id, child_id, "w1", 10_000).claim
    assert state.tasks.fail(first, "flaky") == "requeued"
    # Claimable again once its backoff is over (tests/test_backoff.py has the delays).
    second = wait_for(lambda: state.tasks.claim(job.job_id, child_id, "w2", 10_000)).claim
    assert state.tasks.fail(second, "broken input", retryable=False) == "dead"
    assert state.jobs.get(job.job_id).reason.endswith("dead after 2 attempt(s): broken input")


def test_cancel_stops_the_owner_at_its_next_renewal_and_blocks_claims(state: State) -> None:
    job, _, ids = job_with_children(state, 2)
    owner = state.tasks.claim(job.job_id, ids[0], "w1", 10_000).claim
    state.jobs.cancel(job.job_id)
    with pytest.raises(JobFinished):
        state.tasks.renew(owner, 10_000)
    assert state.tasks.get(job.job_id, ids[0]).status == TaskStatus.CANCELLED
    assert state.tasks.claim(job.job_id, ids[1], "w2", 10_000) is None
    assert state.tasks.get(job.job_id, ids[1]).status == TaskStatus.CANCELLED
    assert job.job_id not in state.jobs.active()


def test_spawn_delivers_one_envelope_per_child_on_its_role_queue(state: State) -> None:
    job, _, ids = job_with_children(state, 4)
    coder_queue = state.delivery.queues[Role.CODER]
    assert sorted(coder_queue.get_job_ids()) == sorted(
        state.client.hget(keys.task(job.job_id, i), "envelope").decode() for i in ids
    )


def _now(state: State) -> int:
    return server_ms(state.client)


def _child() -> Child:
    return Child(Role.CODER, "x")


def test_a_failure_or_reap_in_a_finished_job_cancels_the_task_instead_of_requeuing(
    state: State,
) -> None:
    job, _, ids = job_with_children(state, 2)
    failing = state.tasks.claim(job.job_id, ids[0], "w1", 10_000).claim
    state.tasks.claim(job.job_id, ids[1], "w2", 1)
    state.jobs.cancel(job.job_id)  # ends both claimed tasks with the job (endTasks)
    with pytest.raises(JobFinished):  # its owner is told the job ended, and stops
        state.tasks.fail(failing, "boom")
    assert state.tasks.reap(job.job_id, ids[1]) is None  # nothing left to reap
    for task_id in ids:
        assert state.tasks.get(job.job_id, task_id).status == TaskStatus.CANCELLED
    assert not events_named(state, job.job_id, "task.requeued")
    assert state.delivery.depths()["coder"] == 2  # only the first deliveries


def test_a_claim_or_completion_resent_by_its_owner_is_idempotent(state: State) -> None:
    job, parent, (child_id,) = job_with_children(state, 1)
    first = state.tasks.claim(job.job_id, child_id, "w1", 60_000)
    again = state.tasks.claim(job.job_id, child_id, "w1", 60_000)  # a client retry
    assert again is not None and again.claim.token == first.claim.token
    assert state.tasks.claim(job.job_id, child_id, "w2", 60_000) is None
    assert state.tasks.complete(first.claim, parent.task_id).parent_requeued == parent.task_id
    # The retry gets the first reply again (so its caller still delivers the parent)...
    assert state.tasks.complete(first.claim, parent.task_id).parent_requeued == parent.task_id
    # ...and changes nothing: one success, one fan-in.
    assert len(events_named(state, job.job_id, "task.succeeded")) == 1
    fan_ins = [
        e for e in events_named(state, job.job_id, "task.queued") if e.model_extra.get("reason")
    ]
    assert [e.task_id for e in fan_ins] == [parent.task_id]
    assert state.tasks.get(job.job_id, parent.task_id).pending == 0
    assert not events_named(state, job.job_id, "task.fenced")
    assert len(events_named(state, job.job_id, "task.claimed")) == 2  # planner + child


def test_a_store_reads_a_jobs_fields_with_its_first_claim_of_the_job_only(
    state: State, redis_url: str
) -> None:
    job, _, ids = job_with_children(state, 2)
    worker = State.connect(redis_url)  # a fresh worker: it has seen no job yet

    def claim(task_id: str) -> tuple[Claimed, int]:
        state.client.config_resetstat()
        got = worker.tasks.claim(job.job_id, task_id, "w1", 10_000)
        assert got is not None
        return got, state.client.info("commandstats")["cmdstat_hgetall"]["calls"]

    (first, first_reads), (second, second_reads) = claim(ids[0]), claim(ids[1])
    assert (first_reads, second_reads) == (2, 1)  # task + job, then the task alone
    assert second.job == first.job and second.job.goal == job.goal
    assert (second.task.task_id, second.task.owner) == (ids[1], "w1")
    assert second.claim.token == second.task.token >= 1
    assert second.task.status == TaskStatus.CLAIMED and second.task.brief == "c1"


def _rewind(state: State, key: str, fields: dict[bytes, bytes]) -> None:
    """Put a hash back as it was: what a rollback of acknowledged writes leaves."""
    with state.client.pipeline() as pipe:
        pipe.delete(key)
        pipe.hset(key, mapping=fields)
        pipe.execute()


def test_a_task_rewound_by_lost_writes_refuses_its_first_owner(state: State) -> None:
    job, parent, (child_id,) = job_with_children(state, 1)
    key = keys.task(job.job_id, child_id)
    before = state.client.hgetall(key)
    first = state.tasks.claim(job.job_id, child_id, "w1", 60_000).claim
    _rewind(state, key, before)  # the claim is lost: the record says queued again
    second = state.tasks.claim(job.job_id, child_id, "w2", 60_000).claim
    assert second.token != first.token  # Redis time moved on: no token handed out twice
    for write in (
        lambda: state.tasks.renew(first, 60_000),
        lambda: state.records(job.job_id).write(first, checkpoint="{}", files={"a.py": "a-1"}),
        lambda: state.tasks.complete(first, parent.task_id),
    ):
        with pytest.raises(Fenced):
            write()
    assert state.records(job.job_id).files() == {}
    state.tasks.complete(second, parent.task_id)
    done = state.tasks.get(job.job_id, child_id)
    assert done.status == TaskStatus.SUCCEEDED and done.owner == "w2"


def test_the_fence_checks_the_owner_as_well_as_the_token(state: State) -> None:
    job, parent, (child_id,) = job_with_children(state, 1)
    first = state.tasks.claim(job.job_id, child_id, "w1", 60_000).claim
    # The same token under another owner: what a rewind would give if tokens could repeat.
    state.client.hset(keys.task(job.job_id, child_id), "owner", "w2")
    with pytest.raises(Fenced, match=rf"token {first.token} is owned by w2 now"):
        state.tasks.renew(first, 60_000)
    with pytest.raises(Fenced):
        state.tasks.complete(first, parent.task_id)
    assert state.tasks.get(job.job_id, child_id).status == TaskStatus.CLAIMED


@pytest.mark.parametrize("index", ["0", "-1", "-4", "1.5", "2", "x"])
def test_an_owner_write_whose_target_index_leaves_its_records_is_refused(
    state: State, index: str
) -> None:
    job, _, (child_id,) = job_with_children(state, 1)
    owner = state.tasks.claim(job.job_id, child_id, "w1", 60_000).claim
    task_keys = [
        keys.task(job.job_id, child_id),
        keys.job(job.job_id),
        keys.job_events(job.job_id),
        keys.leases(job.job_id),
        keys.queued(job.job_id),
        keys.workspace(job.job_id),  # the one target: only index 1 names it
    ]
    before = {k: state.client.hgetall(k) for k in task_keys[:2]}
    res = state.runner.run(
        "ownerWrite", job.job_id, task_keys, [owner.token, owner.owner, 0, index, "status", "x"]
    )
    assert res.code == -6
    assert {k: state.client.hgetall(k) for k in task_keys[:2]} == before
    assert state.client.hgetall(keys.workspace(job.job_id)) == {}


def test_a_guarded_write_is_refused_when_the_field_changed_since_it_was_read(
    state: State,
) -> None:
    job, _, (first_id, second_id) = job_with_children(state, 2)
    first = state.tasks.claim(job.job_id, first_id, "w1", 60_000).claim
    second = state.tasks.claim(job.job_id, second_id, "w2", 60_000).claim
    records = state.records(job.job_id)
    read = records.files().get("m.py")  # both coders read the file: no entry yet
    records.write(second, files={"m.py": "a-second"}, file_guards={"m.py": read})
    with pytest.raises(RecordChanged, match=r"'m\.py' changed since it was read"):
        records.write(first, files={"m.py": "a-first", "n.py": "a-n"}, file_guards={"m.py": read})
    assert records.files() == {"m.py": "a-second"}  # nothing of the stale write landed
    records.write(first, files={"m.py": "a-first"}, file_guards={"m.py": "a-second"})
    assert records.files() == {"m.py": "a-first"}


def test_a_lease_entry_whose_task_is_gone_is_dropped_not_a_reaper_failure(state: State) -> None:
    job, _, (child_id,) = job_with_children(state, 1)
    state.tasks.claim(job.job_id, child_id, "w1", 1)
    state.client.delete(keys.task(job.job_id, child_id))  # evicted, or deleted by hand
    assert state.tasks.reap(job.job_id, child_id) is None
    assert state.client.zscore(keys.leases(job.job_id), child_id) is None


def test_a_parent_finds_its_waves_children_from_its_own_record(state: State) -> None:
    from shared_state import keys

    job, parent, ids = job_with_children(state, 3)
    found = state.tasks.children(job.job_id, parent.task_id, "review")
    assert [t.task_id for t in found] == ids
    # Listed on the parent: found without the job's task set (which the fallback reads).
    state.client.delete(keys.tasks(job.job_id))
    assert [t.task_id for t in state.tasks.children(job.job_id, parent.task_id, "review")] == ids
    assert state.tasks.children(job.job_id, parent.task_id, "other-wave") == []
