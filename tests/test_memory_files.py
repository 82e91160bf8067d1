"""Memory files under /memories on a real server: paths, CAS, versions, scopes."""

from __future__ import annotations

import threading

import pytest

from shared_state import State
from shared_state.errors import FileChanged, MemoryNotFound, MemoryRefused, SecretInMemory
from shared_state.memory import MemoryContext, MemoryStore
from shared_state.memory.files import MAX_BYTES, MemoryFiles, resolve, sha256

CTX = MemoryContext(tenant="acme", user="alice", job="j-1", task="t-1", actor="coder-w1")

HOSTILE = [
    "", "/", "memories/job/a", "/memory/job/a", "/memoriesX/job/a", "/etc/passwd",
    "/memories", "/memories/", "/memories/other/a", "/memories/job/../user/a",
    "/memories/job/..", "/memories/job/./a", "/memories/job//a", "/memories/../etc/passwd",
    "/memories/job/a/../../../x", "/memories/job/.hidden", "/memories/job/a/.", "/memories/job/..a",
    "/memories/job\\a", "/memories/job/a\\..\\..\\x", "/memories/job/a\x00b", "/memories/job/a\nb",
    "/memories/job/a\rb", "/memories/job/a\tb", "/memories/job/\x1b[31m", "/memories/job/a\x7f",
    "/memories/job/%2e%2e/x", "/memories/job/%2E%2E%2Fx", "/memories/job/a%00", "/memories/job/%5c",
    "/memories/job/\u2024\u2024/x", "/memories/job/\uff0e\uff0e/x", "/memories/job/a\u2215b",
    "/memories/job/a\u2044b", "/memories/job/\u00e9", "/memories/job/e\u0301",
    "/memories/job/a\u200bb", "/memories/job/\ufeffa", "/memories/job/a:b", "/memories/job/a*b",
    "/memories/job/a?b", "/memories/job/a|b", "/memories/job/<a>", "/memories/job/a\"b",
    "/memories/job/~", "/memories/job/~/x", "/memories/job/$HOME", "/memories/job/a;rm",
    "/memories/job/ a", "/memories/job/a ", "/memories/job/" + "x" * 101,
    "/memories/job/" + "/".join("d" * 9), "/memories/job/a/b/c/d/e/f/g/h/i",
    "//memories/job/a", "/memories/./job/a", "/memories/job/a/../b", "/MEMORIES/job/a",
    "/memories/Job/a", "/memories/job/{acme}", "/memories/job/a}b", "/memories/job/file:1",
    "\\memories\\job\\a", "/memories/job/\u0000", "/memories/user/../../app/x",
    "/memories/project/../job/a", "file:///memories/job/a", "/memories/job/a/\u2e2e",
]  # fmt: skip


def test_at_least_sixty_hostile_paths_are_all_refused(state: State) -> None:
    assert len(HOSTILE) >= 60
    files = MemoryFiles(state.client)
    escaped = []
    for path in HOSTILE:
        try:
            resolve(CTX, path)
            files.create(CTX, path, "x")
            escaped.append(path)
        except MemoryRefused:
            pass
    assert escaped == []
    # Nothing was written anywhere, in any tenant.
    assert list(state.client.scan_iter(match="rf:mem:*file*")) == []


def test_paths_map_to_the_contexts_own_scopes() -> None:
    assert str(resolve(CTX, "/memories/project/AGENTS.md").scope) == "app:"
    assert str(resolve(CTX, "/memories/user/prefs.md").scope) == "user:alice:"
    assert str(resolve(CTX, "/memories/job/notes.md").scope) == "job:j-1:"
    assert str(resolve(CTX, "/memories/scratch/todo.md").scope) == "temp:t-1:"
    assert resolve(CTX, "/memories/job/sub dir/a-b_c.v2.md").relative == "sub dir/a-b_c.v2.md"


def test_create_view_replace_insert_rename_delete(state: State) -> None:
    files = MemoryFiles(state.client)
    v1 = files.create(CTX, "/memories/job/notes.md", "alpha\nbeta\n")
    assert v1.sha256 == sha256("alpha\nbeta\n") and v1.version == 1
    assert "     2\tbeta" in files.view(CTX, "/memories/job/notes.md")
    files.str_replace(CTX, "/memories/job/notes.md", "beta", "gamma")
    files.insert(CTX, "/memories/job/notes.md", 0, "title")
    text, _ = files.read(CTX, "/memories/job/notes.md")
    assert text == "title\nalpha\ngamma\n"
    assert "/memories/job/notes.md" in files.view(CTX, "/memories/job")
    moved = files.rename(CTX, "/memories/job/notes.md", "/memories/job/kept/notes.md")
    assert moved.path == "/memories/job/kept/notes.md"
    assert [v for v, _, _ in files.versions(CTX, "/memories/job/kept/notes.md")] == [2, 1]
    files.delete(CTX, "/memories/job/kept/notes.md")
    with pytest.raises(MemoryNotFound):
        files.read(CTX, "/memories/job/kept/notes.md")


def test_str_replace_needs_exactly_one_occurrence(state: State) -> None:
    files = MemoryFiles(state.client)
    files.create(CTX, "/memories/job/a.md", "x x")
    with pytest.raises(MemoryRefused, match="occurs 2 times"):
        files.str_replace(CTX, "/memories/job/a.md", "x", "y")
    with pytest.raises(MemoryRefused, match="occurs 0 times"):
        files.str_replace(CTX, "/memories/job/a.md", "z", "y")


def test_a_write_with_a_stale_sha256_is_refused(state: State) -> None:
    files = MemoryFiles(state.client)
    first = files.create(CTX, "/memories/job/a.md", "one")
    files.create(CTX, "/memories/job/a.md", "two", expected_sha256=first.sha256)
    with pytest.raises(FileChanged, match="changed since it was read"):
        files.create(CTX, "/memories/job/a.md", "three", expected_sha256=first.sha256)
    with pytest.raises(FileChanged):
        files.create(CTX, "/memories/job/new.md", "x", expected_sha256=first.sha256)
    files.create(CTX, "/memories/job/new.md", "x", expected_sha256="")  # "" = must not exist
    with pytest.raises(FileChanged, match="expected no file"):
        files.create(CTX, "/memories/job/new.md", "y", expected_sha256="")


def _race(state: State, barrier: threading.Barrier, text: str, expected: str, out: list) -> None:
    client = state.client.__class__(connection_pool=state.client.connection_pool)
    barrier.wait()
    try:
        MemoryFiles(client).create(CTX, "/memories/job/race.md", text, expected_sha256=expected)
        out.append("ok")
    except FileChanged:
        out.append("refused")


def test_two_concurrent_writers_with_the_same_expected_sha_one_is_refused(
    state: State,
) -> None:
    files = MemoryFiles(state.client)
    base = files.create(CTX, "/memories/job/race.md", "base")
    for round_ in range(20):
        barrier, outcomes = threading.Barrier(2), []
        threads = [
            threading.Thread(
                target=_race,
                args=(state, barrier, f"writer {n} round {round_}", base.sha256, outcomes),
            )
            for n in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["ok", "refused"]
        _, current = files.read(CTX, "/memories/job/race.md")
        base = files.create(CTX, "/memories/job/race.md", "base", expected_sha256=current)


def test_agents_cannot_write_the_project_or_user_memory(state: State) -> None:
    files = MemoryFiles(state.client)
    for path in ("/memories/project/AGENTS.md", "/memories/user/prefs.md"):
        with pytest.raises(MemoryRefused, match="read-only"):
            files.create(CTX, path, "x")
    files.create(CTX, "/memories/project/AGENTS.md", "# rules\n", operator=True)
    assert files.read(CTX, "/memories/project/AGENTS.md")[0] == "# rules\n"


def test_size_and_secrets_are_refused(state: State) -> None:
    files = MemoryFiles(state.client)
    with pytest.raises(MemoryRefused, match="over"):
        files.create(CTX, "/memories/job/big.md", "x" * (MAX_BYTES + 1))
    with pytest.raises(SecretInMemory):
        files.create(CTX, "/memories/job/k.md", "token: ghp_abcdefghijklmnopqrstuvwx123")


def test_tenants_and_jobs_see_only_their_own_files(state: State) -> None:
    files = MemoryFiles(state.client)
    files.create(CTX, "/memories/job/a.md", "acme job one")
    other_tenant = CTX.model_copy(update={"tenant": "globex"})
    other_job = CTX.model_copy(update={"job": "j-2"})
    for ctx in (other_tenant, other_job):
        with pytest.raises(MemoryNotFound):
            files.read(ctx, "/memories/job/a.md")
        assert files.listing(ctx, "/memories/job") == []


def test_forget_redacts_memory_files_that_quoted_the_item(state: State) -> None:
    from shared_state.memory import Claim, Scope, SourceKind

    store, files = MemoryStore(state.client), MemoryFiles(state.client)
    item = store.write(
        CTX,
        Claim(scope=Scope.parse("app:"), text="canary FX-77-QB1", source_kind=SourceKind.USER,
              source_ref="m1"),
    )  # fmt: skip
    files.create(CTX, "/memories/job/n.md", "we learned: canary FX-77-QB1\n")
    files.create(CTX, "/memories/job/n.md", "v2 still mentions FX-77-QB1\n")
    store.forget(CTX, [item.id])
    blobs = [_blob(state, k) for k in state.client.scan_iter(match="rf:mem:*file*")]
    assert blobs and not any(b"FX-77-QB1" in b for b in blobs)


def _blob(state: State, key: bytes) -> bytes:
    kind = state.client.type(key)
    if kind == b"hash":
        return b" ".join(state.client.hvals(key))
    if kind == b"list":
        return b" ".join(state.client.lrange(key, 0, -1))
    if kind == b"set":
        return b" ".join(state.client.smembers(key))
    return b" ".join(state.client.zrange(key, 0, -1))


def test_a_jobs_own_and_scratch_files_go_when_its_records_do(state: State) -> None:
    files, store = MemoryFiles(state.client), MemoryStore(state.client)
    files.create(CTX, "/memories/job/notes.md", "n\n")
    files.create(CTX, "/memories/job/notes.md", "n2\n")  # a version kept too
    files.create(CTX, "/memories/scratch/todo.md", "t\n")
    files.create(CTX, "/memories/project/AGENTS.md", "# keep\n", operator=True)
    store.expire_jobs(["j-1"])
    for path in ("/memories/job/notes.md", "/memories/scratch/todo.md"):
        with pytest.raises(MemoryNotFound):
            files.read(CTX, path)
    assert files.read(CTX, "/memories/project/AGENTS.md")[0] == "# keep\n"
    left = [k.decode() for k in state.client.scan_iter(match="rf:mem:*file*")]
    assert all("app:" in k for k in left), left
