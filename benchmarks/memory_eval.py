"""Memory evaluation: long-term memory held to the claims it makes, on a real redis-server.

Deterministic (seeded, no model), one run, a table or ``--json``:

  jobs         a sequence of related jobs over one project, each needing some of
               its facts, run twice side by side: with memory (each job's facts
               noted into its job memory, its episode written when it ends, the
               next job's reference recalled from the user's and app scopes, as a
               task does) and without. A scripted policy answers from a fact
               present verbatim in its prompt and otherwise reads the file that
               holds it (one call, ~3k tokens) and notes it. Reported per job:
               calls, input tokens, facts reused.
  decision     the audit workload (``audit.py``): the user's decision stated at
               step 6, then 120 steps of ~500-line files; after every call in
               which the context engine rolled turns out or cleared results, is
               the decision verbatim in that call? redfleet beside a sliding
               window and a rolling summary, in the same run.
  interrupted  agents jobs (the scripted demo) through a real fleet, a coder
               worker SIGKILLed in each at a journal failpoint (after an intent,
               after an effect; ``workers/failpoints.py``): the job's outcome
               after its task is reclaimed and resumed from its records, and
               duplicated effects — a task that succeeded twice, a child spawned
               twice (goal: all succeed, 0 duplicates; the journal makes file
               writes idempotent by construction, see tests/test_agent_jobs.py).
  stale        seeded superseded, contested, expired and due-for-re-verification
               items, each the best keyword match for its probe, against one
               current item per topic: how many of the bad ones are recalled
               (goal 0) and how many current ones are (goal all).
  canary       a canary item, a promoted copy, an episode derived from it, an
               item quoting it, and the tenant's job records quoting it (a
               transcript artifact, a working-state checkpoint, job and global
               events, a memory file and its versions); after ``forget``, every
               key of the server is read and the canary counted (goal 0).
  tenants      two tenants with the same item ids, texts and users; probes
               from one tenant by id, by the other's words, by empty and
               punctuation-only queries, list and history: results that belong
               to the other tenant (goal 0).
  meaning      recall quality on a hand-written corpus (``recall_corpus``):
               2,010 items — 120 facts a team stores and 1,890 on-topic
               distractors — and 240 questions, two per fact, one sharing
               words with it and one paraphrased with no word in common;
               recall@5 and MRR by keywords (BM25), by meaning (the
               embedder) and by both fused, side by side; and 100 questions
               naming an account id among 300 alike sentences (recall@1).
  episodes     a job of each fact's topic notes the fact, stores a report and
               ends, and as many jobs note an on-topic distractor; each fact's
               two questions ranked by meaning against the episodes' vectors
               as stored (what an episode says) and against vectors of their
               whole text, ids included (as before), side by side: recall@1,
               @5, MRR, tokens and CPU per episode (the ids are a run's own:
               the whole text's figures move a little from run to run).
  scale        one tenant of 1,000, 10,000 and 50,000 items: hybrid recall
               latency (p50/p95, wall, and CPU per query), quiet and with
               another process writing 100 items/s; a new process's first
               search (a CLI call), from the index's snapshot and from the
               items; memory per item in Redis and in one process's index;
               beside a baseline that reads every item and ranks per query.
               The query is embedded by the real embedder; the items carry
               random vectors under its name (embedding 50,000 items would
               take ~17 minutes of CPU, and the index's cost does not depend
               on what the vectors say).

Run:  .venv/bin/python benchmarks/memory_eval.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from functools import partial
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from rich.console import Console
from rich.table import Table

from coordinator import logs
from coordinator.demo import GOAL as DEMO_GOAL
from shared_state import JobSpec, MemoryArtifacts, RedisServer, Scenario, State, keys
from shared_state.artifacts import Trust
from shared_state.errors import MemoryNotFound
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory.embed import MiniLM, embedded_text
from shared_state.memory.files import MemoryFiles
from shared_state.memory.recall import Recall, terms
from workers.context import (
    ContextRequest,
    RollingSummary,
    SlidingWindow,
    WorkingState,
    tokenizer_for,
)
from workers.context import Redfleet as RedfleetStrategy
from workers.tools.memory import RECALLED_HEADER, render_recalled

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the audit workload, beside this file
import recall_corpus
from audit import USER_ITEMS, AuditWorkload

GOALS = {
    "later_jobs_fewer_calls": True,
    "decision_adherence": 1.0,
    "stale_recalled": 0,
    "canary_left": 0,
    "cross_tenant": 0,
    "recall_p95_ms": 50.0,
    "recall_writer_p95_ms": 100.0,
    "hybrid_recall_at_5": 0.9,
    "hybrid_paraphrased_recall_at_5": 0.8,
}
TOPICS = ["database port", "deploy region", "cache size", "retry limit", "log level",
          "queue name", "api timeout", "build image", "lint rule", "release day"]  # fmt: skip


def _claim(text: str, scope: str, source: SourceKind, **kw: Any) -> Claim:
    return Claim(scope=Scope.parse(scope), text=text, source_kind=source, source_ref="eval", **kw)


# The project's facts: what each is, and the file that holds it (read when not remembered).
PROJECT_FACTS = {
    "db": "the billing database listens on port 6432 behind pgbouncer",
    "region": "deploys of the billing service go to eu-west-1 only",
    "lint": "the billing repo lints with ruff, rule set ALL minus D",
    "tests": "billing tests run with pytest -q tests/billing",
    "release": "billing releases go out on tuesdays after 14:00 UTC",
}
# Each job: its goal, and the facts its answer needs.
JOBS = [
    ("add a refund endpoint to the billing service", ["db", "region", "tests"]),
    ("add pagination to the billing invoices list", ["db", "lint", "tests"]),
    ("migrate the billing service to a new database port", ["db", "region", "release"]),
    ("prepare the billing release notes", ["release", "lint", "tests"]),
]
SYSTEM_TOKENS = 1_500  # a role's system prompt and tool schemas
FILE_TOKENS = 3_000  # the file holding a fact, read whole


def eval_jobs(state: State) -> dict[str, Any]:
    """The job sequence with memory and without (each in a tenant of its own)."""
    return {"with_memory": _job_sequence(state, "seq-mem", True),
            "without_memory": _job_sequence(state, "seq-none", False)}  # fmt: skip


def _job_sequence(state: State, tenant: str, remember: bool) -> list[dict[str, Any]]:
    tok = tokenizer_for()
    store = MemoryStore(state.client)
    recall = Recall(store)
    rows = []
    for goal, needs in JOBS:
        job = state.jobs.submit(
            JobSpec(goal=goal, tenant=tenant, user="dev", scenario=Scenario.AGENTS)
        )
        ctx = MemoryContext(tenant=tenant, user="dev", job=job.job_id, task="t-1", actor="eval")
        reference = f"TASK\ngoal of the job: {goal}"
        if remember:  # what AgentTask.recalled puts in the reference
            scopes = [Scope.parse("app:"), Scope.parse("user:dev:")]
            hits = recall.search(ctx, goal, k=5, scopes=scopes)
            if hits:
                items = [h.item for h in hits]
                reference += f"\n{RECALLED_HEADER}\n{render_recalled(items, store.now_ms())}"
        calls, input_tokens, reused, history = 0, 0, 0, 0
        for name in needs:
            fact = PROJECT_FACTS[name]
            if fact in reference:
                reused += 1
                continue
            calls += 1  # read the file that holds it
            input_tokens += SYSTEM_TOKENS + tok.count(reference) + history
            history += FILE_TOKENS
            store.write(ctx, _claim(fact, f"job:{job.job_id}:", SourceKind.AGENT))  # the note
        calls += 1  # the answer
        input_tokens += SYSTEM_TOKENS + tok.count(reference) + history
        claimed = state.tasks.claim(job.job_id, job.root_task, "eval", 60_000)
        state.tasks.complete(claimed.claim, "", "done")
        state.jobs.finalize(job.job_id)  # writes the episode, as a finished job does
        rows.append({"goal": goal, "needs": len(needs), "calls": calls,
                     "input_tokens": input_tokens, "facts_reused": reused})  # fmt: skip
    return rows


def eval_decision(steps: int) -> dict[str, Any]:
    """After every call that dropped, rolled, summarized or cleared something: is the
    user's early decision still verbatim in it?"""
    decision = USER_ITEMS[6][1]
    out = {}
    for name, make in (
        ("redfleet", RedfleetStrategy),
        ("sliding_window", lambda sink: SlidingWindow(window=4)),
        ("rolling_summary", lambda sink: RollingSummary(threshold=20_000, keep=3)),
    ):
        workload, sink = AuditWorkload(steps), MemoryArtifacts()
        strategy = make(sink)
        state, history = WorkingState(goal=workload.goal), []
        sent = cleared = compactions = held = 0
        for step in range(1, steps + 1):
            new = workload.messages(step)
            history += new
            request = ContextRequest(
                system=workload.system(), tools=workload.tools(), state=state, history=history
            )
            prompt = strategy.build(request)
            now_cleared = sum(m.reduced == "cleared" for m in prompt.history)
            reduced = len(prompt.messages) < sent + len(new) or now_cleared > cleared
            sent, cleared = len(prompt.messages), now_cleared
            history, state = prompt.history, prompt.state
            if step > 6 and reduced:
                compactions += 1
                held += decision in prompt.text()
        adherence = round(held / compactions, 4) if compactions else None
        out[name] = {"compactions": compactions, "decision_held": held, "adherence": adherence}
    return out


# Where a coder kills itself (``workers/failpoints.py``), one point per job, round robin.
KILL_POINTS = [
    "journal.after-intent.write_file",
    "journal.after-effect.append_file",
    "journal.after-intent.spawn_subagents",
    "journal.after-effect.write_file",
]


def eval_interrupted(state: State, url: str, jobs: int) -> dict[str, Any]:
    from collections import Counter

    from coordinator.fleet import Fleet, FleetSpec

    rows = []
    with tempfile.TemporaryDirectory(prefix="redfleet-eval-") as tmp:
        for n in range(jobs):
            point, marker = KILL_POINTS[n % len(KILL_POINTS)], Path(tmp) / f"fired-{n}"
            env = (("REDFLEET_PROVIDER", "scripted"), ("REDFLEET_SCRIPT", "demo"),
                   ("REDFLEET_FAILPOINTS", f"{point}@{marker}"))  # fmt: skip
            spec = FleetSpec(planners=1, coders=2, reviewers=1, lease_ms=1_000, worker_env=env)
            fleet = Fleet(state, url, spec, reap_interval_ms=100, redeliver_after_ms=2_000)
            runner = threading.Thread(target=fleet.run, daemon=True)
            runner.start()
            try:
                job = state.jobs.submit(JobSpec(goal=DEMO_GOAL, scenario=Scenario.AGENTS,
                                                tenant=f"kill-{n}"))  # fmt: skip
                deadline = time.monotonic() + 180
                while not state.jobs.get(job.job_id).status.finished:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
            finally:
                fleet.request_stop()
                runner.join(60)
            succeeded = Counter(e.task_id for e in state.events.scan(job.job_id, "task.succeeded"))
            tasks = state.tasks.list(job.job_id)
            spawned = Counter((t.parent_id, t.wave, t.brief) for t in tasks if t.parent_id)
            rows.append(
                {
                    "job_id": job.job_id,
                    "killed_at": point,
                    "killed": marker.exists(),
                    "status": state.jobs.get(job.job_id).status.value,
                    "tasks_succeeded_twice": sum(c > 1 for c in succeeded.values()),
                    "children_spawned_twice": sum(c > 1 for c in spawned.values()),
                }
            )
    return {"jobs": rows, "succeeded": sum(r["status"] == "succeeded" for r in rows),
            "duplicated_effects": sum(r["tasks_succeeded_twice"] + r["children_spawned_twice"]
                                      for r in rows)}  # fmt: skip


def eval_stale(state: State) -> dict[str, Any]:
    store = MemoryStore(state.client)
    recall = Recall(store)
    ctx = MemoryContext(tenant="stale", user="u", job="j-1", task="t-1", actor="eval")
    bad: set[str] = set()
    good: dict[str, str] = {}
    for n, topic in enumerate(TOPICS):
        key = topic.replace(" ", ".")
        # superseded: an older version of the current claim, more words of the probe in it
        old = store.write(
            ctx, _claim(f"{topic} {topic} is {n}-old", "app:", SourceKind.USER, key=key)
        )
        cur = store.write(ctx, _claim(f"{topic} is {n}-new", "app:", SourceKind.USER, key=key))
        # contested: a newer, weaker claim that repeats the probe
        weak = store.write(
            ctx,
            _claim(f"{topic} {topic} {topic} is {n}-weak", "job:j-1:", SourceKind.TOOL, key=key),
        )
        weak_app = store.write(
            ctx,
            _claim(
                f"{topic} {topic} might be {n}-contested",
                "app:",
                SourceKind.SYSTEM,
                key=key,
                authority=1,
            ),
        )
        expired = store.write(
            ctx,
            _claim(f"{topic} {topic} was {n}-expired", "app:", SourceKind.USER, valid_for_s=3600),
        )
        stale = store.write(
            ctx,
            _claim(
                f"{topic} {topic} was {n}-stale", "app:", SourceKind.USER, reverify_after_s=3600
            ),
        )
        state.client.hset(keys.memory_item("stale", expired.id), "valid_until", 1)
        state.client.hset(keys.memory_item("stale", stale.id), "reverify_after", 1)
        assert old.id != cur.id and weak_app.status == "contested"
        bad |= {old.id, weak_app.id, expired.id, stale.id}
        # the job-scoped weak claim is a different chain (job scope): current there, and fine
        good[topic] = cur.id
        bad.discard(weak.id)
    recalled_bad = 0
    found_good = 0
    for topic, cur_id in good.items():
        hits = [h.item.id for h in recall.search(ctx, topic, k=10, scopes=[Scope.parse("app:")])]
        recalled_bad += sum(h in bad for h in hits)
        found_good += cur_id in hits
    return {
        "bad_seeded": len(bad),
        "stale_recalled": recalled_bad,
        "current_found": found_good,
        "topics": len(good),
    }


def eval_canary(state: State) -> dict[str, Any]:
    canary = "CANARY-7F3K-Q9Z2"
    store, files = MemoryStore(state.client), MemoryFiles(state.client)
    job = state.jobs.submit(JobSpec(goal="eval canary", tenant="canary", user="u"))
    ctx = MemoryContext(tenant="canary", user="u", job=job.job_id, task="t-1", actor="eval")
    root = store.write(
        ctx, _claim(f"the vault code is {canary}", "user:u:", SourceKind.USER, key="vault")
    )
    promoted = store.promote(ctx, root.id, Scope.parse("app:"))
    store.write(
        ctx,
        _claim(
            f"episode: opened the vault with {canary}",
            f"job:{job.job_id}:",
            SourceKind.AGENT,
            kind="episode",
            derived_from=(promoted.id,),
        ),
    )
    store.write(ctx, _claim(f"note that {canary} opens it", f"job:{job.job_id}:", SourceKind.AGENT))
    state.artifacts(job.job_id).put(
        f"...tool said {canary}...", kind="transcript", title="turns 1-9", trust=Trust.UNTRUSTED
    )
    state.client.hset(keys.checkpoints(job.job_id), "t-1", json.dumps({"ids": [canary]}))
    for stream in (keys.job_events(job.job_id), keys.EVENTS):
        state.client.xadd(stream, {"event": "note", "job_id": job.job_id, "text": canary})
    files.create(ctx, "/memories/job/notes.md", f"code: {canary}\n")
    files.create(ctx, "/memories/job/notes.md", f"code still {canary}\n")
    before = _count(state, canary)
    report = store.forget(ctx, [root.id])
    return {
        "canary_before": before,
        "canary_left": _count(state, canary),
        "items_removed": len(report.removed),
        "records_redacted": len(report.redacted),
    }


def _count(state: State, needle: str) -> int:
    """Occurrences of ``needle`` in every key of the server, whatever its type."""
    raw, found = needle.encode(), 0
    for key in state.client.scan_iter(count=1000):
        kind = state.client.type(key).decode()
        if kind == "string":
            blobs = [state.client.get(key)]
        elif kind == "hash":
            blobs = [b for kv in state.client.hgetall(key).items() for b in kv]
        elif kind == "list":
            blobs = state.client.lrange(key, 0, -1)
        elif kind == "set":
            blobs = list(state.client.smembers(key))
        elif kind == "zset":
            blobs = state.client.zrange(key, 0, -1)
        elif kind == "stream":
            blobs = [b for _, f in state.client.xrange(key) for kv in f.items() for b in kv]
        else:
            blobs = []
        found += sum(b.count(raw) for b in blobs if b) + key.count(raw)
    return found


def eval_tenants(state: State, rng: random.Random) -> dict[str, Any]:
    store = MemoryStore(state.client)
    recall = Recall(store)
    ctxs = {t: MemoryContext(tenant=t, user="same-user", job="j-same", task="t-same", actor="e")
            for t in ("left", "right")}  # fmt: skip
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    for n in range(200):
        text = f"{' '.join(rng.sample(words, 3))} {n}"
        scope = rng.choice(["app:", "user:same-user:", "job:j-same:"])
        for tenant, ctx in ctxs.items():
            store.write(ctx, _claim(f"{tenant} {text}", scope, SourceKind.USER),
                        item_id=f"m-{n:05d}")  # fmt: skip
    probes = cross = 0
    for tenant, ctx in ctxs.items():
        other = "right" if tenant == "left" else "left"
        queries = [*words, other, "", " ", "?!", "*", f"{other} alpha", "m-00001"]
        for q in queries:
            for hit in recall.search(ctx, q, k=50):
                probes += 1
                cross += hit.item.tenant != tenant or not hit.item.text.startswith(tenant)
        for n in range(200):
            try:
                item = store.get(ctx, f"m-{n:05d}")
                probes += 1
                cross += not item.text.startswith(tenant)
            except MemoryNotFound:
                pass
        for item in store.items(ctx, operator=True):
            probes += 1
            cross += not item.text.startswith(tenant)
        for item in store.history(ctx, Scope.parse("app:"), "", operator=True):
            probes += 1
            cross += not item.text.startswith(tenant)
    return {"probes": probes, "cross_tenant": cross}


def eval_meaning(state: State, quick: bool) -> dict[str, Any]:
    """Recall quality: the hand-written corpus (``recall_corpus``), each question ranked by
    keywords, by meaning and by both fused, side by side; recall@5 and MRR per kind."""
    items, questions = recall_corpus.corpus()
    if quick:  # the facts and a tenth of the distractors
        items = items[: len(recall_corpus.FACTS) + 200]
    store = MemoryStore(state.client)
    ctx = MemoryContext(tenant="meaning", user="u", job="j-1", task="t-1", actor="eval")
    ids = [store.write(ctx, _claim(text, "app:", SourceKind.USER)).id for text in items]
    recall = Recall(store)
    t0 = time.process_time()
    # The first search embeds every item once, in the background while keywords serve:
    # the questions wait until a search is served by meaning (process CPU counts the
    # embedding thread's too).
    probe = questions[0][0]
    deadline = time.monotonic() + 900
    while not any(h.index != "keyword" for h in recall.search(ctx, probe, ranking="hybrid")):
        if recall.embedder is None:
            break  # no embedder: keywords alone, and the report says so
        if time.monotonic() > deadline:
            raise RuntimeError("the corpus was not embedded within 15 minutes")
        time.sleep(0.05)
    embed_cpu_s = time.process_time() - t0
    out: dict[str, Any] = {
        "items": len(items),
        "questions": len(questions),
        "paraphrased": sum(p for _, _, p in questions),
        "embedder": recall.embedder.name if recall.embedder else "none",
        "embed_cpu_ms_per_item": round(embed_cpu_s * 1000 / len(items), 2),
    }
    # Identifiers: 300 alike sentences, each naming its own account id; asked by the id.
    rng = random.Random(5)
    alphabet = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"
    accounts = ["ACCT-" + "".join(rng.choice(alphabet) for _ in range(5)) for _ in range(300)]
    id_ctx = MemoryContext(tenant="meaning-ids", user="u", job="j-1", task="t-1", actor="eval")
    firms = ["Acme", "Globex", "Initech", "Umbrella"]
    owned = [
        store.write(id_ctx, _claim(f"Account {a} is billed monthly to {rng.choice(firms)}",
                                   "app:", SourceKind.USER)).id
        for a in accounts
    ]  # fmt: skip
    for ranking in ("keyword", "dense", "hybrid"):
        first = [
            [h.item.id for h in recall.search(id_ctx, f"who pays for {a}?", k=1, ranking=ranking)]
            == [owned[n]]
            for n, a in enumerate(accounts[:100])
        ]
        out[f"{ranking}_identifier_recall_at_1"] = round(sum(first) / len(first), 3)
    for ranking in ("keyword", "dense", "hybrid"):
        ranks = []
        for question, answer, paraphrased in questions:
            hits = [h.item.id for h in recall.search(ctx, question, k=10, ranking=ranking)]
            rank = hits.index(ids[answer]) + 1 if ids[answer] in hits else 0
            ranks.append((rank, paraphrased))
        for kind, keep in (("all", None), ("lexical", False), ("paraphrased", True)):
            chosen = [r for r, p in ranks if keep is None or p == keep]
            out[f"{ranking}_{kind}_recall_at_5"] = round(
                sum(0 < r <= 5 for r in chosen) / len(chosen), 3
            )
            out[f"{ranking}_{kind}_mrr"] = round(sum(1 / r for r in chosen if r) / len(chosen), 3)
    return out


def eval_episodes(state: State, quick: bool) -> dict[str, Any]:
    """Episodes found by meaning: a job of each fact's topic notes the fact (``recall_corpus``),
    stores its report and ends, and as many jobs of the same topics note an on-topic
    distractor; each episode is written as a job's end writes it. Each question is ranked
    by cosine against the episodes' vectors as stored (made of what an episode says,
    ``embedded_text``) and against vectors of their whole text, key and ids included (as
    episodes were embedded before), side by side; with the tokens and the CPU each way
    costs an episode. An episode's text is the same in every run; its job's id is not, so
    the whole text's figures move a little from run to run."""
    embedder = state.memory.embedder
    if embedder is None:
        return {"embedder": "none"}
    facts = recall_corpus.FACTS[:40] if quick else recall_corpus.FACTS
    noise = recall_corpus.distractors(len(facts), seed=1)
    rng = random.Random(3)
    notes = MemoryStore(state.client)  # the notes need no vectors: only episodes are ranked

    def job_noting(topic: str, text: str) -> str:
        job = state.jobs.submit(JobSpec(goal=f"{topic} work for the team", tenant="episodes",
                                        user="u", scenario=Scenario.AGENTS))  # fmt: skip
        ctx = MemoryContext(tenant="episodes", user="u", job=job.job_id, task="t", actor="eval")
        notes.write(ctx, _claim(text, f"job:{job.job_id}:", SourceKind.AGENT, kind="fact"))
        report = f"{topic}: what the job found\n{text}\n"
        state.artifacts(job.job_id).put(report, kind="report", trust=Trust.TRUSTED)
        claimed = state.tasks.claim(job.job_id, job.root_task, "eval", 60_000)
        assert claimed is not None
        state.tasks.complete(claimed.claim, "", "done")
        state.jobs.finalize(job.job_id)  # writes (and embeds) the episode, as a job's end does
        return f"episode.{job.job_id}"

    answers = [job_noting(f.topic, f.memory) for f in facts]
    for text in noise:
        job_noting(rng.choice(facts).topic, text)
    ctx = MemoryContext(tenant="episodes", user="u", actor="eval")
    episodes = [i for i in notes.items(ctx) if i.kind == "episode"]
    where = {i.key: n for n, i in enumerate(episodes)}
    stored = [state.client.hget(keys.memory_item("episodes", i.id), "vec") for i in episodes]
    out: dict[str, Any] = {"episodes": len(episodes), "questions": 2 * len(facts),
                           "embedder": embedder.name}  # fmt: skip
    tok = embedder.tokenizer if isinstance(embedder, MiniLM) else None
    for name, text_of in (("as stored", embedded_text), ("whole text", lambda k, t: f"{k} {t}")):
        texts = [text_of(i.key, i.text) for i in episodes]
        t0 = time.process_time()
        made = embedder.embed(texts)
        cpu_s = time.process_time() - t0
        vectors = (
            np.stack([np.frombuffer(v or b"", dtype=np.float32) for v in stored])
            if name == "as stored"
            else made
        )
        row: dict[str, Any] = {
            "embed_cpu_ms_per_episode": round(cpu_s * 1000 / len(texts), 1),
            "tokens_per_episode": round(float(np.mean([len(tok.encode(t).ids) for t in texts])), 1)
            if tok
            else None,
        }
        every: list[int] = []
        for kind in ("lexical", "paraphrased"):
            asked = embedder.embed([getattr(f, kind) for f in facts])
            ranks = []
            for question, answer in zip(asked, answers, strict=True):
                order = np.argsort(-(vectors @ question), kind="stable")
                ranks.append(int(np.nonzero(order == where[answer])[0][0]) + 1)
            row |= _ranked(kind, ranks)
            every += ranks
        row |= _ranked("all", every)
        out[name.replace(" ", "_")] = row
    return out


def _ranked(kind: str, ranks: list[int]) -> dict[str, float]:
    """recall@1, recall@5 and MRR of the answers' ranks (1 the first)."""
    return {
        f"{kind}_recall_at_1": round(sum(r == 1 for r in ranks) / len(ranks), 3),
        f"{kind}_recall_at_5": round(sum(r <= 5 for r in ranks) / len(ranks), 3),
        f"{kind}_mrr": round(sum(1 / r for r in ranks) / len(ranks), 3),
    }


class _Pretend:
    """Random unit vectors under the real embedder's name, for the scale case's items: it
    measures the index, not the embedder (a real item is embedded once, by its writer,
    ~20 ms of CPU with the offline embedder; the query is embedded for real)."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: list[str]) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), 384)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


SCALE_VOCAB = [f"w{i}" for i in range(4000)]


def _scale_claims(rng: random.Random, n: int) -> list[Claim]:
    return [
        _claim(" ".join(rng.choice(SCALE_VOCAB) for _ in range(25)), "app:", SourceKind.USER)
        for _ in range(n)
    ]


def _writer(url: str, name: str, rate: float, stop: Any, written: Any) -> None:
    """Another worker: writes items (with vectors) at ``rate`` a second until ``stop``."""
    state = State.connect(url)
    store = MemoryStore(state.client, embedder=_Pretend(name, os.getpid()))
    ctx = MemoryContext(tenant="big", user="u", job="j-w", task="t-w", actor="writer")
    rng = random.Random(os.getpid())
    start = time.monotonic()
    while not stop.is_set():
        due = start + written.value / rate  # paced by the clock: a rate, not a wait
        if time.monotonic() < due:
            stop.wait(due - time.monotonic())
            continue
        store.write(ctx, _scale_claims(rng, 1)[0])
        written.value += 1


def eval_scale(
    state: State, url: str, rng: random.Random, sizes: list[int], n_queries: int
) -> dict[str, Any]:
    """Hybrid recall latency at each size, quiet and with a writer at 100 items/s in another
    process; a new process's first search from the snapshot and from the items; memory."""
    from shared_state.memory.embed import default_embedder

    embedder = default_embedder()
    if embedder is None:
        return {"embedder": "none", "sizes": []}
    store = MemoryStore(state.client, embedder=_Pretend(embedder.name, 1))
    ctx = MemoryContext(tenant="big", user="u", job="j-1", task="t-1", actor="eval")
    queries = [" ".join(rng.sample(SCALE_VOCAB, 3)) for _ in range(n_queries)]
    rows, written = [], 0
    for size in sizes:
        used = state.client.info("memory")["used_memory"]
        store.write_many(ctx, _scale_claims(rng, size - written))
        per_item_redis = (state.client.info("memory")["used_memory"] - used) / (size - written)
        written = size
        recall = Recall(store, embedder)
        t0 = time.process_time()
        recall.search(ctx, queries[0])  # builds from the items, stores a snapshot
        build_cpu = time.process_time() - t0
        cold = Recall(store, embedder)  # a process that starts: a CLI call
        t0 = time.process_time()
        cold.search(ctx, queries[0])
        load_cpu = time.process_time() - t0
        del cold
        gc.collect()
        tracemalloc.start()  # what one index holds, Python and numpy alike
        held = Recall(store, embedder)
        held.search(ctx, queries[0])
        index_bytes = tracemalloc.get_traced_memory()[0] / size
        tracemalloc.stop()
        del held
        keyword = _latencies(partial(recall.search, ctx, ranking="keyword"), queries)
        c0 = time.process_time()
        quiet = _latencies(partial(recall.search, ctx), queries)
        cpu = (time.process_time() - c0) / len(queries)
        stop, count = multiprocessing.Event(), multiprocessing.Value("i", 0)
        writer = multiprocessing.Process(
            target=_writer, args=(url, embedder.name, 100.0, stop, count)
        )
        writer.start()
        deadline = time.monotonic() + 30
        while count.value < 10 and time.monotonic() < deadline:  # the writer is under way
            stop.wait(0.01)
        t0, first = time.monotonic(), count.value
        # Queries this process has not asked yet: a repeated one's vector is kept, and the
        # figure is of a query embedded for real.
        unasked = [" ".join(rng.sample(SCALE_VOCAB, 3)) for _ in range(n_queries)]
        busy = _latencies(partial(recall.search, ctx), unasked)
        rate = (count.value - first) / (time.monotonic() - t0)
        stop.set()
        writer.join(30)
        written += count.value
        baseline = _latencies(lambda q: _rank_from_scratch(store, ctx, q), queries[:3])
        rows.append({
            "items": size,
            "hybrid_p50_ms": _pct(quiet, 50),
            "hybrid_p95_ms": _pct(quiet, 95),
            "hybrid_cpu_ms_per_query": round(cpu * 1000, 2),
            "keyword_p95_ms": _pct(keyword, 95),
            "writer_p95_ms": _pct(busy, 95),
            "writer_items_per_s": round(rate, 1),
            "first_search_from_items_cpu_s": round(build_cpu, 2),
            "first_search_from_snapshot_cpu_s": round(load_cpu, 2),
            "redis_bytes_per_item": round(per_item_redis),
            "index_bytes_per_item": round(index_bytes),
            "baseline_p95_ms": _pct(baseline, 95),
        })  # fmt: skip
    return {"embedder": embedder.name, "queries": n_queries, "sizes": rows}


def _rank_from_scratch(store: MemoryStore, ctx: MemoryContext, query: str) -> list[str]:
    """What a store without a kept index does: read every item, index, rank."""
    items = store.items(ctx, operator=True)
    index = bm25s.BM25()
    index.index([terms(i.text) for i in items], show_progress=False)
    scores = index.get_scores(terms(query))
    return [items[i].id for i in scores.argsort()[::-1][:5]]


def _latencies(fn: Any, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _pct(values: list[float], p: int) -> float:
    if len(values) < 2:
        return round(values[0], 2) if values else 0.0
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1], 2)


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    rng = random.Random(args.seed)
    doc: dict[str, Any] = {"goals": GOALS, "params": {"sizes": args.sizes, "seed": args.seed}}
    with RedisServer() as server:
        state = State.connect(server.url)
        doc["redis_version"] = state.client.info("server")["redis_version"]
        with console.status("a sequence of related jobs, with memory and without"):
            doc["jobs"] = eval_jobs(state)
        with console.status("an early decision after forced compactions"):
            doc["decision"] = eval_decision(args.steps)
        with console.status("agents jobs with a worker killed mid-task"):
            doc["interrupted"] = eval_interrupted(state, server.url, args.kills)
        with console.status("stale and contradicted memories"):
            doc["stale"] = eval_stale(state)
        with console.status("deletion canary"):
            doc["canary"] = eval_canary(state)
        with console.status("cross-tenant probes"):
            doc["tenants"] = eval_tenants(state, rng)
        with console.status("recall by words, by meaning and by both"):
            doc["meaning"] = eval_meaning(state, args.quick)
        with console.status("episodes found by meaning"):
            doc["episodes"] = eval_episodes(state, args.quick)
        with console.status(f"recall at {', '.join(f'{n:,}' for n in args.sizes)} items"):
            doc["scale"] = eval_scale(state, server.url, rng, args.sizes, args.queries)
        state.client.close()
    mem, none = doc["jobs"]["with_memory"], doc["jobs"]["without_memory"]
    ours = doc["decision"]["redfleet"]
    doc["passed"] = {
        "later_jobs_fewer_calls": all(
            m["calls"] < n["calls"] and m["input_tokens"] < n["input_tokens"]
            for m, n in zip(mem[1:], none[1:], strict=True)
        ),
        "decision_adherence": bool(ours["compactions"]) and ours["adherence"] == 1.0,
        "interrupted": doc["interrupted"]["succeeded"] == len(doc["interrupted"]["jobs"])
        and doc["interrupted"]["duplicated_effects"] == 0
        and all(r["killed"] for r in doc["interrupted"]["jobs"]),
        "stale_recalled": doc["stale"]["stale_recalled"] == 0
        and doc["stale"]["current_found"] == doc["stale"]["topics"],
        "canary_left": doc["canary"]["canary_left"] == 0 and doc["canary"]["canary_before"] > 0,
        "cross_tenant": doc["tenants"]["cross_tenant"] == 0 and doc["tenants"]["probes"] > 0,
        "recall_p95_ms": bool(doc["scale"]["sizes"])
        and all(r["hybrid_p95_ms"] <= GOALS["recall_p95_ms"] for r in doc["scale"]["sizes"]),
        "recall_writer_p95_ms": bool(doc["scale"]["sizes"])
        and all(r["writer_p95_ms"] <= GOALS["recall_writer_p95_ms"] for r in doc["scale"]["sizes"]),
        "hybrid_recall": _hybrid_held(doc["meaning"]),
        "episode_recall": _episodes_held(doc["episodes"]),
    }
    return doc


def print_table(doc: dict[str, Any], console: Console) -> None:
    t = Table(title="memory evaluation (deterministic, no model)", title_justify="left")
    for col in ("check", "measured", "goal", "held"):
        t.add_column(col)
    s, c, x = doc["stale"], doc["canary"], doc["tenants"]
    mem, none = doc["jobs"]["with_memory"], doc["jobs"]["without_memory"]
    calls = " / ".join(f"{m['calls']} vs {n['calls']}" for m, n in zip(mem, none, strict=True))
    tokens = " / ".join(
        f"{m['input_tokens']:,} vs {n['input_tokens']:,}" for m, n in zip(mem, none, strict=True)
    )
    reused = " / ".join(str(m["facts_reused"]) for m in mem)
    d = doc["decision"]
    held = "; ".join(f"{k} {v['decision_held']}/{v['compactions']}" for k, v in d.items())
    rows = [
        ("jobs 1-4: calls, memory vs none", calls, "fewer from job 2", "later_jobs_fewer_calls"),
        ("jobs 1-4: input tokens", tokens, "", ""),
        ("jobs 1-4: facts reused from memory", reused, "", ""),
        ("early decision after compactions", held, "redfleet all", "decision_adherence"),
        ("jobs with a coder SIGKILLed mid-task", f"{doc['interrupted']['succeeded']} of "
         f"{len(doc['interrupted']['jobs'])} succeeded; duplicated effects "
         f"{doc['interrupted']['duplicated_effects']}", "all; 0", "interrupted"),
        ("stale/contradicted recalled", f"{s['stale_recalled']} of {s['bad_seeded']} seeded; "
         f"current found {s['current_found']}/{s['topics']}", "0; all", "stale_recalled"),
        ("canary after forget", f"{c['canary_left']} (was {c['canary_before']}); "
         f"{c['items_removed']} items, {c['records_redacted']} records", "0", "canary_left"),
        ("cross-tenant results", f"{x['cross_tenant']} of {x['probes']} probes", "0",
         "cross_tenant"),
        *_meaning_rows(doc["meaning"]),
        *_episode_rows(doc["episodes"]),
        *_scale_rows(doc["scale"]),
    ]  # fmt: skip
    for name, measured, goal, key in rows:
        held = ("yes" if doc["passed"][key] else "NO") if key else ""
        t.add_row(name, measured, goal, held)
    console.print(t)


def _scale_rows(scale: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Per size: hybrid recall quiet and with a writer, a new process's first search, memory."""
    rows = [(f"recall at scale (embedder {scale['embedder']}; query embedded, items' "
             "vectors stand-ins)", "", "", "")]  # fmt: skip
    for r in scale["sizes"]:
        rows += [
            (f"  {r['items']:,} items: hybrid p95 quiet", f"{r['hybrid_p95_ms']} ms (p50 "
             f"{r['hybrid_p50_ms']}, {r['hybrid_cpu_ms_per_query']} ms CPU; keyword p95 "
             f"{r['keyword_p95_ms']})", "<= 50 ms", "recall_p95_ms"),
            ("    with a writer in another process", f"{r['writer_p95_ms']} ms p95 at "
             f"{r['writer_items_per_s']} items/s", "<= 100 ms at 100/s", "recall_writer_p95_ms"),
            ("    a new process's first search (CPU)", f"from the snapshot "
             f"{r['first_search_from_snapshot_cpu_s']} s; from the items "
             f"{r['first_search_from_items_cpu_s']} s", "", ""),
            ("    memory per item", f"Redis {r['redis_bytes_per_item']:,} B; one process's "
             f"index {r['index_bytes_per_item']:,} B", "", ""),
            ("    baseline: rank from Redis per query", f"{r['baseline_p95_ms']} ms p95", "", ""),
        ]  # fmt: skip
    return rows


def _hybrid_held(m: dict[str, Any]) -> bool:
    """The fused ranking's goals: overall and paraphrased recall@5, and never below keywords
    (the lexical questions, the identifiers)."""
    return (
        m["hybrid_all_recall_at_5"] >= GOALS["hybrid_recall_at_5"]
        and m["hybrid_paraphrased_recall_at_5"] >= GOALS["hybrid_paraphrased_recall_at_5"]
        and m["hybrid_lexical_recall_at_5"] >= m["keyword_lexical_recall_at_5"]
        and m["hybrid_identifier_recall_at_1"] >= m["keyword_identifier_recall_at_1"]
    )


def _episodes_held(e: dict[str, Any]) -> bool:
    """Episodes embedded as stored are found by meaning, over all the questions, at least as
    well as whole ones (recall@5 and MRR)."""
    if "as_stored" not in e:
        return False
    now, whole = e["as_stored"], e["whole_text"]
    return all(now[f"all_{m}"] >= whole[f"all_{m}"] for m in ("recall_at_5", "mrr"))


def _episode_rows(e: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Per way of embedding an episode: recall@1 / @5 / MRR of each kind of question."""
    if "as_stored" not in e:
        return [("episodes found by meaning", "no embedder", "", "episode_recall")]
    rows = [(f"episodes by meaning: recall@1 / @5 / MRR, {e['questions']} questions over "
             f"{e['episodes']} episodes (embedder {e['embedder']})", "", "", "")]  # fmt: skip
    for name, label in (("as_stored", "as stored (what it says)"), ("whole_text", "whole text")):
        r = e[name]
        measured = "; ".join(
            f"{k} {r[f'{k}_recall_at_1']:.3f} / {r[f'{k}_recall_at_5']:.3f} / {r[f'{k}_mrr']:.3f}"
            for k in ("all", "lexical", "paraphrased")
        )
        measured += f"; {r['tokens_per_episode']} tokens, {r['embed_cpu_ms_per_episode']} ms CPU"
        held = name == "as_stored"
        goal, key = ("all: @5, MRR >= whole text", "episode_recall") if held else ("", "")
        rows.append((f"  {label}", measured, goal, key))
    return rows


def _meaning_rows(m: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """recall@5 and MRR of each ranking, all questions, lexical, paraphrased."""
    head = (f"recall@5 / MRR, {m['questions']} questions over {m['items']:,} items "
            f"({m['paraphrased']} paraphrased; embedder {m['embedder']})")  # fmt: skip
    rows = [(head, "", "", "")]
    for ranking in ("keyword", "dense", "hybrid"):
        measured = "; ".join(
            f"{kind} {m[f'{ranking}_{kind}_recall_at_5']:.3f} / {m[f'{ranking}_{kind}_mrr']:.3f}"
            for kind in ("all", "lexical", "paraphrased")
        )
        goal, key = {
            "hybrid": ("all >= 0.9, paraphrased >= 0.8, lexical >= keyword", "hybrid_recall"),
        }.get(ranking, ("", ""))  # fmt: skip
        measured += f"; an account by its id, first: {m[f'{ranking}_identifier_recall_at_1']:.2f}"
        rows.append((f"  {ranking}", measured, goal, key))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    parser.add_argument(
        "--sizes", help="tenant sizes of the scale case, comma separated (1000,10000,50000)"
    )
    parser.add_argument("--queries", type=int, default=200, help="recall queries (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, help="jobs with a worker killed (default 3)")
    parser.add_argument("--steps", type=int, help="audit steps for the decision check (120)")
    args = parser.parse_args(argv)
    args.sizes = [
        int(n)
        for n in (args.sizes or ("500,2000" if args.quick else "1000,10000,50000")).split(",")
    ]
    if args.steps is None:
        args.steps = 40 if args.quick else 120
    if args.kills is None:
        args.kills = 1 if args.quick else 3
    os.environ.setdefault("REDFLEET_LOG_LEVEL", "warning")  # inherited by fleet workers
    logs.configure(os.environ["REDFLEET_LOG_LEVEL"])
    console = Console(stderr=args.json)
    doc = run(args, console)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, console)


if __name__ == "__main__":
    main()
