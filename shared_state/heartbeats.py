"""Worker heartbeats: who is alive, on which host, doing what."""

from __future__ import annotations

from typing import Any

from . import keys
from .models import WorkerInfo
from .scripts import Runner, to_ms


class WorkerRegistry:
    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.client = runner.client

    def beat(self, worker_id: str, ttl_ms: int, fields: dict[str, Any]) -> None:
        flat = [str(x) for pair in fields.items() for x in pair]
        self.runner.run(
            "beatWorker", "", [keys.worker(worker_id), keys.WORKERS], [ttl_ms, worker_id, *flat]
        )

    def remove(self, worker_id: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(keys.worker(worker_id))
        pipe.zrem(keys.WORKERS, worker_id)
        pipe.execute()

    def list(self) -> list[WorkerInfo]:
        """Live workers; entries whose heartbeat hash expired are pruned."""
        ids = [i.decode() for i in self.client.zrange(keys.WORKERS, 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for worker_id in ids:
            pipe.hgetall(keys.worker(worker_id))
        pipe.time()
        *records, now = pipe.execute()
        now_ms = to_ms(now)
        found, gone = [], []
        for worker_id, raw in zip(ids, records, strict=True):
            if not raw:
                gone.append(worker_id)
                continue
            rec = {k.decode(): v.decode() for k, v in raw.items()}
            rec["heartbeat_age_ms"] = max(0, now_ms - int(rec.pop("heartbeat_ms")))
            found.append(WorkerInfo.model_validate({**rec, "worker_id": worker_id}))
        if gone:
            self.client.zrem(keys.WORKERS, *gone)
        return found
