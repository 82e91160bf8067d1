"""Forget reaches everything a job derived from the text, in Redis and on its disk.

On a redis-server of their own with an append-only file: every key is read
back with DUMP (what a replica or a snapshot would get, deleted stream
entries' bytes included) and the server's files are read from disk.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared_state import Child, JobSpec, RedisServer, Role, State, keys
from shared_state.artifacts import Trust
from shared_state.errors import Forgotten
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory.files import MemoryFiles

CANARY = "the vault code is CANARY-7F3K-Q9Z2"


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[tuple[State, Path]]:
    """A State on a server that keeps an append-only file in ``tmp_path``; values are
    written to disk and dumped uncompressed, so a text in them can be found by reading."""
    server = RedisServer(data_dir=tmp_path).start()
    state = State.connect(server.url)
    state.client.config_set("rdbcompression", "no")
    state.client.config_set("aof-use-rdb-preamble", "no")
    try:
        yield state, tmp_path
    finally:
        state.client.close()
        server.stop()


def _claim(text: str, scope: str, source: SourceKind, key: str = "") -> Claim:
    return Claim(
        scope=Scope.parse(scope), text=text, source_kind=source, source_ref="test", key=key
    )


def test_forget_leaves_the_text_nowhere_in_redis_nor_in_its_append_only_file(
    durable: tuple[State, Path],
) -> None:
    state, data_dir = durable
    job = state.jobs.submit(JobSpec(goal=f"open the safe: {CANARY}", tenant="acme", user="u"))
    root = state.tasks.claim(job.job_id, job.root_task, "planner-0", 60_000)
    assert root is not None
    state.tasks.spawn(root.claim, "code", [Child(Role.CODER, f"use {CANARY} on the door")])
    ctx = MemoryContext(tenant="acme", user="u", job=job.job_id, task="t-1", actor="test")
    store = MemoryStore(state.client)
    item = store.write(ctx, _claim(CANARY, "user:u:", SourceKind.USER, key="vault"))
    # An agent's copy in another case, re-wrapped; a checkpoint, an artifact, events.
    store.write(ctx, _claim(f"noted: {CANARY.upper()}", f"job:{job.job_id}:", SourceKind.AGENT))
    wrapped = CANARY.replace(" is ", " is\n   ")
    state.client.hset(keys.checkpoints(job.job_id), "t-1", json.dumps({"said": [wrapped]}))
    state.artifacts(job.job_id).put(f"log: {CANARY}", kind="transcript", title="t",
                                    trust=Trust.TRUSTED)  # fmt: skip
    state.events.append("note", {"text": CANARY}, job_id=job.job_id)
    for n in range(50):  # the entries around it stay, with their ids
        state.events.append("note", {"text": f"unrelated {n}"}, job_id=job.job_id)
    entries = state.client.xrange(keys.job_events(job.job_id))
    ids_before = [i for i, _ in entries]
    quoting = {i for i, fields in entries if any(b"CANARY" in v.upper() for v in fields.values())}

    report = store.forget(ctx, [item.id])

    assert report.disk == {"aof": "rewritten", "rdb": "off"} and report.not_reached == []
    needle = b"cana" + b"ry-7f3k-q9z2"  # not written whole here, so no test file matches it
    left = [
        k.decode()
        for k in state.client.scan_iter(count=1000)
        if needle in (state.client.dump(k) or b"").lower()
    ]
    assert left == []
    on_disk = [
        p.name for p in data_dir.rglob("*") if p.is_file() and needle in p.read_bytes().lower()
    ]
    assert on_disk == []
    # What the forget did not need to touch is still there and readable.
    kept = state.jobs.get(job.job_id)
    assert kept.goal == "open the safe: [forgotten]" and kept.tenant == "acme"
    ids_after = [i for i, _ in state.client.xrange(keys.job_events(job.job_id))]
    assert quoting and set(ids_after) == set(ids_before) - quoting  # only those, same ids
    info = state.client.xinfo_stream(keys.job_events(job.job_id))
    assert info["last-generated-id"] == ids_before[-1]  # later appends stay after it


class _OwnerWritesBetween(redis.Redis):
    """A client after whose first read of a checkpoint its owner writes a newer one."""

    newer = ""
    key = ""

    def hgetall(self, name):  # type: ignore[override]
        values = super().hgetall(name)
        raw = name.decode() if isinstance(name, bytes) else name
        if raw == self.key and self.newer:
            other = redis.Redis(connection_pool=self.connection_pool)
            other.hset(raw, "t-1", self.newer)
            self.newer = ""
        return values


def test_a_checkpoint_its_owner_writes_during_a_forget_is_never_overwritten_with_an_older_one(
    state: State,
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", tenant="acme", user="u"))
    ctx = MemoryContext(tenant="acme", user="u", job=job.job_id, task="t-1", actor="test")
    item = MemoryStore(state.client).write(ctx, _claim(CANARY, "user:u:", SourceKind.USER))
    older = json.dumps({"step": 3, "said": [CANARY]})
    newer = json.dumps({"step": 4, "said": [CANARY, "and then some"]})
    state.client.hset(keys.checkpoints(job.job_id), "t-1", older)
    client = _OwnerWritesBetween(connection_pool=state.client.connection_pool)
    client.key, client.newer = keys.checkpoints(job.job_id), newer

    MemoryStore(client).forget(ctx, [item.id])

    saved = json.loads(state.client.hget(keys.checkpoints(job.job_id), "t-1"))
    assert saved["step"] == 4  # the owner's newer checkpoint, not the one read before it
    assert saved["said"] == ["[forgotten]", "and then some"]  # and redacted too


def test_what_was_forgotten_is_not_written_back_into_a_memory_file(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g", tenant="acme", user="u"))
    ctx = MemoryContext(tenant="acme", user="u", job=job.job_id, task="t-1", actor="agent:t-1")
    store, files = MemoryStore(state.client), MemoryFiles(state.client)
    item = store.write(ctx, _claim(CANARY, "user:u:", SourceKind.USER))
    store.forget(ctx, [item.id])
    with pytest.raises(Forgotten):
        files.create(ctx, "/memories/job/notes.md", f"- {CANARY.upper()}\n")
    files.create(ctx, "/memories/job/notes.md", "- the door sticks\n")  # other text: written
    # Not with the operator's rights either (the planner writes its decision log with them).
    with pytest.raises(Forgotten):
        files.create(ctx, "/memories/project/AGENTS.md", f"{CANARY}\n", operator=True)
    # The user says it again on purpose (`memory add`): the fence lifts for it.
    store.write(ctx, _claim(CANARY, "user:u:", SourceKind.USER))
    files.create(ctx, "/memories/job/again.md", f"{CANARY}\n")


def test_a_redacted_artifact_is_a_new_one_and_references_to_the_old_follow_it(
    state: State,
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", tenant="acme", user="u"))
    ctx = MemoryContext(tenant="acme", user="u", job=job.job_id, task="t-1", actor="test")
    item = MemoryStore(state.client).write(ctx, _claim(CANARY, "user:u:", SourceKind.USER))
    artifacts = state.artifacts(job.job_id)
    original = artifacts.put(f"log: {CANARY}\nend", kind="transcript", title="t",
                             trust=Trust.TRUSTED)  # fmt: skip
    stored_at = artifacts.stored_ms()[original.id]

    report = MemoryStore(state.client).forget(ctx, [item.id])

    copy = artifacts.get(original.id)  # a reference to the old id reaches the copy
    assert copy.id != original.id and artifacts.text(original.id) == "log: [forgotten]\nend"
    assert copy.id == "a-" + hashlib.sha256(b"log: [forgotten]\nend").hexdigest()[:16]
    assert copy.sha256 == hashlib.sha256(artifacts.content(copy.id)).hexdigest()
    assert "CANARY" not in copy.preview and keys.artifact(job.job_id, copy.id) in report.redacted
    # The copy in the index at the original's time; the original kept there for its age.
    assert artifacts.stored_ms() == {original.id: stored_at, copy.id: stored_at}
    assert [r.id for r in artifacts.list()] == [copy.id]
    assert state.client.hgetall(keys.artifact(job.job_id, original.id)) == {
        b"redacted_to": copy.id.encode()
    }
    # Storing the original again brings nothing back: the copy stands.
    again = artifacts.put(f"log: {CANARY}\nend", kind="transcript", title="t",
                          trust=Trust.TRUSTED)  # fmt: skip
    assert again == copy
    assert b"CANARY" not in (state.client.dump(keys.artifact(job.job_id, original.id)) or b"")


def test_kept_versions_are_redacted_where_they_are_when_a_new_one_is_pushed_meanwhile(
    state: State,
) -> None:
    from shared_state.memory.quotes import Quotes, scrub_list

    key = keys.memory_file_versions("acme", "job:j-1:", "notes.md")
    state.client.rpush(key, f"v1 {CANARY}", "v2 clean")

    class Pushes(redis.Redis):
        """Another writer pushes a version right after the forget read the list."""

        def lrange(self, name, start, end):  # type: ignore[override]
            values = super().lrange(name, start, end)
            redis.Redis(connection_pool=self.connection_pool).lpush(key, "v3 newest")
            return values

    scrub_list(Pushes(connection_pool=state.client.connection_pool), key.encode(),
               Quotes([CANARY]))  # fmt: skip
    assert state.client.lrange(key, 0, -1) == [b"v3 newest", b"v1 [forgotten]", b"v2 clean"]
