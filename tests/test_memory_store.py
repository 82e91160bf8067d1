"""Long-term memory on a real server: scopes, provenance, promotion, conflicts, expiry, forget."""

from __future__ import annotations

import json
import random
import threading
import zlib

import numpy as np
import pytest
from pydantic import ValidationError

from shared_state import JobSpec, State, keys
from shared_state.artifacts import Trust
from shared_state.errors import (
    Forgotten,
    MemoryNotFound,
    MemoryRefused,
    NoTenant,
    PromotionRefused,
    SecretInMemory,
)
from shared_state.memory import (
    Claim,
    Evidence,
    MemoryContext,
    MemoryStore,
    Scope,
    SourceKind,
)
from shared_state.memory.quotes import Quotes
from shared_state.memory.recall import Recall

APP = Scope.parse("app:")


def ctx(tenant: str = "acme", *, user: str = "alice", job: str = "j-1", task: str = "t-1"):
    return MemoryContext(tenant=tenant, user=user, job=job, task=task, actor="coder-w1")


def claim(text: str, scope: str = "job:j-1:", source: SourceKind = SourceKind.AGENT, **kw):
    return Claim(scope=Scope.parse(scope), text=text, source_kind=source, source_ref="msg 3", **kw)


@pytest.fixture
def store(state: State) -> MemoryStore:
    return MemoryStore(state.client)


def test_a_context_without_a_tenant_is_refused_before_any_read(store: MemoryStore) -> None:
    with pytest.raises(NoTenant):
        MemoryContext(tenant="", user="alice")
    with pytest.raises(ValidationError):
        MemoryContext(tenant="acme}:x", user="alice")  # cannot break out of the key's hash tag


def test_every_key_of_an_item_embeds_its_tenant(store: MemoryStore, state: State) -> None:
    store.write(ctx("acme"), claim("the api listens on port 8443", key="api.port"))
    names = [k.decode() for k in state.client.scan_iter(match="rf:mem:*")]
    assert names
    assert all(n.startswith("rf:mem:{acme}:") or n == keys.MEMORY_TENANTS for n in names)


def test_a_write_takes_job_task_and_actor_from_the_context_and_time_from_redis(
    store: MemoryStore, state: State
) -> None:
    before = state.client.time()[0] * 1000
    item = store.write(ctx(), claim("ACCT-7Q2X9 is the billing account", key="billing"))
    p = item.provenance
    assert (p.job, p.task, p.actor, p.source_kind, p.source_ref) == (
        "j-1",
        "t-1",
        "coder-w1",
        SourceKind.AGENT,
        "msg 3",
    )
    assert p.observed_at >= before
    assert p.authority == 1  # an agent's conclusion
    assert item.tenant == "acme" and item.user == "alice"


def test_a_write_without_provenance_is_refused(store: MemoryStore) -> None:
    with pytest.raises(ValidationError, match="source_ref"):
        Claim(scope=APP, text="x", source_kind=SourceKind.USER, source_ref="")
    anonymous = MemoryContext(tenant="acme", user="alice", job="j-1")
    with pytest.raises(MemoryRefused, match="provenance actor"):
        store.write(anonymous, claim("the build uses python 3.11"))


def test_authority_above_the_source_is_refused(store: MemoryStore) -> None:
    with pytest.raises(MemoryRefused, match="authority 4 is above"):
        store.write(ctx(), claim("tests pass", authority=4))


def test_secrets_are_refused_at_write(store: MemoryStore) -> None:
    for text in [
        "the key is sk-proj-abcdefghijklmnop1234",
        "use ghp_abcdefghijklmnopqrstuvwxyz0123 for the mirror",
        "password=hunter2hunter2",
        "AKIAABCDEFGHIJKLMNOP is the deploy key id",
    ]:
        with pytest.raises(SecretInMemory):
            store.write(ctx(), claim(text))
    assert store.items(ctx(), operator=True) == []


def test_scopes_of_other_jobs_tasks_and_users_cannot_be_written(store: MemoryStore) -> None:
    with pytest.raises(MemoryRefused, match="not this job's"):
        store.write(ctx(), claim("x", scope="job:j-2:"))
    with pytest.raises(MemoryRefused, match="not this task's"):
        store.write(ctx(), claim("x", scope="temp:t-9:"))
    with pytest.raises(MemoryRefused, match="not this job's user"):
        store.write(ctx(), claim("x", scope="user:bob:", source=SourceKind.USER))


def test_an_agent_or_tool_claim_cannot_be_written_straight_to_a_wide_scope(
    store: MemoryStore,
) -> None:
    for source in (SourceKind.AGENT, SourceKind.TOOL):
        with pytest.raises(PromotionRefused, match="stays job-scoped"):
            store.write(ctx(), claim("x", scope="app:", source=source))
    item = store.write(ctx(), claim("deploys go out on tuesdays", "app:", SourceKind.USER))
    assert str(item.scope) == "app:"


def test_reads_see_only_the_contexts_scopes(store: MemoryStore) -> None:
    mine = store.write(ctx(job="j-1"), claim("job one fact", scope="job:j-1:"))
    other_job = ctx(job="j-2", task="t-2")
    assert store.items(other_job) == []
    with pytest.raises(MemoryNotFound):
        store.get(other_job, mine.id)
    bob = MemoryContext(tenant="acme", user="bob", job="j-1", actor="x")
    alice_item = store.write(ctx(), claim("alice likes tabs", "user:alice:", SourceKind.USER))
    with pytest.raises(MemoryNotFound):
        store.get(bob, alice_item.id)
    assert store.get(ctx(), alice_item.id).text == "alice likes tabs"


def test_temp_items_are_the_tasks_own_and_expire(store: MemoryStore) -> None:
    item = store.write(ctx(task="t-1"), claim("scratch", scope="temp:t-1:"))
    assert item.valid_until > item.provenance.observed_at
    with pytest.raises(MemoryNotFound):
        store.get(ctx(task="t-2"), item.id)


# ------------------------------------------------------------------ conflicts

# (earlier source, later source) -> which one is current afterwards, and the other's status.
CONFLICTS = [
    (SourceKind.AGENT, SourceKind.AGENT, "later", "superseded"),
    (SourceKind.AGENT, SourceKind.USER, "later", "superseded"),
    (SourceKind.USER, SourceKind.AGENT, "earlier", "contested"),
    (SourceKind.USER, SourceKind.USER, "later", "superseded"),
    (SourceKind.VERIFIER, SourceKind.USER, "earlier", "contested"),
    (SourceKind.USER, SourceKind.VERIFIER, "later", "superseded"),
    (SourceKind.TOOL, SourceKind.TOOL, "later", "superseded"),
    (SourceKind.SYSTEM, SourceKind.TOOL, "earlier", "contested"),
    (SourceKind.TOOL, SourceKind.SYSTEM, "later", "superseded"),
    (SourceKind.VERIFIER, SourceKind.VERIFIER, "later", "superseded"),
]


@pytest.mark.parametrize(("earlier", "later", "winner", "loser_status"), CONFLICTS)
def test_conflicts_are_settled_by_authority_then_recency_with_history_kept(
    store: MemoryStore,
    earlier: SourceKind,
    later: SourceKind,
    winner: str,
    loser_status: str,
) -> None:
    c = ctx()
    first = store.write(c, claim("the db port is 5432", key="db.port", source=earlier))
    second = store.write(c, claim("the db port is 6543", key="db.port", source=later))
    scope = Scope.parse("job:j-1:")
    current = store.current(c, scope, "db.port")
    expected, other = (second, first) if winner == "later" else (first, second)
    assert current is not None and current.id == expected.id
    history = store.history(c, scope, "db.port")
    assert [h.id for h in history] == [first.id, second.id]  # nothing shrinks
    assert {h.id: h.status for h in history}[other.id] == loser_status
    assert [h.version for h in history] == [1, 2]


def test_a_repeated_claim_adds_no_version(store: MemoryStore) -> None:
    a = store.write(ctx(), claim("the db port is 5432", key="db.port"))
    b = store.write(ctx(), claim("The db port is  5432", key="DB.Port"))
    assert b.id == a.id
    assert len(store.history(ctx(), Scope.parse("job:j-1:"), "db.port")) == 1


def test_an_expired_current_version_gives_way_to_a_weaker_newer_claim(
    store: MemoryStore, state: State
) -> None:
    c = ctx()
    old = store.write(c, claim("port 5432", key="db.port", source=SourceKind.USER, valid_for_s=1))
    state.client.hset(keys.memory_item("acme", old.id), "valid_until", 1)  # long past
    new = store.write(c, claim("port 6543", key="db.port"))
    assert new.status == "current"
    assert store.current(c, Scope.parse("job:j-1:"), "db.port").id == new.id


def test_expired_items_are_not_listed_and_stale_ones_are(store: MemoryStore, state: State) -> None:
    c = ctx()
    gone = store.write(c, claim("short lived", valid_for_s=60))
    stale = store.write(c, claim("check me again", reverify_after_s=60))
    state.client.hset(keys.memory_item("acme", gone.id), "valid_until", 1)
    state.client.hset(keys.memory_item("acme", stale.id), "reverify_after", 1)
    assert [i.id for i in store.items(c)] == [stale.id]
    assert [i.id for i in store.stale(c)] == [stale.id]
    assert store.current(c, gone.scope, gone.key) is None


def test_a_resent_write_with_the_same_id_stores_one_item(store: MemoryStore) -> None:
    a = store.write(ctx(), claim("one"), item_id="m-fixed")
    b = store.write(ctx(), claim("one"), item_id="m-fixed")
    assert a == b
    assert len(store.items(ctx())) == 1


# ------------------------------------------------------------------ promotion


def _verdict(state: State, job_id: str, passes: bool) -> str:
    content = json.dumps(
        {"verdicts": [{"feature_id": "F1", "passes": passes, "evidence": [{"id": "a-log"}]}]}
    )
    ref = state.artifacts(job_id).put(content, kind="verdict", title="verdict", trust=Trust.TRUSTED)
    return ref.id


def test_promotion_needs_evidence_the_users_word_or_repetition(
    store: MemoryStore, state: State
) -> None:
    c = ctx()
    agent = store.write(
        c,
        Claim(scope=Scope.parse("job:j-1:"), text="retries use jittered backoff", key="retry",
              source_kind=SourceKind.AGENT, source_ref="feature list, F1"),
    )  # fmt: skip
    unrelated = store.write(c, claim("the cache is warm", key="cache"))
    with pytest.raises(PromotionRefused, match="does not name feature F1"):
        store.promote(c, unrelated.id, APP, evidence=Evidence(job="j-1", artifact_id=_verdict(
            state, "j-1", passes=True), feature_id="F1"))  # fmt: skip
    with pytest.raises(PromotionRefused, match="seen in 1 job"):
        store.promote(c, agent.id, Scope.parse("user:alice:"))
    failing = _verdict(state, "j-1", passes=False)
    with pytest.raises(PromotionRefused, match="does not pass"):
        store.promote(
            c, agent.id, APP, evidence=Evidence(job="j-1", artifact_id=failing, feature_id="F1")
        )
    passing = _verdict(state, "j-1", passes=True)
    promoted = store.promote(
        c, agent.id, APP, evidence=Evidence(job="j-1", artifact_id=passing, feature_id="F1")
    )
    assert str(promoted.scope) == "app:"
    assert promoted.provenance.source_kind is SourceKind.VERIFIER
    assert promoted.provenance.derived_from == (agent.id,)
    assert promoted.promoted_from == agent.id

    said = store.write(c, claim("use uv, not poetry", source=SourceKind.USER))
    assert store.promote(c, said.id, Scope.parse("user:alice:")).provenance.source_kind == "user"


class Counting:
    """An embedder that keeps every text it was given (a text's vector: seeded by it)."""

    def __init__(self, name: str = "counting") -> None:
        self.name = name
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        rows = [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(8) for t in texts]
        return np.array(rows, dtype=np.float32).reshape(len(texts), 8)


def test_a_promoted_copy_takes_the_originals_vector_without_embedding_it_again(
    state: State,
) -> None:
    embedder = Counting()
    store = MemoryStore(state.client, embedder=embedder)
    c = ctx()
    said = store.write(c, claim("use uv, not poetry", source=SourceKind.USER))
    assert len(embedder.texts) == 1
    copy = store.promote(c, said.id, Scope.parse("user:alice:"))
    assert len(embedder.texts) == 1

    def vector(item_id: str) -> list[bytes | None]:
        return state.client.hmget(keys.memory_item("acme", item_id), "vec_model", "vec")

    assert vector(copy.id) == vector(said.id) and vector(said.id)[1]
    # Another embedder's store cannot use it: it embeds the copy with its own.
    other = Counting("other")
    again = MemoryStore(state.client, embedder=other).promote(c, said.id, APP)
    assert other.texts == embedder.texts and vector(again.id)[0] == b"other"


def test_a_claim_seen_in_enough_jobs_may_be_promoted_but_tool_content_never_to_app(
    store: MemoryStore,
) -> None:
    items = {}
    for n in (1, 2, 3):
        c = ctx(job=f"j-{n}", task=f"t-{n}")
        items[n] = store.write(
            c, claim("the mirror is slow", scope=f"job:j-{n}:", source=SourceKind.TOOL, key="m")
        )
    c3 = ctx(job="j-3", task="t-3")
    with pytest.raises(PromotionRefused, match="only with a passing check"):
        store.promote(c3, items[3].id, APP)
    promoted = store.promote(c3, items[3].id, Scope.parse("user:alice:"))
    assert str(promoted.scope) == "user:alice:"


def test_expiry_with_the_job_keeps_what_was_promoted(store: MemoryStore) -> None:
    c = ctx()
    said = store.write(c, claim("ship on fridays never", source=SourceKind.USER))
    promoted = store.promote(c, said.id, Scope.parse("user:alice:"))
    scratch = store.write(c, claim("temp note", scope="temp:t-1:"))
    assert store.expire_jobs(["j-1"]) == 2
    with pytest.raises(MemoryNotFound):
        store.get(c, said.id)
    with pytest.raises(MemoryNotFound):
        store.get(c, scratch.id)
    assert store.get(c, promoted.id).text == "ship on fridays never"


# --------------------------------------------------------------------- forget


def test_forget_removes_the_item_and_everything_derived_and_prints_it(
    store: MemoryStore, state: State
) -> None:
    c = ctx()
    root = store.write(c, claim("canary ZX-41-QQ9 lives here", source=SourceKind.USER, key="k"))
    promoted = store.promote(c, root.id, Scope.parse("user:alice:"))
    episode = store.write(
        c, claim("episode: used the canary", kind="episode", derived_from=(promoted.id,))
    )
    quoting = store.write(c, claim("note: canary ZX-41-QQ9 lives here, said alice"))
    unrelated = store.write(c, claim("the sky is blue"))
    report = store.forget(c, [root.id])
    assert {r.id for r in report.removed} == {root.id, promoted.id, episode.id, quoting.id}
    assert [i.id for i in store.items(c, operator=True)] == [unrelated.id]


def test_a_forgotten_text_cannot_be_written_back_by_a_worker_that_read_it(
    store: MemoryStore,
) -> None:
    c = ctx()
    item = store.write(c, claim("the vault path is /srv/vault/7731", key="vault"))
    read_before = store.get(c, item.id)
    store.forget(c, [item.id])
    with pytest.raises(Forgotten):
        store.write(c, claim(read_before.text, key="vault"))
    with pytest.raises(Forgotten):
        store.write(c, claim(f"remember: {read_before.text}!"))
    with pytest.raises(Forgotten):
        store.write(c, claim("derived", derived_from=(item.id,)))
    # The user may say it again on purpose.
    again = store.write(c, claim(read_before.text, source=SourceKind.USER, key="vault"))
    assert again.status == "current"


def test_forget_redacts_the_tenants_job_records_that_quoted_it(
    store: MemoryStore, state: State
) -> None:
    job = state.jobs.submit(JobSpec(goal="audit", tenant="acme", user="alice"))
    other = state.jobs.submit(JobSpec(goal="audit", tenant="globex", user="alice"))
    c = ctx(job=job.job_id)
    canary = "canary Q7-CANARY-99X must go"
    item = store.write(c, claim(canary, scope=f"job:{job.job_id}:", source=SourceKind.USER))
    state.artifacts(job.job_id).put(
        f"transcript ... {canary} ...", kind="transcript", title="t", trust=Trust.TRUSTED
    )
    state.client.hset(keys.checkpoints(job.job_id), "t-1", json.dumps({"ids": ["Q7-CANARY-99X"]}))
    state.client.xadd(keys.job_events(job.job_id), {"event": "note", "text": canary})
    state.client.hset(keys.checkpoints(other.job_id), "t-1", canary)  # another tenant's
    report = store.forget(c, [item.id])
    assert report.redacted
    hits = [
        k.decode()
        for k in state.client.scan_iter(match=f"rf:{{{job.job_id}}}:*")
        if b"Q7-CANARY-99X" in _dump(state, k)
    ]
    assert hits == []
    assert state.client.hget(keys.checkpoints(other.job_id), "t-1").decode() == canary


def _dump(state: State, key: bytes) -> bytes:
    kind = state.client.type(key).decode()
    if kind == "hash":
        return b" ".join(b"%s=%s" % kv for kv in state.client.hgetall(key).items())
    if kind == "stream":
        return b" ".join(v for _, f in state.client.xrange(key) for v in f.values())
    if kind == "string":
        return state.client.get(key)
    return b""


def test_forget_user_removes_all_of_that_users_memory_only(store: MemoryStore) -> None:
    alice = ctx(user="alice")
    bob = MemoryContext(tenant="acme", user="bob", job="j-2", task="t-2", actor="x")
    store.write(alice, claim("alice one", "user:alice:", SourceKind.USER))
    store.write(alice, claim("alice two"))
    kept = store.write(bob, claim("bob one", "user:bob:", SourceKind.USER))
    report = store.forget_user(alice, "alice")
    assert len(report.removed) == 2
    assert [i.id for i in store.items(alice, operator=True)] == [kept.id]


def test_forgetting_the_current_version_makes_the_best_remaining_one_current(
    store: MemoryStore,
) -> None:
    c = ctx()
    verified = store.write(c, claim("port 5432", key="db.port", source=SourceKind.VERIFIER))
    contested = store.write(c, claim("port 6543", key="db.port"))
    assert contested.status == "contested"
    store.forget(c, [verified.id])
    assert store.current(c, Scope.parse("job:j-1:"), "db.port").id == contested.id


# ------------------------------------------------------------ tenant isolation


def test_a_randomized_two_tenant_workload_with_colliding_ids_never_crosses(
    state: State,
) -> None:
    store, recall = MemoryStore(state.client), Recall(MemoryStore(state.client))
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "port", "region", "deploy", "cache"]
    tenants = {
        t: MemoryContext(tenant=t, user="u1", job="j-1", task="t-1", actor="w")
        for t in ("red", "blue")
    }
    written: dict[str, set[str]] = {"red": set(), "blue": set()}
    cross = 0
    for step in range(300):
        tenant = rng.choice(["red", "blue"])
        c = tenants[tenant]
        op = rng.random()
        item_id = f"m-{rng.randrange(40):04d}"  # the same ids in both tenants
        if op < 0.5:
            text = f"{tenant} {' '.join(rng.sample(words, 3))} {step}"
            scope = rng.choice(["app:", "user:u1:", "job:j-1:"])
            try:
                store.write(c, claim(text, scope, SourceKind.USER), item_id=item_id)
                written[tenant].add(item_id)
            except Forgotten:
                pass
        elif op < 0.7:
            try:
                got = store.get(c, item_id)
                cross += got.tenant != tenant or not got.text.startswith(tenant)
            except MemoryNotFound:
                pass
        elif op < 0.9:
            query = rng.choice([*words, "", "   ", "red", "blue"])
            for hit in recall.search(c, query, k=10):
                cross += hit.item.tenant != tenant or not hit.item.text.startswith(tenant)
        else:
            try:
                report = store.forget(c, [item_id])
                cross += any(r.id not in written[tenant] for r in report.removed)
            except MemoryNotFound:
                pass
    for tenant, c in tenants.items():
        cross += sum(not i.text.startswith(tenant) for i in store.items(c, operator=True))
    assert cross == 0
    assert written["red"] and written["blue"]


def test_two_writers_racing_on_one_chain_leave_exactly_one_current(state: State) -> None:
    c = ctx()
    barrier = threading.Barrier(8)

    def write(n: int) -> None:
        store = MemoryStore(state.client.__class__(connection_pool=state.client.connection_pool))
        barrier.wait()
        store.write(c, claim(f"port {5000 + n}", key="db.port"))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = MemoryStore(state.client).history(c, Scope.parse("job:j-1:"), "db.port")
    assert len(history) == 8
    assert sum(h.status == "current" for h in history) == 1
    assert history[-1].status == "current"  # equal authority: the last write in the chain wins


def test_pruning_an_expired_job_drops_its_job_and_temp_items(
    store: MemoryStore, state: State
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", tenant="acme", user="alice"))
    c = ctx(job=job.job_id)
    own = store.write(c, claim("job fact", scope=f"job:{job.job_id}:"))
    scratch = store.write(c, claim("scratch", scope="temp:t-1:"))
    kept = store.write(c, claim("app fact", scope="app:", source=SourceKind.USER))
    state.client.zadd(keys.EXPIRING_JOBS, {job.job_id: 1})  # its records expired long ago
    assert state.jobs.prune_index(batch=0) == 1
    assert [i.id for i in store.items(c, operator=True)] == [kept.id]
    for gone in (own, scratch):
        with pytest.raises(MemoryNotFound):
            store.get(c, gone.id, operator=True)


def test_forget_never_touches_ids_or_the_fields_records_find_each_other_by(
    store: MemoryStore, state: State
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", tenant="acme", user="alice"))
    root = job.root_task  # an id an episode's sources quote
    c = ctx(job=job.job_id)
    item = store.write(
        c, claim(f"decided by {root} at step 2: ship it", scope=f"job:{job.job_id}:")
    )
    store.forget(c, [item.id])
    assert state.jobs.get(job.job_id).root_task == root
    assert state.client.sismember(keys.tasks(job.job_id), root)
    assert state.tasks.get(job.job_id, root).task_id == root
    assert state.events.read(job.job_id)  # its lifecycle events stay


def test_a_resent_forget_still_redacts_what_quoted_the_item(
    store: MemoryStore, state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared_state.memory import store as store_module

    job = state.jobs.submit(JobSpec(goal="g", tenant="acme", user="alice"))
    c = ctx(job=job.job_id)
    item = store.write(c, claim("the vault code is QX77812", scope=f"job:{job.job_id}:"))
    state.client.hset(keys.checkpoints(job.job_id), "t-1", '{"ids": ["QX77812"]}')
    real = store_module.run_plain

    def twice(client, name, keys_, args):  # the reply to the first call was lost
        if name == "memoryForget":
            real(client, name, keys_, args)
        return real(client, name, keys_, args)

    monkeypatch.setattr(store_module, "run_plain", twice)
    report = store.forget(c, [item.id])
    assert b"QX77812" not in state.client.hget(keys.checkpoints(job.job_id), "t-1")
    assert report.redacted


def test_a_short_forgotten_item_quoted_inside_a_longer_text_is_refused(store: MemoryStore) -> None:
    c = ctx()
    item = store.write(c, claim("door code is 4417"))
    store.forget(c, [item.id])
    with pytest.raises(Forgotten):
        store.write(c, claim("remember: the door code is 4417 for the lab"))
    assert store.write(c, claim("the lab door has a keypad")).status == "current"


def test_repeating_a_claim_renews_it_once_expired_and_a_stronger_source_confirms_it(
    store: MemoryStore, state: State
) -> None:
    c = ctx()
    first = store.write(c, claim("db port is 5432", key="db.port", valid_for_s=60))
    state.client.hset(keys.memory_item("acme", first.id), "valid_until", 1)
    renewed = store.write(c, claim("db port is 5432", key="db.port"))
    assert renewed.id != first.id and renewed.status == "current"
    confirmed = store.write(c, claim("db port is 5432", key="db.port", source=SourceKind.USER))
    assert confirmed.id != renewed.id and confirmed.provenance.authority == 3
    again = store.write(c, claim("db port is 5432", key="db.port"))  # weaker: a repeat
    assert again.id == confirmed.id


def test_forgetting_a_short_text_removes_it_alone_and_fences_no_word(
    store: MemoryStore, state: State
) -> None:
    job = state.jobs.submit(JobSpec(goal="slugs", tenant="acme", user="bob"))
    c = ctx(user="bob", job=job.job_id)
    short = store.write(c, claim("y", "user:bob:", SourceKind.USER))
    kept = [
        store.write(
            c, claim("the deploy region is eu-west-1", key="region", scope=f"job:{job.job_id}:")
        ),
        store.write(c, claim("say yes to every question", key="yes", scope=f"job:{job.job_id}:")),
    ]
    code = state.artifacts(job.job_id).put("def slugify(text): ...", kind="code", title="slug.py")
    report = store.forget(c, [short.id])
    assert [r.id for r in report.removed] == [short.id]
    assert report.unsearched == [short.id] and report.redacted == []
    assert {i.id for i in store.items(c, operator=True)} == {i.id for i in kept}
    assert state.artifacts(job.job_id).text(code.id) == "def slugify(text): ..."
    # Its one word is not fenced: later writes that hold it are not refused.
    store.write(c, claim("y is the axis we plot", key="axis", scope=f"job:{job.job_id}:"))


def test_a_quote_is_matched_whole_never_inside_a_longer_word_or_identifier(
    store: MemoryStore, state: State
) -> None:
    job = state.jobs.submit(JobSpec(goal="regions", tenant="acme", user="alice"))
    c = ctx(job=job.job_id)
    region = store.write(
        c, claim("deploy region eu-west-1", key="region", scope=f"job:{job.job_id}:")
    )
    other = store.write(
        c, claim("the failover region is eu-west-10", key="failover", scope=f"job:{job.job_id}:")
    )
    notes = state.artifacts(job.job_id).put(
        "moved to eu-west-1 today; eu-west-10 and xeu-west-1 stay", kind="notes", title="n"
    )
    report = store.forget(c, [region.id])
    assert [r.id for r in report.removed] == [region.id]
    assert [i.id for i in store.items(c, operator=True)] == [other.id]
    assert state.artifacts(job.job_id).text(notes.id) == (
        "moved to [forgotten] today; eu-west-10 and xeu-west-1 stay"
    )
    # As JSON writes text: after an escape, and with "_" running on, it is still found.
    state.client.hset(
        keys.checkpoints(job.job_id),
        "t-1",
        json.dumps({"notes": "Memory:\n\u201cdeploy region eu-west-1\u201d", "f": "eu-west-1_a"}),
    )
    store.write(
        c, claim("deploy region eu-west-1", f"job:{job.job_id}:", SourceKind.USER, key="r2")
    )
    again = next(i for i in store.items(c, operator=True) if i.key == "r2")
    store.forget(c, [again.id])
    kept = state.client.hget(keys.checkpoints(job.job_id), "t-1").decode()
    assert "eu-west-1" not in kept.replace("eu-west-10", "") and kept.count("[forgotten]") == 2


def test_a_dry_run_reports_what_the_forget_then_does_and_changes_nothing(
    store: MemoryStore, state: State
) -> None:
    job = state.jobs.submit(JobSpec(goal="audit", tenant="acme", user="alice"))
    c = ctx(job=job.job_id)
    root = store.write(
        c, claim("canary ZX-41-QQ9 lives here", f"job:{job.job_id}:", SourceKind.USER, key="k")
    )
    store.write(c, claim("note: canary ZX-41-QQ9 lives here, said alice", f"job:{job.job_id}:"))
    state.artifacts(job.job_id).put("saw ZX-41-QQ9", kind="notes", title="n")
    everything = {k: _dump(state, k) for k in state.client.scan_iter()}
    dry = store.forget(c, [root.id], dry_run=True)
    assert dry.dry_run and len(dry.removed) == 2 and dry.redacted
    assert {k: _dump(state, k) for k in state.client.scan_iter()} == everything
    done = store.forget(c, [root.id])
    assert (done.removed, done.redacted) == (dry.removed, dry.redacted)


def test_where_several_quotes_start_the_longest_is_redacted_whole() -> None:
    # ``long`` and its 600-character cut both match where it starts; a longer text of
    # another shape comes first among the needles. The whole of ``long`` must go.
    long = "deploy notes for ops: " + "rotate the canary weekly, " * 30 + "then ship."
    longer = "incident log " * 90 + "7"
    quotes = Quotes([long, longer])
    # The cut ends a word (a quote of it stands on its own), the whole text does not.
    assert long[599].isalnum() and long[600] == " " and not long[-1].isalnum()
    assert quotes.scrub(f"before {long} after") == "before [forgotten] after"
