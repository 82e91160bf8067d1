"""Retention, capped streams, the global mirror, keys and script headers."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from shared_state import EventLog, JobSpec, State, keys, replies
from shared_state.events import MIRROR_BATCH
from shared_state.models import Event
from shared_state.scripts import SCRIPTS, server_ms

from .conftest import wait_for
from .helpers import job_with_children


def _expiring(state: State, key: str, retention_s: int) -> bool:
    return 0 < state.client.ttl(key) <= retention_s


def test_a_succeeded_job_starts_its_retention_clock_in_the_scripts(
    state: State, redis_url: str
) -> None:
    state = State.connect(redis_url, retention_s=120)
    job, parent, (child_id,) = job_with_children(state, 1)
    child = state.tasks.claim(job.job_id, child_id, "w1", 10_000).claim
    state.tasks.complete(child, parent.task_id)
    assert _expiring(state, keys.task(job.job_id, child_id), 120)
    assert state.client.ttl(keys.job(job.job_id)) == -1  # the job still runs
    root = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000).claim
    assert state.tasks.complete(root, "").job_finished
    # The script itself: the job's record, stream, task set and last task.
    job_id = job.job_id
    for key in (keys.job(job_id), keys.job_events(job_id), keys.tasks(job_id)):
        assert _expiring(state, key, 120), key
    assert _expiring(state, keys.task(job_id, job.root_task), 120)
    assert not state.client.exists(keys.leases(job_id), keys.queued(job_id))  # emptied
    state.jobs.finalize(job_id)
    assert _expiring(state, keys.budget(job_id), 120)
    assert state.jobs.active() == []


def test_a_job_running_past_its_retention_keeps_every_artifact(redis_url: str) -> None:
    state = State.connect(redis_url, retention_s=1)
    job = state.jobs.submit(JobSpec(goal="g"))
    state.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    store = state.artifacts(job.job_id)
    refs = [store.put(f"feature list v{i}", kind="features") for i in range(3)]
    written_ms = server_ms(state.client)
    wait_for(lambda: server_ms(state.client) > written_ms + 2_500, 10, "3 retentions to pass")
    assert [store.text(r.id) for r in refs] == [f"feature list v{i}" for i in range(3)]
    assert all(state.client.ttl(keys.artifact(job.job_id, r.id)) == -1 for r in refs)
    state.jobs.cancel(job.job_id)  # the job ends: now its artifacts' clock starts
    assert all(_expiring(state, keys.artifact(job.job_id, r.id), 1) for r in refs)


def test_finalizing_a_cancelled_job_expires_its_unfinished_tasks(
    state: State, redis_url: str
) -> None:
    state = State.connect(redis_url, retention_s=120)
    job, _, ids = job_with_children(state, 2)
    state.jobs.cancel(job.job_id)
    job_id = job.job_id
    for key in [keys.job(job_id), keys.budget(job_id), *(keys.task(job_id, i) for i in ids)]:
        assert _expiring(state, key, 120), key
    assert state.jobs.active() == []


def test_job_streams_are_capped(state: State, redis_url: str) -> None:
    state = State.connect(redis_url, job_maxlen=100)
    job = state.jobs.submit(JobSpec(goal="g"))
    task = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000).claim
    for _ in range(2_000):
        state.tasks.renew(task, 10_000)
    # MAXLEN ~ trims whole radix-tree nodes: the length stays within a node of the cap.
    assert state.client.xlen(keys.job_events(job.job_id)) < 300


def test_script_events_reach_the_global_stream_with_the_next_write(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    claim = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000).claim
    before = [e.event for e in state.events.read()]
    assert before == ["job.submitted", "task.queued"]  # task.claimed is queued for the mirror
    state.events.flush()
    mirrored = state.events.read()[-1]
    own = state.events.read(job.job_id)[-1]
    expected = ("task.claimed", job.job_id, claim.token)
    assert (mirrored.event, mirrored.job_id, mirrored.token) == expected
    assert mirrored.ts == own.ts


def test_a_mirrored_batch_keeps_every_event_its_fields_and_their_order(state: State) -> None:
    job, _, ids = job_with_children(state, 3)  # claim, 3 x task.queued, task.waiting
    state.events.flush()
    own = state.events.read(job.job_id)
    mirrored = [e for e in state.events.read() if e.job_id == job.job_id]

    def shown(events: list[Event]) -> list[tuple]:
        return [(e.event, e.task_id, e.token, e.ts) for e in events]

    assert shown(mirrored) == shown(own)
    assert [e.task_id for e in mirrored if e.event == "task.queued"][1:] == ids


def test_a_mirror_batch_that_fails_is_kept_for_the_next_flush(state: State) -> None:
    job, _, ids = job_with_children(state, MIRROR_BATCH)  # a full batch is queued
    state.client.delete(keys.EVENTS)
    state.client.set(keys.EVENTS, "not a stream")  # the batch's XADD fails: WRONGTYPE
    assert state.tasks.claim(job.job_id, ids[0], "w1", 10_000) is not None  # the batch rode here
    state.client.delete(keys.EVENTS)
    state.events.flush()
    own = state.events.read(job.job_id, last=100)[2:]  # after submit's own two appends
    mirrored = state.events.read(last=100)
    assert [(e.event, e.task_id) for e in mirrored] == [(e.event, e.task_id) for e in own]
    assert mirrored[-1].event == "task.claimed" and mirrored[-1].task_id == ids[0]


def test_the_global_stream_is_capped(state: State) -> None:
    log = EventLog(state.client, global_maxlen=100)
    for i in range(2_000):
        log.append("worker.started", {"worker": f"w{i}"})
    assert state.client.xlen(keys.EVENTS) < 300


def test_every_key_of_a_job_shares_one_hash_tag() -> None:
    job_keys = [*keys.job_keys("j-1"), keys.task("j-1", "t-1")]
    assert {re.search(r"\{(.+?)\}", k).group(1) for k in job_keys} == {"j-1"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_script_documents_its_keys_args_and_returns_and_builds_no_keys(name: str) -> None:
    (path,) = [
        p
        for p in resources.files("shared_state").joinpath("lua").iterdir()
        if p.name.startswith(f"{name}-")
    ]
    source = path.read_text()
    n_keys = int(path.name.removesuffix(".lua").rsplit("-", 1)[1])
    header = source.split("]]", 1)[0]
    # The keys callers send (``keys.script_keys``), in order, are the ones the header names.
    sent = keys.script_keys(
        name, "job", "<task_id>", parent_id="<parent_id>", root_id="<root_id>",
        artifact_id="<id>", worker_id="<worker_id>", tenant="tenant", route_id="<route>",
    )  # fmt: skip
    assert len(sent) == n_keys
    for i, key in enumerate(sent, start=1):
        line = re.search(rf"^\s*KEYS\[{i}\]\s.*$", header, flags=re.MULTILINE)
        assert line is not None, f"KEYS[{i}] is not in the header of {name}"
        named = next(w for w in line.group().split() if w.startswith("rf:"))
        assert named == key, f"{name} KEYS[{i}]: the header says {named}, callers send {key}"
    assert "ARGV" in header and "Returns" in header
    # Every code the header documents means one thing to its callers (``replies``): an
    # outcome they handle or one error; and the map holds no code the script never sends.
    documented = {int(c) for c in re.findall(r"^\s+(-\d)\s", header, flags=re.MULTILINE)}
    mapped = {int(c) for c in [*replies.ERRORS.get(name, {}), *replies.OUTCOMES.get(name, ())]}
    assert documented == mapped, f"{name}: the header documents {documented}, the map {mapped}"
    code = re.sub(r"--\[\[.*?\]\]|--[^\n]*", "", SCRIPTS[name].source, flags=re.DOTALL)
    assert "rf:" not in code, "a script must receive every key in KEYS"


def test_pruning_drops_expired_jobs_from_the_index_only(state: State) -> None:
    kept, expired = (state.jobs.submit(JobSpec(goal=g)) for g in ("kept", "expired"))
    state.client.delete(keys.job(expired.job_id))
    # Indexed long ago: a record missing that long is gone, not a submit still writing it.
    state.client.zadd(keys.JOBS, {expired.job_id: 0})
    assert state.jobs.prune_index() == 1
    assert [j.decode() for j in state.client.zrange(keys.JOBS, 0, -1)] == [kept.job_id]


def test_retention_is_the_jobs_own_not_the_retiring_processs(state: State, redis_url) -> None:
    submitter = State.connect(redis_url, retention_s=120)
    job = submitter.jobs.submit(JobSpec(goal="g"))
    root = state.tasks.claim(job.job_id, job.root_task, "w1", 10_000).claim
    state.tasks.complete(root, "")
    state.jobs.finalize(job.job_id)  # `state` has the default retention of 7 days
    assert _expiring(state, keys.budget(job.job_id), 120)
