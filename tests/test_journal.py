"""Journaled effects on a real Redis: once per key, settled on resume, never run twice blindly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from shared_state import EffectStatus, Fenced, JobSpec, JournalEntry, Role, State, keys
from shared_state.records import opening_from
from shared_state.tasks import Child
from workers import journal as journal_module
from workers.errors import Blocked, ToolRefused
from workers.heartbeat import Heartbeat
from workers.journal import Journal
from workers.task_run import TaskRun


@dataclass
class Bump:
    """An effect that counts how often it ran; its check answers as told."""

    name: str = "bump"
    idempotent: bool = False
    records_itself: bool = False
    found: bool | None = None
    effects: list[int] = field(default_factory=list)

    def apply(self, entry: JournalEntry) -> str:
        self.effects.append(entry.detail["n"])
        return f"bumped {entry.detail['n']}"

    def check(self, entry: JournalEntry) -> bool | None:
        return self.found


def claimed(state: State, worker: str = "w1", *, goal: str = "g") -> TaskRun:
    job = state.jobs.submit(JobSpec(goal=goal))
    got = state.tasks.claim(job.job_id, job.root_task, worker, 60_000)
    assert got is not None
    beat = Heartbeat(state, worker_id=worker, role=Role.PLANNER, lease_ms=60_000, info={})
    beat.leases[0].hold(got.claim)
    return TaskRun(state, got.job, got.task, got.claim, beat.leases[0])


def journal(run: TaskRun, bump: Bump) -> Journal:
    return Journal(run, run.state.records(run.job.job_id), run.task.stage, [bump])


def test_the_same_call_in_the_same_stage_takes_effect_once(state: State) -> None:
    run, bump = claimed(state), Bump()
    first = journal(run, bump).perform("bump", "counter", {"n": 1}, lambda: {"n": 1})
    # A replay (say, after a crash) reads the journal afresh.
    again = journal(run, bump).perform("bump", "counter", {"n": 1}, lambda: {"n": 1})
    other = journal(run, bump).perform("bump", "counter", {"n": 2}, lambda: {"n": 2})
    assert bump.effects == [1, 2]
    assert first == "bumped 1" and again.startswith("bumped 1 (already done earlier")
    assert other == "bumped 2"
    entries = state.records(run.job.job_id).journal(run.task.task_id)
    assert {e.status for e in entries.values()} == {EffectStatus.DONE}
    assert all(k.startswith(f"{run.task.task_id}:bump counter#") for k in entries)
    assert all(k.endswith(":start") for k in entries)


def _left_intent(run: TaskRun, bump: Bump) -> str:
    """What a worker killed between intent and result leaves behind."""
    j = journal(run, bump)
    key = j.key("bump", "counter", {"n": 7})
    entry = JournalEntry(
        key=key, task_id=run.task.task_id, tool="bump", status=EffectStatus.INTENT, detail={"n": 7}
    )
    run.state.records(run.job.job_id).write(run.claim, journal=[entry])
    return key


@pytest.mark.parametrize(
    ("found", "idempotent", "status", "on_resume", "after_replays"),
    [
        (True, False, EffectStatus.DONE, [], []),  # the check found it: never again
        (False, False, EffectStatus.NOT_DONE, [], [7]),  # it did not: the replay runs it once
        (None, True, EffectStatus.DONE, [7], [7]),  # no check, idempotent: applied on resume
    ],
)
def test_resume_settles_an_intent_without_a_result(
    state: State, found, idempotent, status, on_resume, after_replays
) -> None:
    run, bump = claimed(state), Bump(found=found, idempotent=idempotent)
    key = _left_intent(run, bump)
    notes = journal(run, bump).reconcile()
    assert len(notes) == 1 and key in notes[0]
    assert bump.effects == on_resume
    assert state.records(run.job.job_id).journal(run.task.task_id)[key].status is status
    # The replayed call: done stays done; not done runs now, once.
    journal(run, bump).perform("bump", "counter", {"n": 7}, lambda: {"n": 7})
    journal(run, bump).perform("bump", "counter", {"n": 7}, lambda: {"n": 7})
    assert bump.effects == after_replays


def test_an_uncheckable_non_idempotent_intent_blocks_the_task(state: State) -> None:
    run, bump = claimed(state), Bump(found=None, idempotent=False)
    key = _left_intent(run, bump)
    with pytest.raises(Blocked, match="approve to make it again as its intent recorded it"):
        journal(run, bump).reconcile()
    assert bump.effects == []
    entry = state.records(run.job.job_id).journal(run.task.task_id)[key]
    assert entry.status is EffectStatus.BLOCKED


def test_an_idempotent_effect_undone_since_is_made_again(state: State) -> None:
    run, bump = claimed(state), Bump(idempotent=True, found=False)  # "A" is not in place now
    journal(run, bump).perform("bump", "file", {"n": 1}, lambda: {"n": 1})  # write A
    journal(run, bump).perform("bump", "file", {"n": 2}, lambda: {"n": 2})  # write B
    journal(run, bump).perform("bump", "file", {"n": 1}, lambda: {"n": 1})  # A again
    assert bump.effects == [1, 2, 1]


def test_an_effect_is_logged_as_made_once_its_write_returned_never_when_it_raised(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's log is its account of the effects it was told it made (a failover
    drill counts them): an attempt its fence refused made nothing, and is not in it."""
    said: list[str] = []

    def info(event: str, **fields: Any) -> None:
        said.append(f"{event} {fields['key']}")

    monkeypatch.setattr(journal_module, "log", SimpleNamespace(info=info))

    run = claimed(state)
    stale = run.claim.model_copy(update={"token": run.claim.token - 1})

    class Refused(Bump):
        def apply(self, entry: JournalEntry) -> str:  # a write under a claim taken since
            state.records(run.job.job_id).write(stale, checkpoint="{}")
            return "made"

    with pytest.raises(Fenced):
        journal(run, Refused()).perform("bump", "counter", {"n": 1}, lambda: {"n": 1})
    assert said == []
    # The replay (its check: not made) makes it, and says so once.
    bump = Bump(found=False)
    assert journal(run, bump).reconcile()
    journal(run, bump).perform("bump", "counter", {"n": 1}, lambda: {"n": 1})
    assert bump.effects == [1]
    assert said == [f"journal.applied {journal(run, bump).key('bump', 'counter', {'n': 1})}"]


def test_a_spawn_already_made_in_this_stage_is_refused_not_skipped(state: State) -> None:
    run, spawn = claimed(state), Bump(name="spawn", records_itself=True)
    j = journal(run, spawn)
    key = j.key("spawn", "review", {"n": 3})
    done = JournalEntry(key=key, task_id=run.task.task_id, tool="spawn",
                        status=EffectStatus.DONE, detail={"n": 3}, result="spawned 3")  # fmt: skip
    state.records(run.job.job_id).write(run.claim, journal=[done])
    # Returning "done" would end the run as if it had handed off, with nothing to wait for.
    with pytest.raises(ToolRefused, match="already done: spawned 3"):
        journal(run, spawn).perform("spawn", "review", {"n": 3}, lambda: {"n": 3})
    assert spawn.effects == []


@contextmanager
def whole_reads(state: State, job_id: str) -> Iterator[list[str]]:
    """The commands that read the job's whole journal (a scan, HGETALL, HKEYS, HVALS) while
    inside, scripts' own included: the server's SLOWLOG logs every command at threshold 0."""
    journal = keys.journal(job_id).encode()
    found: list[str] = []
    was = state.client.config_get("slowlog-*")
    state.client.config_set("slowlog-log-slower-than", 0)
    state.client.config_set("slowlog-max-len", 100_000)
    state.client.slowlog_reset()
    try:
        yield found
        for entry in state.client.slowlog_get(100_000):
            name, *args = entry["command"].split()
            if name.upper() in (b"HSCAN", b"HGETALL", b"HKEYS", b"HVALS") and args[:1] == [journal]:
                found.append(name.decode().upper())
    finally:
        for name, value in was.items():
            state.client.config_set(name, value)


def _entry(task_id: str, n: int) -> JournalEntry:
    return JournalEntry(key=f"{task_id}:bump counter#{n}:start", task_id=task_id, tool="bump",
                        status=EffectStatus.DONE, detail={"n": n})  # fmt: skip


def test_a_task_s_entries_are_read_by_name_never_by_reading_the_jobs_whole_journal(
    state: State,
) -> None:
    """The journal is one hash for the whole job. A claim that opens a run, and ``Records``,
    read a task's entries by their names (a range of the job's names, by the task's
    prefix): nothing reads the job's whole journal, whose size would make every claim
    O(the job's entries)."""
    root = claimed(state)
    job_id = root.job.job_id
    records = state.records(job_id)
    spawn = _entry(root.task.task_id, 0).model_copy(update={"tool": "spawn"})
    children = state.tasks.spawn(root.claim, "review", [Child(role=Role.CODER, brief=f"c{i}")
                                                        for i in range(40)],
                                 journal=(spawn.key, spawn.model_dump_json()))  # fmt: skip
    for child in children[:-1]:  # the last stays queued: a first claim
        got = state.tasks.claim(job_id, child, "w2", 60_000)
        assert got is not None
        records.write(got.claim, journal=[_entry(child, 1), _entry(child, 2)])
        if child == children[0]:  # named entries of ids it is a prefix of, or that are its
            for lookalike in (f"{child}x", f"{child[:-1]}", f"{child};"):
                entry = _entry(lookalike, 1)
                state.tasks.owner_write(
                    got.claim, [(keys.journal(job_id), entry.key, entry.model_dump_json())]
                )

    def opening(job: object) -> Callable[[object], None]:  # no reads outside the job
        return lambda pipe: None

    def opened(task_id: str) -> list[str]:
        got = state.tasks.claim(job_id, task_id, "w2", 60_000, open_run=opening)
        assert got is not None and got.opened is not None
        return sorted(got.opened.journal)

    with whole_reads(state, job_id) as read_whole:
        assert opened(children[-1]) == []
        # The same worker's claim again (re-sent, its lease live) opens its run again.
        assert opened(children[0]) == [_entry(children[0], n).key for n in (1, 2)]
        assert list(records.journal(root.task.task_id)) == [spawn.key]
        assert sorted(records.opened(children[1]).journal) == [
            _entry(children[1], n).key for n in (1, 2)
        ]
    assert read_whole == []


def test_a_task_with_more_entries_than_one_read_takes_gets_them_all(state: State) -> None:
    run = claimed(state)
    job_id, task_id = run.job.job_id, run.task.task_id
    records = state.records(job_id)
    many = [_entry(task_id, n) for n in range(2_345)]  # HMGET a thousand names at a time
    records.write(run.claim, journal=many)
    with whole_reads(state, job_id) as read_whole:
        assert sorted(records.journal(task_id)) == sorted(e.key for e in many)
    assert read_whole == []


def test_an_entry_written_without_its_name_is_found_by_a_scan_until_written_again(
    state: State,
) -> None:
    """An entry written without its name (by a worker older than the names; a job written
    before them has only such entries): the job's names are fewer than its entries, and its
    journal is scanned, as it always was, so no entry is missed. Once the entry is written
    again, with its name, its task's entries are read by name again."""
    run = claimed(state)
    job_id, task_id = run.job.job_id, run.task.task_id
    records = state.records(job_id)
    records.write(run.claim, journal=[_entry(task_id, 1)])
    older = _entry(task_id, 2)
    state.client.hset(keys.journal(job_id), older.key, older.model_dump_json())
    with whole_reads(state, job_id) as read_whole:
        assert sorted(records.journal(task_id)) == [_entry(task_id, 1).key, older.key]
    assert read_whole == ["HSCAN"]
    records.write(run.claim, journal=[older.to(EffectStatus.DONE, "again")])
    with whole_reads(state, job_id) as read_whole:
        assert records.journal(task_id)[older.key].result == "again"
    assert read_whole == []


def test_the_journals_names_expire_and_stop_expiring_with_the_job_and_its_journal(
    redis_url: str,
) -> None:
    state = State.connect(redis_url, retention_s=120)
    run = claimed(state)
    job_id = run.job.job_id
    state.records(job_id).write(run.claim, journal=[_entry(run.task.task_id, 1)])
    assert state.client.zcard(keys.journal_names(job_id)) == 1
    assert state.tasks.complete(run.claim, "").job_finished
    state.jobs.finalize(job_id)
    for key in (keys.journal(job_id), keys.journal_names(job_id)):
        assert 0 < state.client.ttl(key) <= 120, key
    # A new round of the job: they stop expiring together again.
    state.jobs.resume(
        job_id, stage="r1/resume", goal="", constraints="[]", criteria_version="v",
        criteria_changed=False, features="", checks="",
    )  # fmt: skip
    for key in (keys.journal(job_id), keys.journal_names(job_id)):
        assert state.client.ttl(key) == -1, key


def test_names_an_older_finalize_left_without_an_expiry_go_when_the_job_is_dropped(
    state: State,
) -> None:
    """In a fleet being upgraded, a finalize by an older version sets no expiry on the
    journal's names (it does not know them): they go when the job's id leaves the index,
    whether its expiry was recorded (due) or its record went without one (gone)."""
    due, gone = (state.jobs.submit(JobSpec(goal=g)) for g in ("due", "gone"))
    for job in (due, gone):
        state.client.zadd(keys.journal_names(job.job_id), {f"{job.root_task}:x:start": 0})
        state.client.delete(keys.job(job.job_id))
    state.client.zadd(keys.EXPIRING_JOBS, {due.job_id: 0})
    state.client.zadd(keys.JOBS, {gone.job_id: 0})  # indexed long ago
    assert state.jobs.prune_index() == 2
    assert not state.client.exists(*(keys.journal_names(j.job_id) for j in (due, gone)))


def test_a_run_parses_only_its_own_entries_of_the_jobs_journal(state: State) -> None:
    """The journal is one hash for the whole job: a run takes its task's entries by their
    keys' prefix, never parsing the others (it would cost every run O(the job's tasks))."""
    run, bump = claimed(state), Bump()
    journal(run, bump).perform("bump", "counter", {"n": 1}, lambda: {"n": 1})
    records = state.records(run.job.job_id)
    (mine,) = records.journal(run.task.task_id)
    task = run.task.task_id
    lookalike = JournalEntry(key=f"{task}x:bump counter#0:start", task_id=f"{task}x",
                             tool="bump", status=EffectStatus.DONE)  # fmt: skip
    state.client.hset(
        keys.journal(run.job.job_id),
        mapping={lookalike.key: lookalike.model_dump_json(), "c-9:bump x#1:start": "not JSON"},
    )
    assert list(records.journal(task)) == [mine]
    assert list(opening_from(records.opened(task), task, None, ()).journal) == [mine]
    # Its key is its task's, or it is not written: the prefix is what a run reads by.
    with pytest.raises(ValueError, match="is not one of task"):
        records.write(run.claim, journal=[lookalike])
