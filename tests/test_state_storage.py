"""Retention, capped streams, the global mirror, keys and script headers."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from shared_state import EventLog, JobSpec, State, keys
from shared_state.scripts import SCRIPTS

from .helpers import claim_of


def test_a_finished_job_expires_after_the_retention_and_leaves_the_active_set(
    state: State, redis_url: str
) -> None:
    state = State.connect(redis_url, retention_s=120)
    job = state.jobs.submit(JobSpec(goal="g"))
    root = claim_of(state.tasks.claim(job.job_id, job.root_task, "w1", 10_000), "w1")
    assert state.client.ttl(keys.job(job.job_id)) == -1
    state.tasks.complete(root, "")
    assert state.jobs.finalize(job.job_id)
    for key in [*keys.job_keys(job.job_id), keys.task(job.job_id, job.root_task)]:
        ttl = state.client.ttl(key)
        assert ttl == -2 or 0 < ttl <= 120, key  # -2: an empty index, already gone
    assert state.jobs.active() == []


def test_job_streams_are_capped(state: State, redis_url: str) -> None:
    state = State.connect(redis_url, job_maxlen=100)
    job = state.jobs.submit(JobSpec(goal="g"))
    task = claim_of(state.tasks.claim(job.job_id, job.root_task, "w1", 10_000), "w1")
    for _ in range(2_000):
        state.tasks.renew(task, 10_000)
    # MAXLEN ~ trims whole radix-tree nodes: the length stays within a node of the cap.
    assert state.client.xlen(keys.job_events(job.job_id)) < 300


def test_script_events_reach_the_global_stream_with_the_next_write(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    state.tasks.claim(job.job_id, job.root_task, "w1", 10_000)
    before = [e.event for e in state.events.read()]
    assert before == ["job.submitted", "task.queued"]  # task.claimed is queued for the mirror
    state.events.flush()
    mirrored = state.events.read()[-1]
    own = state.events.read(job.job_id)[-1]
    assert (mirrored.event, mirrored.job_id, mirrored.token) == ("task.claimed", job.job_id, 1)
    assert mirrored.ts == own.ts


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
    for i in range(1, n_keys + 1):
        assert f"KEYS[{i}]" in header
    assert "ARGV" in header and "Returns" in header
    code = re.sub(r"--\[\[.*?\]\]|--[^\n]*", "", SCRIPTS[name].source, flags=re.DOTALL)
    assert "rf:" not in code, "a script must receive every key in KEYS"


def test_pruning_drops_expired_jobs_from_the_index_only(state: State) -> None:
    kept, expired = (state.jobs.submit(JobSpec(goal=g)) for g in ("kept", "expired"))
    state.client.delete(keys.job(expired.job_id))
    assert state.jobs.prune_index() == 1
    assert [j.decode() for j in state.client.zrange(keys.JOBS, 0, -1)] == [kept.job_id]
