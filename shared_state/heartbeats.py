"""Worker heartbeats: who is alive, on which host, doing what."""

from __future__ import annotations

from typing import Any

from . import keys
from .models import WorkerInfo
from .scripts import Runner, server_ms, to_ms


class WorkerRegistry:
    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.client = runner.client

    def beat(
        self, worker_id: str, ttl_ms: int, fields: dict[str, Any], *, ride: bool = False
    ) -> None:
        """Record the worker's heartbeat; ``ride``: with the thread's next write (the
        heartbeat's renewals). A beat that rode and was refused (OOM, READONLY) is not
        raised there, where it would take the renewals' answers with it: the next beat
        writes the record again."""
        flat = [str(x) for pair in fields.items() for x in pair]
        where = keys.script_keys("beatWorker", worker_id=worker_id)
        call = ("beatWorker", "", where, [ttl_ms, worker_id, *flat])
        if ride:
            self.runner.ride([call], lambda _answer: None)
            return
        self.runner.run(*call)

    def remove(self, worker_id: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(keys.worker(worker_id))
        pipe.zrem(keys.WORKERS, worker_id)
        pipe.execute()

    def list(self) -> list[WorkerInfo]:
        """Live workers: the indexed ones whose heartbeat hash has not expired.

        A stopped worker's entry stays in the index until ``prune`` (the
        reaper's) drops it; it is skipped here, not removed, so that a read
        never races a late heartbeat.
        """
        return [WorkerInfo.model_validate(rec) for rec in self.records()]

    def records(self) -> list[dict[str, Any]]:
        """The live workers' heartbeat hashes with every field, as ``list`` finds them.

        Each has ``worker_id`` and ``heartbeat_age_ms`` (Redis time) in place
        of ``heartbeat_ms``; fields ``WorkerInfo`` does not know (a newer
        worker's) are kept, as strings, for readers that show them as they are.
        """
        ids = [i.decode() for i in self.client.zrange(keys.WORKERS, 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for worker_id in ids:
            pipe.hgetall(keys.worker(worker_id))
        pipe.time()
        *records, now = pipe.execute()
        now_ms = to_ms(now)
        found: list[dict[str, Any]] = []
        for worker_id, raw in zip(ids, records, strict=True):
            if not raw:
                continue
            rec: dict[str, Any] = {k.decode(): v.decode() for k, v in raw.items()}
            rec["heartbeat_age_ms"] = max(0, now_ms - int(rec.pop("heartbeat_ms")))
            found.append({**rec, "worker_id": worker_id})
        return found

    def prune(self, older_than_ms: int) -> int:
        """Drop index entries whose last heartbeat is older than ``older_than_ms`` (Redis time).

        O(entries dropped). The bound must exceed every worker's heartbeat
        TTL (its lease, at least 3 s), or a live worker between two beats is
        dropped until its next one. Returns how many went.
        """
        cutoff = server_ms(self.client) - older_than_ms
        return self.client.zremrangebyscore(keys.WORKERS, "-inf", f"({cutoff}")
