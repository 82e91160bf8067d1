"""What Redis keeps on disk after a forget: rewritten now, or said plainly.

A forget changes what Redis holds in memory; its append-only file keeps
every earlier write until the file is rewritten, and a snapshot keeps what
was there when it was taken. ``persist`` asks the server for both — an
append-only-file rewrite where ``appendonly`` is on, a snapshot where
``save`` rules are set — and waits for them to finish (Redis counts each,
so a rewrite begun before the forget is not taken for one after it). Where
it cannot (a managed server refusing ``CONFIG``, a rewrite failing, the wait
running out), the result says so and what the disk may still hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

WAIT_S = 120.0  # a rewrite of a large file takes a while; a forget waits for it
_POLL_S = 0.05


def persist(client: redis.Redis, *, wait_s: float = WAIT_S) -> dict[str, str]:
    """Rewrite the append-only file and save a snapshot where the server keeps them; what
    each came to: ``rewritten``/``saved``, ``off``, or why the disk may still hold the text."""
    try:
        config = {**client.config_get("appendonly"), **client.config_get("save")}
    except redis.ResponseError as exc:
        reason = f"the server refuses CONFIG ({exc})"
        return {
            "disk": f"not checked: {reason}; its files may hold the text until it rewrites them"
        }
    deadline = time.monotonic() + wait_s
    return {
        "aof": _run(client, "aof_rewrites", "aof_rewrite_in_progress", "aof_last_bgrewrite_status",
                    client.bgrewriteaof, "rewritten", deadline)
        if config.get("appendonly") == "yes"
        else "off",
        "rdb": _run(client, "rdb_saves", "rdb_bgsave_in_progress", "rdb_last_bgsave_status",
                    client.bgsave, "saved", deadline)
        if config.get("save")
        else "off",
    }  # fmt: skip


def _run(
    client: redis.Redis,
    count: str,
    busy: str,
    status: str,
    start: Callable[[], object],
    done: str,
    deadline: float,
) -> str:
    """Start one background write once none is running, and wait for it to be counted."""
    while _info(client)[busy]:  # one begun before the forget may have written the text
        if time.monotonic() > deadline:
            return "not written: one already running did not end in time"
        time.sleep(_POLL_S)
    before = _info(client)[count]
    try:
        start()
    except redis.ResponseError as exc:
        return f"not written: {exc}"
    while True:
        info = _info(client)
        if info[count] > before and not info[busy] and not info.get("aof_rewrite_scheduled"):
            return done if info[status] == "ok" else f"failed: {status} {info[status]}"
        if time.monotonic() > deadline:
            return "not finished in time: the disk holds the text until it is"
        time.sleep(_POLL_S)


def _info(client: redis.Redis) -> dict:
    return client.info("persistence")
