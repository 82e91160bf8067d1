"""The reaper: finds lost work and puts it back, and keeps the indexes drained, on Redis time.

Each tick, over the active jobs:
- claims whose lease expired → the attempt ends (re-queued with attempt + 1,
  or dead at max attempts and the job failed, and then ended in the same
  tick: its other tasks end, its keys start to expire, its handoff is
  written) — ``reapTask`` decides atomically, so several reapers (one per
  machine) never double up;
- retries whose backoff is over (``shared_state.backoff``: a failed attempt
  waits queued, with no envelope, until its not-before time) → an envelope,
  within a tick of it being due;
- tasks queued for longer than ``redeliver_after_ms`` whose RQ envelope is no
  longer waiting in its queue (deleted, or taken by a worker that died before
  claiming), on two ticks in a row → a new envelope;
- the envelope of an attempt so ended, or of a delivery so lost, is taken out
  of RQ's registries and set to expire (``Delivery.discard``): RQ never
  finishes the envelope of a killed worker (once a minute, so are the
  envelopes RQ holds as started whose worker is gone);
- jobs found finished → retired (keys set to expire, removed from the active
  set), which also completes the bookkeeping of a crashed finisher; an id
  without a job record is retired once it cannot be a submission in progress.

And every tick, whatever the rate of work (each step O(entries removed)):
- ids of jobs whose keys have expired leave the job index
  (``JobStore.prune_index``; once a minute it also checks the oldest ids for
  records gone without an expiry recorded);
- workers whose last heartbeat is older than ``stale_worker_ms`` leave the
  worker index;
- RQ's finished and failed registries drop the entries of expired envelopes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog

from shared_state import Role, State, keys
from workers import handoff

log = structlog.get_logger("redfleet.reaper")

FINISHED = ("succeeded", "failed", "cancelled")
# Longer than any worker's heartbeat TTL (its lease: 10 s by default).
STALE_WORKER_MS = 10 * 60_000
_SWEEP_EVERY_S = 60.0
_SWEEP_BATCH = 200


@dataclass
class ReapReport:
    requeued: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    redelivered: list[str] = field(default_factory=list)
    due: list[str] = field(default_factory=list)  # retries sent once their backoff was over
    retired: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)  # RQ ids of superseded envelopes
    pruned_jobs: int = 0
    pruned_workers: int = 0


class Reaper:
    def __init__(
        self, state: State, *, redeliver_after_ms: int, stale_worker_ms: int = STALE_WORKER_MS
    ) -> None:
        self.state = state
        self.redeliver_after_ms = redeliver_after_ms
        self.stale_worker_ms = stale_worker_ms
        self._next_sweep = 0.0
        self._suspects: dict[tuple[str, str], bytes | None] = {}

    def tick(self) -> ReapReport:
        report = ReapReport()
        sweep = time.monotonic() >= self._next_sweep
        if sweep:
            self._next_sweep = time.monotonic() + _SWEEP_EVERY_S
        report.pruned_jobs = self.state.jobs.prune_index(batch=_SWEEP_BATCH if sweep else 0)
        report.pruned_workers = self.state.workers.prune(self.stale_worker_ms)
        self.state.delivery.trim_registries()
        stale = self.state.delivery.abandoned() if sweep else []
        active = self.state.jobs.active()
        died = self._reap(active, report, stale) if active else []
        stale = list(dict.fromkeys(stale))  # a sweep and a reap may name the same one
        self.state.delivery.discard(stale)
        report.discarded = [rq_id for _, rq_id in stale]
        # A job failed by a task found dead ends in this tick, as a worker whose task died
        # ends it (``TaskRun.fail``), not in the next once its status is read again. After
        # the reaps and the discard: ended at once, its other expired claims would be
        # cancelled before their reap, and only a reap puts a claim's old envelope in
        # ``stale``.
        for job_id in dict.fromkeys(died):
            if job_id not in report.retired and handoff.job_ended(self.state, job_id):
                report.retired.append(job_id)
        self.state.events.flush()
        if report.requeued or report.dead or report.redelivered or report.due:
            log.info("reaper.tick", **{k: v for k, v in report.__dict__.items() if v})
        return report

    def _reap(
        self, active: list[str], report: ReapReport, stale: list[tuple[Role, str]]
    ) -> list[str]:
        """Retire finished jobs, end expired attempts, send due retries, redeliver lost
        envelopes; the jobs an attempt ended dead failed (``tick`` ends them).

        The envelopes these steps supersede are added to ``stale``.
        """
        live, died = [], []
        for job_id, status in zip(active, self._statuses(active), strict=True):
            if status is None or status in FINISHED:
                if handoff.job_ended(self.state, job_id):
                    report.retired.append(job_id)
            else:
                live.append(job_id)
        expired = self.state.tasks.expired(live)
        # Read before reaping: a re-queued attempt gets a new envelope.
        for (job_id, task_id), (role, envelope) in zip(
            expired, self._envelopes(expired), strict=True
        ):
            outcome = self.state.tasks.reap(job_id, task_id)
            if outcome is None:
                continue  # renewed since, or reaped by another reaper
            if outcome == "requeued":
                report.requeued.append(task_id)
            elif outcome == "dead":
                report.dead.append(task_id)
                died.append(job_id)
            if role is not None and envelope is not None:
                stale.append((Role(role.decode()), envelope.decode()))
        for job_id, task_id in self.state.tasks.retries_due(live):
            if self.state.tasks.redeliver(job_id, task_id, 0, "retry due"):
                report.due.append(task_id)
        for (job_id, task_id), role, envelope in self._lost_deliveries(live):
            if self.state.tasks.redeliver(
                job_id, task_id, self.redeliver_after_ms, "delivery lost: no envelope in queue"
            ):
                report.redelivered.append(task_id)
                if envelope is not None:
                    stale.append((role, envelope.decode()))
        return died

    def _statuses(self, job_ids: list[str]) -> list[str | None]:
        pipe = self.state.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(keys.job(job_id), "status")
        return [s.decode() if s else None for s in pipe.execute()]

    def _envelopes(self, pairs: list[tuple[str, str]]) -> list[list[bytes | None]]:
        """The (role, envelope id) of each task, as stored."""
        pipe = self.state.client.pipeline(transaction=False)
        for job_id, task_id in pairs:
            pipe.hmget(keys.task(job_id, task_id), "role", "envelope")
        return pipe.execute()

    def _lost_deliveries(
        self, job_ids: list[str]
    ) -> list[tuple[tuple[str, str], Role, bytes | None]]:
        """Tasks queued past the grace period whose envelope is not in its queue.

        A task seen so on two ticks in a row with the same envelope is lost: a
        worker between RQ's dequeue and its claim is out of the queue for a
        moment, and must not cause a needless second delivery. Each comes with
        its role and its lost envelope's id (None if it never had one).
        """
        waiting = self.state.tasks.queued_since(job_ids, self.redeliver_after_ms)
        if not waiting:
            self._suspects = {}
            return []
        rows = self._envelopes(waiting)
        in_queue = self.state.delivery.waiting_ids({Role(r.decode()) for r, _ in rows if r})
        suspects, roles = {}, {}
        for pair, (role, envelope) in zip(waiting, rows, strict=True):
            if role is not None and (envelope is None or envelope not in in_queue):
                suspects[pair], roles[pair] = envelope, Role(role.decode())
        lost = [pair for pair, env in suspects.items() if self._suspects.get(pair, 0) == env]
        self._suspects = {p: e for p, e in suspects.items() if p not in lost}
        return [(pair, roles[pair], suspects[pair]) for pair in lost]
