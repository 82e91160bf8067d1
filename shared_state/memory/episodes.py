"""Episodes: what a finished job leaves its user, built from the records alone.

When a job ends (succeeded, failed, cancelled) its episode is written to the
user's scope: the goal, the outcome, the decisions and facts its tasks
recorded in the job's memory (each with its source), and the artifacts it
made; its authority is the weakest of what it quotes (an agent's decision
keeps an agent's authority, 1, condensed or not). No model is asked: the
episode is the records, condensed. It is derived from the job items it
quotes, so forgetting one of them forgets the episode; and it is written
once per job and round (its id is theirs), however often the job is
retired: a retried job's new episode supersedes the old one.
"""

from __future__ import annotations

import re

from .. import keys
from ..kinds import Scenario
from ..models import Job
from ..redact import redact
from .items import (
    AUTHORITY,
    MAX_TEXT,
    Claim,
    MemoryContext,
    MemoryItem,
    Scope,
    ScopeKind,
    SourceKind,
)
from .store import MemoryStore

EPISODE_KEY = "episode."  # an episode's key: this, then its job's id
_ARTIFACT_KINDS = ("report", "features", "verdict")
_PER_ITEM = 300  # characters of one decision or fact in the episode


def episode_id(job: Job) -> str:
    """One per job and round: a retried job's new outcome supersedes the old one's episode."""
    return f"m-ep-{job.job_id}-{job.retries}"


def record_episode(store: MemoryStore, job: Job) -> MemoryItem | None:
    """Write ``job``'s episode to its user's scope; None if it has not finished.

    Only agents jobs leave one: the scripted behaviours (noop, slow, crash)
    exercise the fleet and learn nothing worth remembering.
    """
    if not job.status.finished or job.scenario is not Scenario.AGENTS:
        return None
    ctx = MemoryContext(tenant=job.tenant, user=job.user, job=job.job_id, actor="system:episodes")
    items = [
        i
        for i in store.items(ctx, scope=Scope(kind=ScopeKind.JOB, id=job.job_id))
        if i.kind in ("decision", "fact") and i.status == "current"
    ]
    lines = [f"Episode of job {job.job_id} ({job.status.value}). Goal: {job.goal}"]
    if job.reason:
        lines.append(f"Why it ended: {job.reason}")
    for kind, title in (("decision", "Decisions"), ("fact", "Facts")):
        chosen = [i for i in items if i.kind == kind]
        if chosen:
            lines.append(f"{title}:")
            lines += [
                f"- {i.text[:_PER_ITEM]} [{i.provenance.source_kind.value}, "
                f"{i.provenance.source_ref}]"
                for i in chosen
            ]
    refs = _artifacts(store, job.job_id)
    if refs:
        lines.append("Artifacts: " + ", ".join(f"{kind} {a}" for a, kind in refs))
    text = redact(_fit(lines))  # a goal may quote a key: masked, never refused
    quoted = [i for i in items if i.text[:_PER_ITEM] in text]
    claim = Claim(
        scope=Scope(kind=ScopeKind.USER, id=job.user),
        text=text,
        key=f"{EPISODE_KEY}{job.job_id}",
        kind="episode",
        source_kind=SourceKind.SYSTEM,
        source_ref=f"job {job.job_id} records",
        # No stronger than what it quotes: an agent's unverified decision does not reach
        # later jobs with the system's authority by being condensed into an episode.
        authority=min([AUTHORITY[SourceKind.SYSTEM], *(i.provenance.authority for i in quoted)]),
        derived_from=tuple(i.id for i in quoted),
    )
    return store.write(ctx, claim, item_id=episode_id(job))


# What ``record_episode`` writes that means nothing to an embedder: its job's id, each
# line's source ("[agent, task …]") and its artifacts' line, all ids. They were most of an
# episode's tokens, which is what embedding it costs (here 45-55 ms of CPU for an episode of
# 139 tokens, ~19 ms for the 40 left of it).
_JOB_ID = re.compile(r"^Episode of job \S+ ")
_REFS = re.compile(
    r"^Artifacts: .*$| \[(?:" + "|".join(k.value for k in SourceKind) + r"), [^\]\n]*\]$",
    re.MULTILINE,
)


def episode_gist(text: str) -> str:
    """What an episode's vector is made of (``embed.embedded_text``): its goal, its outcome
    and what it learned, without the ids it cites."""
    return _REFS.sub("", _JOB_ID.sub("Episode ", text)).strip()


def _artifacts(store: MemoryStore, job_id: str) -> list[tuple[str, str]]:
    """(id, kind) of the job's report, feature list and verdict artifacts, oldest first."""
    ids = [i.decode() for i in store.client.zrange(keys.artifacts(job_id), 0, -1)]
    pipe = store.client.pipeline(transaction=False)
    for artifact_id in ids:
        pipe.hget(keys.artifact(job_id, artifact_id), "kind")
    return [
        (artifact_id, kind.decode())
        for artifact_id, kind in zip(ids, pipe.execute(), strict=True)
        if kind is not None and kind.decode() in _ARTIFACT_KINDS
    ]


def _fit(lines: list[str]) -> str:
    """The lines, dropping whole facts from the end (never cutting one) to fit an item."""
    while len("\n".join(lines)) > MAX_TEXT and len(lines) > 1:
        lines.pop(-2 if lines[-1].startswith("Artifacts:") else -1)
    return "\n".join(lines)[:MAX_TEXT]
