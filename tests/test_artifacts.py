"""Artifacts: content-addressed storage behind handles (plain storage: fakeredis)."""

from __future__ import annotations

import fakeredis
import pytest

from shared_state import ArtifactNotFound, ArtifactStore, MemoryArtifacts, Trust, keys


@pytest.fixture(params=["redis", "memory"])
def store(request):
    if request.param == "memory":
        return MemoryArtifacts()
    return ArtifactStore(fakeredis.FakeRedis(), "j-1", retention_s=60)


def test_the_same_content_gets_the_same_handle_and_the_text_round_trips(store) -> None:
    first = store.put("x" * 5_000, kind="page", title="a page", source="web")
    again = store.put("x" * 5_000, kind="page", title="a page", source="web")
    assert first == again and first.id.startswith("a-") and first.bytes == 5_000
    assert len(first.preview) == 600 and first.trust == Trust.UNTRUSTED
    assert store.text(first.id) == "x" * 5_000


def test_an_unknown_artifact_is_an_error(store) -> None:
    with pytest.raises(ArtifactNotFound):
        store.text("a-missing")


def test_stored_artifacts_expire_with_the_retention_and_are_listed() -> None:
    client = fakeredis.FakeRedis()
    store = ArtifactStore(client, "j-1", retention_s=60)
    ref = store.put("hello", kind="note", trust=Trust.TRUSTED)
    assert 0 < client.ttl(keys.artifact("j-1", ref.id)) <= 60
    assert store.list() == [ref] and store.get(ref.id) == ref
