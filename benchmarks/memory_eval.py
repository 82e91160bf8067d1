"""Memory evaluation: long-term memory held to the claims it makes, on a real redis-server.

Deterministic (seeded, no model), one run, a table or ``--json``:

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
  recall       10,000 items in one tenant; query latency with the index current
               (p50/p95) and right after another client wrote (the next search
               takes in the change first), beside a baseline that reads every
               item from Redis and ranks them per query.

Run:  .venv/bin/python benchmarks/memory_eval.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import bm25s
from rich.console import Console
from rich.table import Table

from shared_state import JobSpec, RedisServer, State, keys
from shared_state.artifacts import Trust
from shared_state.errors import MemoryNotFound
from shared_state.memory import Claim, MemoryContext, MemoryStore, Scope, SourceKind
from shared_state.memory.files import MemoryFiles
from shared_state.memory.recall import Recall, terms

GOALS = {"stale_recalled": 0, "canary_left": 0, "cross_tenant": 0, "recall_p95_ms": 50.0}
TOPICS = ["database port", "deploy region", "cache size", "retry limit", "log level",
          "queue name", "api timeout", "build image", "lint rule", "release day"]  # fmt: skip


def _claim(text: str, scope: str, source: SourceKind, **kw: Any) -> Claim:
    return Claim(scope=Scope.parse(scope), text=text, source_kind=source, source_ref="eval", **kw)


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


def eval_recall(state: State, rng: random.Random, n_items: int, n_queries: int) -> dict[str, Any]:
    store = MemoryStore(state.client)
    ctx = MemoryContext(tenant="big", user="u", job="j-1", task="t-1", actor="eval")
    vocab = [f"w{i}" for i in range(4000)]
    pipe_items = [" ".join(rng.choice(vocab) for _ in range(25)) for _ in range(n_items)]
    for text in pipe_items:
        store.write(ctx, _claim(text, "app:", SourceKind.USER))
    queries = [" ".join(rng.sample(vocab, 3)) for _ in range(n_queries)]
    recall = Recall(store)
    t0 = time.perf_counter()
    recall.search(ctx, queries[0])
    build_ms = (time.perf_counter() - t0) * 1000
    warm = _latencies(lambda q: recall.search(ctx, q), queries)
    other = MemoryStore(state.client)
    after_write = []
    for q in queries[: max(5, n_queries // 10)]:
        other.write(ctx, _claim(" ".join(rng.sample(vocab, 10)), "app:", SourceKind.USER))
        after_write += _latencies(lambda q: recall.search(ctx, q), [q])
    baseline = _latencies(lambda q: _rank_from_scratch(store, ctx, q), queries[:20])
    return {
        "items": n_items,
        "queries": n_queries,
        "first_build_ms": round(build_ms, 1),
        "recall_p50_ms": _pct(warm, 50),
        "recall_p95_ms": _pct(warm, 95),
        "after_write_p95_ms": _pct(after_write, 95),
        "baseline_p95_ms": _pct(baseline, 95),
    }


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
    doc: dict[str, Any] = {"goals": GOALS, "params": {"items": args.items, "seed": args.seed}}
    with RedisServer() as server:
        state = State.connect(server.url)
        doc["redis_version"] = state.client.info("server")["redis_version"]
        with console.status("stale and contradicted memories"):
            doc["stale"] = eval_stale(state)
        with console.status("deletion canary"):
            doc["canary"] = eval_canary(state)
        with console.status("cross-tenant probes"):
            doc["tenants"] = eval_tenants(state, rng)
        with console.status(f"recall over {args.items:,} items"):
            doc["recall"] = eval_recall(state, rng, args.items, args.queries)
        state.client.close()
    doc["passed"] = {
        "stale_recalled": doc["stale"]["stale_recalled"] == 0
        and doc["stale"]["current_found"] == doc["stale"]["topics"],
        "canary_left": doc["canary"]["canary_left"] == 0 and doc["canary"]["canary_before"] > 0,
        "cross_tenant": doc["tenants"]["cross_tenant"] == 0 and doc["tenants"]["probes"] > 0,
        "recall_p95_ms": doc["recall"]["recall_p95_ms"] <= GOALS["recall_p95_ms"],
    }
    return doc


def print_table(doc: dict[str, Any], console: Console) -> None:
    t = Table(title="memory evaluation (deterministic, no model)", title_justify="left")
    for col in ("check", "measured", "goal", "held"):
        t.add_column(col)
    s, c, x, r = doc["stale"], doc["canary"], doc["tenants"], doc["recall"]
    rows = [
        ("stale/contradicted recalled", f"{s['stale_recalled']} of {s['bad_seeded']} seeded; "
         f"current found {s['current_found']}/{s['topics']}", "0; all", "stale_recalled"),
        ("canary after forget", f"{c['canary_left']} (was {c['canary_before']}); "
         f"{c['items_removed']} items, {c['records_redacted']} records", "0", "canary_left"),
        ("cross-tenant results", f"{x['cross_tenant']} of {x['probes']} probes", "0",
         "cross_tenant"),
        (f"recall p95, {r['items']:,} items", f"{r['recall_p95_ms']} ms (p50 {r['recall_p50_ms']}, "
         f"after a write {r['after_write_p95_ms']}, first build {r['first_build_ms']})",
         "<= 50 ms", "recall_p95_ms"),
        ("baseline: rank from Redis per query", f"{r['baseline_p95_ms']} ms p95", "", ""),
    ]  # fmt: skip
    for name, measured, goal, key in rows:
        held = ("yes" if doc["passed"][key] else "NO") if key else ""
        t.add_row(name, measured, goal, held)
    console.print(t)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    parser.add_argument("--items", type=int, help="items in the recall tenant (default 10000)")
    parser.add_argument("--queries", type=int, default=200, help="recall queries (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.items is None:
        args.items = 500 if args.quick else 10_000
    console = Console(stderr=args.json)
    doc = run(args, console)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc, console)


if __name__ == "__main__":
    main()
