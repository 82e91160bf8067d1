"""Episodes: a finished job's record in its user's memory, built from the records."""

from __future__ import annotations

import numpy as np

from shared_state import JobSpec, Role, Scenario, State, Trust, keys
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory.embed import embedded_text
from shared_state.memory.episodes import record_episode


def _finish(state: State, job_id: str) -> None:
    job = state.jobs.get(job_id)
    claimed = state.tasks.claim(job_id, job.root_task, "planner-0", 60_000)
    state.tasks.complete(claimed.claim, "", "done")


def test_a_finished_job_leaves_an_episode_with_its_decisions_facts_and_artifacts(
    state: State,
) -> None:
    job = state.jobs.submit(
        JobSpec(goal="ship the parser", tenant="acme", user="alice", scenario=Scenario.AGENTS)
    )
    store = MemoryStore(state.client)
    ctx = MemoryContext(tenant="acme", user="alice", job=job.job_id, task="t", actor="coder-1")
    scope = Scope.parse(f"job:{job.job_id}:")
    decision = store.write(ctx, Claim(scope=scope, text="use a recursive-descent parser",
                                      kind="decision", source_kind=SourceKind.USER,
                                      source_ref="goal"))  # fmt: skip
    fact = store.write(ctx, Claim(scope=scope, text="the grammar has 14 rules", kind="fact",
                                  source_kind=SourceKind.AGENT, source_ref="step 4"))  # fmt: skip
    report = state.artifacts(job.job_id).put("report", kind="report", trust=Trust.TRUSTED)
    _finish(state, job.job_id)
    state.jobs.finalize(job.job_id)

    alice = MemoryContext(tenant="acme", user="alice", actor="planner")
    (episode,) = [i for i in store.items(alice) if i.kind == "episode"]
    assert str(episode.scope) == "user:alice:"
    assert episode.provenance.source_kind is SourceKind.SYSTEM
    assert "Goal: ship the parser" in episode.text and "(succeeded)" in episode.text
    assert "- use a recursive-descent parser [user, goal]" in episode.text
    assert "- the grammar has 14 rules [agent, step 4]" in episode.text
    assert f"report {report.id}" in episode.text
    assert set(episode.provenance.derived_from) == {decision.id, fact.id}
    # embedded as it was written, once: no process that recalls it embeds it again
    stored = state.client.hmget(keys.memory_item("acme", episode.id), "vec_model", "vec")
    assert stored[0] == b"all-MiniLM-L6-v2"
    # by what it says, not by the ids it cites (hex means nothing to an embedder, and an
    # embedding costs what it has tokens)
    meant = embedded_text(episode.key, episode.text)
    assert meant == (
        "Episode (succeeded). Goal: ship the parser\nDecisions:\n"
        "- use a recursive-descent parser\nFacts:\n- the grammar has 14 rules"
    )
    embedder = state.memory.embedder  # what wrote it, as the job retired
    assert embedder is not None
    assert stored[1] == embedder.embed([meant])[0].astype(np.float32).tobytes()
    # written once: retiring again adds nothing
    state.jobs.finalize(job.job_id)
    assert len([i for i in store.items(alice, include_expired=True) if i.kind == "episode"]) == 1
    # forgetting what it quotes forgets the episode
    store.forget(alice, [fact.id])
    assert [i for i in store.items(alice) if i.kind == "episode"] == []


def test_a_failed_job_leaves_an_episode_saying_why(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="doomed", max_attempts=1, scenario=Scenario.AGENTS))
    claimed = state.tasks.claim(job.job_id, job.root_task, "planner-0", 60_000)
    state.tasks.fail(claimed.claim, "the provider is unreachable", retryable=False)
    state.jobs.finalize(job.job_id)
    episode = record_episode(MemoryStore(state.client), state.jobs.get(job.job_id))
    assert episode is not None and "(failed)" in episode.text
    assert "the provider is unreachable" in episode.text
    assert Role.PLANNER.value in episode.text  # the reason names the dead task's role


def test_a_scripted_behaviour_job_leaves_no_episode(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="noop", scenario=Scenario.NOOP))
    _finish(state, job.job_id)
    state.jobs.finalize(job.job_id)
    assert record_episode(MemoryStore(state.client), state.jobs.get(job.job_id)) is None
    assert list(state.client.scan_iter(match="rf:mem:*item*")) == []


def test_a_job_whose_episode_is_refused_still_retires(state: State) -> None:
    store = MemoryStore(state.client)
    ctx = MemoryContext(tenant="default", user="default", actor="cli:t")
    said = "ship the export to the eu bucket"
    item = store.write(
        ctx,
        Claim(scope=Scope.parse("app:"), text=said, source_kind=SourceKind.USER, source_ref="m"),
    )
    store.forget(ctx, [item.id])
    job = state.jobs.submit(JobSpec(goal=said, scenario=Scenario.AGENTS, max_attempts=1))
    claimed = state.tasks.claim(job.job_id, job.root_task, "planner-0", 60_000)
    state.tasks.fail(claimed.claim, "no", retryable=False)
    assert state.jobs.finalize(job.job_id)  # the episode would quote it: not written, no error
    assert not state.client.sismember("rf:jobs:active", job.job_id)
    assert [i for i in store.items(ctx, include_expired=True) if i.kind == "episode"] == []
