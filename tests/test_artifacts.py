"""Artifacts: content-addressed storage behind handles (stored by a script: a real server)."""

from __future__ import annotations

import time

import pytest

from shared_state import ArtifactNotFound, ArtifactStore, MemoryArtifacts, State, Trust, keys
from shared_state.scripts import server_ms


@pytest.fixture(params=["redis", "memory"])
def store(request):
    if request.param == "memory":
        return MemoryArtifacts()
    return ArtifactStore(request.getfixturevalue("state").client, "j-1")


def test_the_same_content_gets_the_same_handle_and_the_text_round_trips(store) -> None:
    first = store.put("x" * 5_000, kind="page", title="a page", source="web")
    again = store.put("x" * 5_000, kind="page", title="a page", source="web")
    assert first == again and first.id.startswith("a-") and first.bytes == 5_000
    assert len(first.preview) == 600 and first.trust == Trust.UNTRUSTED
    assert store.text(first.id) == "x" * 5_000


def test_an_unknown_artifact_is_an_error(store) -> None:
    with pytest.raises(ArtifactNotFound):
        store.text("a-missing")


def test_an_artifact_of_a_running_job_never_expires_and_is_listed(state: State) -> None:
    client = state.client
    client.hset(keys.job("j-1"), "status", "running")  # a job record with no expiry yet
    store = ArtifactStore(client, "j-1")
    ref = store.put("hello", kind="note", trust=Trust.TRUSTED)
    assert client.ttl(keys.artifact("j-1", ref.id)) == -1
    assert store.list() == [ref] and store.get(ref.id) == ref


def test_an_artifact_written_after_its_job_finished_goes_with_the_job(state: State) -> None:
    client = state.client
    client.hset(keys.job("j-1"), "status", "succeeded")
    client.expire(keys.job("j-1"), 60)  # the job's retention clock runs
    ref = ArtifactStore(client, "j-1").put("late", kind="note")
    assert 0 < client.ttl(keys.artifact("j-1", ref.id)) <= 60


def test_an_artifact_written_for_a_job_whose_record_is_gone_still_expires(state: State) -> None:
    client = state.client  # no job hash at all: expired after its retention
    ref = ArtifactStore(client, "j-gone").put("late", kind="note")
    assert 0 < client.ttl(keys.artifact("j-gone", ref.id)) <= 24 * 3600
    assert 0 < client.ttl(keys.artifacts("j-gone")) <= 24 * 3600


def test_when_an_artifact_was_stored_is_redis_time_not_the_hosts(state: State, monkeypatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 86_400.0)  # a host clock far off the server's
    store = ArtifactStore(state.client, "j-1")
    before = server_ms(state.client)
    ref = store.put("evidence", kind="log")
    assert before <= store.stored_ms()[ref.id] <= server_ms(state.client)
