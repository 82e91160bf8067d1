"""A Sentinel deployment on loopback ports for failover drills: a primary, a replica, three
sentinels, all ``redis-server`` processes (nothing downloaded).

``fail_over()`` kills the primary with SIGKILL (or pauses it past the sentinels'
down-after), waits until the sentinels have promoted the replica, and brings the
old primary back as the new one's replica — as an operator's process supervisor
would — so that the deployment has a replica again for ``replicated`` writes.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

from shared_state import RedisServer, free_port
from shared_state.server import find_redis_server

MASTER = "rf"
DOWN_AFTER_MS = 1_000  # how long the sentinels wait before they call the primary down


class DataNode(RedisServer):
    """A data node whose address stays the same across restarts (``replicaof``: the port
    of the primary it replicates, if any)."""

    def __init__(self, replicaof: int | None = None) -> None:
        super().__init__()
        self.replicaof = replicaof

    def command(self) -> list[str]:
        extra = ["--replicaof", "127.0.0.1", str(self.replicaof)] if self.replicaof else []
        # Sentinel announces replicas by the address they give; on loopback that is fine.
        return [*super().command(), "--repl-diskless-sync", "yes",
                "--repl-diskless-sync-delay", "0", *extra]  # fmt: skip


class Deployment:
    """A primary, a replica and ``sentinels`` sentinels, started now; ``stop`` ends them."""

    def __init__(self, sentinels: int = 3) -> None:
        primary = DataNode()
        primary.start()
        replica = DataNode(replicaof=primary.port)
        replica.start()
        self.nodes = {primary.port: primary, replica.port: replica}
        self._dir = tempfile.TemporaryDirectory(prefix="redfleet-sentinel-")
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.sentinels: list[subprocess.Popen[bytes]] = []
        for port in self.sentinel_ports:
            conf = Path(self._dir.name) / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self._dir.name}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {primary.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} 5000\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    [find_redis_server(), str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        self.failovers = 0
        self.wait_until(lambda: self._replicas_seen() >= 1, 20, "the sentinels to see the replica")
        self.wait_until(lambda: self.in_sync(), 20, "the replica to sync")

    @property
    def url(self) -> str:
        where = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{where}/{MASTER}/0"

    def primary_port(self) -> int:
        """The primary's port, as a majority of the sentinels say."""
        said = [
            self._ask(p, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER) for p in self.sentinel_ports
        ]
        ports = [int(a[1]) for a in said if a]
        return max(set(ports), key=ports.count)

    def direct(self, port: int | None = None) -> redis.Redis:
        return redis.Redis(port=port or self.primary_port(), socket_timeout=5)

    def in_sync(self) -> bool:
        """The primary has a replica online whose offset has caught up."""
        try:
            info = self.direct().info("replication")
        except redis.RedisError:
            return False
        offsets = [v["offset"] for k, v in info.items() if k.startswith("slave") and
                   isinstance(v, dict) and v.get("state") == "online"]  # fmt: skip
        return bool(offsets) and max(offsets) >= info["master_repl_offset"]

    def fail_over(self, *, pause: bool = False) -> float:
        """Kill (or pause past down-after) the primary; return once the replica is primary,
        the old one is its replica again and in sync. The seconds the primary was gone."""
        old = self.primary_port()
        node = self.nodes[old]
        assert node.process is not None
        started = time.monotonic()
        if pause:
            node.process.send_signal(signal.SIGSTOP)
        else:
            node.process.kill()
            node.process.wait()
        self.wait_until(lambda: self.primary_port() != old, 30, "the sentinels to fail over")
        gone = time.monotonic() - started
        new = self.primary_port()
        if pause:
            node.process.send_signal(signal.SIGCONT)  # the sentinels make it a replica
        else:
            node.replicaof = new
            node.start()
        self.failovers += 1
        self.wait_until(self.in_sync, 60, "the old primary to sync as a replica")
        return gone

    def stop(self) -> None:
        for proc in self.sentinels:
            proc.kill()
            proc.wait()
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGCONT)
            node.stop()
        self._dir.cleanup()

    def _ask(self, port: int, *command: str) -> list | None:
        try:
            with redis.Redis(port=port, socket_timeout=2, decode_responses=True) as r:
                return r.execute_command(*command)
        except redis.RedisError:
            return None

    def _replicas_seen(self) -> int:
        seen = self._ask(self.sentinel_ports[0], "SENTINEL", "REPLICAS", MASTER) or []
        return len(seen)

    @staticmethod
    def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass(frozen=True)
class WorkerAccount:
    """What the workers say they did, from their own log lines (outside Redis)."""

    completed: dict[tuple[str, str], int]  # (job, task) -> completions acknowledged to it
    effects: dict[tuple[str, str], int]  # (job, journal key) -> times told it was made
    # Times a worker's claim ended in an accepted write (its run settled: completed,
    # spawned, failed, asked) after another worker had claimed the task since: two
    # owners writing as owner at once. A claim that ended refused (fenced, its lease
    # lost) or never ended (its writes never taken) wrote nothing after it lost.
    two_owners: int

    @property
    def doubled(self) -> int:
        """Completions and journaled effects made more than once."""
        return sum(n - 1 for n in [*self.completed.values(), *self.effects.values()] if n > 1)


def account(lines: Iterable[dict[str, Any]]) -> WorkerAccount:
    """Read the workers' ``task.claimed`` and ``task.settled`` lines (by token) and their
    ``journal.applied`` lines: every completion a worker was told succeeded, every
    journaled effect it was told it made (logged once its write was acknowledged: an
    attempt its fence refused, or one that got no answer, is not one), and every
    accepted end of a claim that another worker's claim of the task had overtaken."""
    done: dict[tuple[str, str], int] = defaultdict(int)
    effects: dict[tuple[str, str], int] = defaultdict(int)
    claimed: dict[tuple[str, str], list[tuple[datetime, int]]] = defaultdict(list)
    settled: list[tuple[tuple[str, str], int, datetime]] = []
    for line in lines:
        key = (line.get("job_id", ""), line.get("task_id", ""))
        event = line.get("event")
        if event == "task.claimed":
            claimed[key].append((datetime.fromisoformat(line["timestamp"]), line["token"]))
        elif event == "journal.applied":
            effects[(line.get("job_id", ""), line.get("key", ""))] += 1
        elif event == "task.settled":
            settled.append((key, line["token"], datetime.fromisoformat(line["timestamp"])))
            if line.get("outcome") == "done":
                done[key] += 1
    overtaken = 0
    for key, token, at in settled:
        mine = next(when for when, t in claimed[key] if t == token)
        # Another claim of the task made after this one, and before this one's write.
        overtaken += any(mine < when < at for when, t in claimed[key] if t != token)
    return WorkerAccount(dict(done), dict(effects), overtaken)
