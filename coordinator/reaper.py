"""The reaper: finds lost work and puts it back, on Redis time.

Each tick, over the active jobs:
- claims whose lease expired → the attempt ends (re-queued with attempt + 1,
  or dead at max attempts and the job failed) — ``reapTask`` decides
  atomically, so several reapers (one per machine) never double up;
- tasks queued for longer than ``redeliver_after_ms`` whose RQ envelope is no
  longer waiting in its queue (deleted, or taken by a worker that died before
  claiming), on two ticks in a row → a new envelope;
- jobs found finished → retired (keys set to expire, removed from the active
  set), which also completes the bookkeeping of a crashed finisher;
- now and then, ids of expired jobs are pruned from the job index.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog

from shared_state import Role, State, keys

log = structlog.get_logger("redfleet.reaper")

_PRUNE_EVERY_S = 60.0


@dataclass
class ReapReport:
    requeued: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    redelivered: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)


class Reaper:
    def __init__(self, state: State, *, redeliver_after_ms: int) -> None:
        self.state = state
        self.redeliver_after_ms = redeliver_after_ms
        self._next_prune = 0.0
        self._suspects: dict[tuple[str, str], bytes | None] = {}

    def tick(self) -> ReapReport:
        report = ReapReport()
        if time.monotonic() >= self._next_prune:
            self.state.jobs.prune_index()
            self._next_prune = time.monotonic() + _PRUNE_EVERY_S
        active = self.state.jobs.active()
        if not active:
            return report
        for job_id, status in zip(active, self._statuses(active), strict=True):
            if status is None or status in ("succeeded", "failed", "cancelled"):
                self.state.jobs.finalize(job_id)
                report.retired.append(job_id)
        live = [j for j in active if j not in report.retired]
        for job_id, task_id in self.state.tasks.expired(live):
            outcome = self.state.tasks.reap(job_id, task_id)
            if outcome == "requeued":
                report.requeued.append(task_id)
            elif outcome == "dead":
                report.dead.append(task_id)
        for job_id, task_id in self._lost_deliveries(live):
            if self.state.tasks.redeliver(
                job_id, task_id, self.redeliver_after_ms, "delivery lost: no envelope in queue"
            ):
                report.redelivered.append(task_id)
        self.state.events.flush()
        if report.requeued or report.dead or report.redelivered:
            log.info("reaper.tick", **{k: v for k, v in report.__dict__.items() if v})
        return report

    def _statuses(self, job_ids: list[str]) -> list[str | None]:
        pipe = self.state.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(keys.job(job_id), "status")
        return [s.decode() if s else None for s in pipe.execute()]

    def _lost_deliveries(self, job_ids: list[str]) -> list[tuple[str, str]]:
        """Tasks queued past the grace period whose envelope is not in its queue.

        A task seen so on two ticks in a row with the same envelope is lost: a
        worker between RQ's dequeue and its claim is out of the queue for a
        moment, and must not cause a needless second delivery.
        """
        waiting = self.state.tasks.queued_since(job_ids, self.redeliver_after_ms)
        if not waiting:
            self._suspects = {}
            return []
        pipe = self.state.client.pipeline(transaction=False)
        for job_id, task_id in waiting:
            pipe.hmget(keys.task(job_id, task_id), "role", "envelope")
        rows = pipe.execute()
        in_queue = self.state.delivery.waiting_ids({Role(r.decode()) for r, _ in rows if r})
        suspects = {}
        for pair, (role, envelope) in zip(waiting, rows, strict=True):
            if role is not None and (envelope is None or envelope not in in_queue):
                suspects[pair] = envelope
        lost = [pair for pair, env in suspects.items() if self._suspects.get(pair, 0) == env]
        self._suspects = {p: e for p, e in suspects.items() if p not in lost}
        return lost
