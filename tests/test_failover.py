"""A Redis failover under Sentinel: the clients follow the primary, and with ``durability
replicated`` no acknowledged write is lost (a primary, a replica, three sentinels, real
processes, SIGKILL)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

from shared_state import (
    ConnectionFailed,
    JobSpec,
    NotReplicated,
    RedisServer,
    Role,
    Scenario,
    State,
    free_port,
    keys,
)
from shared_state.client import Client, ClientOptions, SentinelTarget, connect
from shared_state.scripts import server_ms

from .conftest import events_named, wait_for
from .sentinel import Deployment, account
from .test_cli import assert_one_line_error, run


@pytest.fixture
def deployment(redis_server: Any) -> Iterator[Deployment]:  # redis_server: skip without one
    d = Deployment()
    yield d
    d.stop()


def test_a_sentinel_url_names_the_sentinels_the_master_and_the_passwords() -> None:
    target = SentinelTarget.parse(
        "redis+sentinel://:pw@10.0.0.1:26380,10.0.0.2/mymaster/2?sentinel_password=spw"
    )
    assert target.sentinels == (("10.0.0.1", 26380), ("10.0.0.2", 26379))
    assert (target.master, target.db, target.password) == ("mymaster", 2, "pw")
    assert target.sentinel_password == "spw"
    for bad, says in (
        ("redis+sentinel://h:1/", "no master name"),
        ("redis+sentinel://h:1,h:x/m", "sentinel address 2: expected host:port"),
        ("redis+sentinel://h:1/m/zero", "not a number"),
        ("redis+sentinel://:s3cr/et?x@h:x/m", "sentinel address 1"),  # a password with / and ?
    ):
        with pytest.raises(ValueError, match=says) as refused:
            SentinelTarget.parse(bad)
        assert "s3cr" not in str(refused.value)
    odd = SentinelTarget.parse("redis+sentinel://:p/w?d@h:1/m?sentinel_password=a%2Bb+c")
    assert (odd.password, odd.sentinel_password) == ("p/w?d", "a+b+c")
    assert "p/w?d" not in repr(odd) and "a+b" not in repr(odd)
    refused = run("status", url="redis+sentinel://:secret-pw@h:1/")
    assert_one_line_error(refused, "REDIS_URL", "no master name", "redis+sentinel://")
    assert "secret-pw" not in refused.stderr


def test_no_sentinel_answering_is_said_by_address_each_with_its_error() -> None:
    """redis-py writes each sentinel into its error as its client's whole repr: the
    message names them by address instead, and keeps what each answered."""
    ports = (free_port(), free_port())  # nobody listens there
    url = f"redis+sentinel://:secret-pw@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/mymaster"
    with pytest.raises(ConnectionFailed) as refused:
        State.connect(url, client_options=ClientOptions(retries=0))
    said = str(refused.value)
    for port in ports:
        assert f"sentinel 127.0.0.1:{port} - " in said and f"127.0.0.1:{port}. Connection" in said
    assert "No master found for 'mymaster'" in said and "secret-pw" not in said
    assert "<redis." not in said and len(said) < 400, said


def _replica(d: Deployment) -> Any:
    primary = d.primary_port()
    (node,) = [n for port, n in d.nodes.items() if port != primary]
    return node.process


def test_every_threads_own_connection_reaches_the_primary_the_sentinels_name(
    deployment: Deployment,
) -> None:
    """A thread's connection, made and remade outside redis-py's pool, still asks the
    sentinels where the primary is (sending on an unconnected one would dial redis-py's
    default, localhost:6379, another server altogether)."""
    client = connect(deployment.url)
    ports: list[int] = []

    def use() -> None:
        for _ in range(2):
            assert client.ping()
            ports.append(client.pinned().port)
            client.pinned().disconnect()  # the next command connects it again

    thread = threading.Thread(target=use)
    thread.start()
    thread.join()
    use()
    client.close()
    assert ports == [deployment.primary_port()] * 4


class _Sentinels:
    """Stands in for the sentinels: the primary is whichever address it is told."""

    def __init__(self, primary: tuple[str, int]) -> None:
        self.primary = primary

    def discover_master(self, _name: str) -> tuple[str, int]:
        return self.primary

    def discover_slaves(self, _name: str) -> list[tuple[str, int]]:
        return []


def test_a_thread_drops_its_connection_to_a_primary_the_sentinels_no_longer_name() -> None:
    """Once any connection has learned of a new primary, another thread's connection to the
    old one is dropped before its next round trip (redis-py's pool drops such a connection
    when it is handed back): a thread that only reads never reads the old primary's data
    (the old primary demoted without its clients killed)."""
    old, new = RedisServer().start(), RedisServer().start()
    sentinels = _Sentinels(("127.0.0.1", old.port))
    pool = SentinelConnectionPool("rf", sentinels, **ClientOptions().kwargs())
    client = Client(connection_pool=pool)
    try:
        client.set("x", "old")
        seed = redis.Redis.from_url(new.url)
        seed.set("x", "new")
        seed.close()
        ready, moved, read = threading.Event(), threading.Event(), []

        def reader() -> None:
            assert client.get("x") == b"old"  # this thread's connection: the old primary
            ready.set()
            moved.wait(10)
            read.append(client.get("x"))

        thread = threading.Thread(target=reader)
        thread.start()
        ready.wait(10)
        sentinels.primary = ("127.0.0.1", new.port)
        client.pinned().disconnect()  # this thread's connection is cut, as a failover's are
        assert client.get("x") == b"new"  # it asks the sentinels again: the new primary
        moved.set()
        thread.join(10)
        assert read == [b"new"]
    finally:
        client.close()
        old.stop()
        new.stop()


def test_a_primary_demoted_under_its_clients_is_left_for_the_one_the_sentinels_name() -> None:
    """A primary made a replica without its clients cut answers their writes READONLY:
    that is a lost connection (as redis-py's Sentinel connection makes it), so the write
    is sent again to the primary the sentinels name now — a command, a pipeline and a
    transaction alike."""
    old, new = RedisServer().start(), RedisServer().start()
    sentinels = _Sentinels(("127.0.0.1", old.port))
    pool = SentinelConnectionPool("rf", sentinels, **ClientOptions().kwargs())
    client = Client(connection_pool=pool)
    admin = redis.Redis.from_url(old.url)
    try:
        client.set("x", "old")
        sentinels.primary = ("127.0.0.1", new.port)
        admin.replicaof("127.0.0.1", new.port)  # demoted: its clients stay connected
        assert client.set("x", "one") is True
        assert client.pipeline(transaction=False).set("y", "two").execute() == [True]
        assert client.pipeline(transaction=True).set("z", "three").execute() == [True]
        seen = redis.Redis.from_url(new.url)
        assert seen.mget("x", "y", "z") == [b"one", b"two", b"three"]
        seen.close()
    finally:
        admin.close()
        client.close()
        old.stop()
        new.stop()


def test_a_write_no_replica_acknowledged_is_sent_again_not_taken_as_done(
    deployment: Deployment,
) -> None:
    state = State.connect(deployment.url, replicas=1)
    replica = _replica(deployment)

    def unacknowledged_then_acknowledged(write: Callable[[], Any]) -> Any:
        """``write()``'s answer, made while the replica is stopped, then let go."""
        done: list[Any] = []
        sent = state.runner.unacknowledged
        replica.send_signal(signal.SIGSTOP)  # it acknowledges nothing while stopped
        try:
            thread = threading.Thread(target=lambda: done.append(write()))
            thread.start()
            wait_for(lambda: state.runner.unacknowledged >= sent + 2, 20, "two unacked sends")
            assert thread.is_alive() and done == []  # not taken as done
        finally:
            replica.send_signal(signal.SIGCONT)
        thread.join(30)
        assert done
        return done[0]

    job = unacknowledged_then_acknowledged(lambda: state.jobs.submit(JobSpec(goal="g")))
    assert state.jobs.get(job.job_id).goal == "g"
    assert len(state.jobs.list(100)) == 1  # sent again, made once
    assert len(events_named(state, job.job_id, "job.submitted")) == 1
    state.events.flush()  # the first send's events reach the global stream, once
    mirrored = [
        f
        for _, f in state.client.xrange(keys.EVENTS)
        if (f[b"job_id"], f[b"event"]) == (job.job_id.encode(), b"job.submitted")
    ]
    assert len(mirrored) == 1

    # A reap sent again finds the task queued by its first send: that one's answer counts,
    # and the task gets its envelope.
    claimed = state.tasks.claim(job.job_id, job.root_task, "w1", 1)
    assert claimed is not None
    wait_for(
        lambda: state.tasks.get(job.job_id, job.root_task).lease_until < server_ms(state.client)
    )
    reaped = unacknowledged_then_acknowledged(lambda: state.tasks.reap(job.job_id, job.root_task))
    assert reaped == "requeued"
    envelope = state.client.hget(keys.task(job.job_id, job.root_task), "envelope")
    assert envelope is not None and state.delivery.is_waiting(Role.PLANNER, envelope.decode())

    state.runner.deadline_s = 1.5
    replica.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicated, match="submitJob"):
            state.jobs.submit(JobSpec(goal="g"))
    finally:
        replica.send_signal(signal.SIGCONT)
    state.client.close()


def test_a_job_runs_across_a_failover_with_replicated_acks_and_every_task_succeeds_once(
    deployment: Deployment, up_process: Any
) -> None:
    state = State.connect(deployment.url, replicas=1)
    up = up_process(deployment.url, "--durability", "replicated", "--planners", "1",
                    "--coders", "2", "--reviewers", "1", "--lease-ms", "4000")  # fmt: skip
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.SLOW, fanout=3))
    wait_for(lambda: len(up.logged("task.claimed", job_id=job.job_id)) >= 3, 60, "coders")
    deployment.fail_over()
    wait_for(lambda: state.jobs.get(job.job_id).status.finished, 120, "the job")
    assert state.jobs.get(job.job_id).status == "succeeded"
    tasks = state.tasks.list(job.job_id)
    assert len(tasks) == 5 and all(t.status == "succeeded" for t in tasks)

    def lines() -> list[dict[str, Any]]:
        return [line for _, line in up.lines]

    wait_for(lambda: len(account(lines()).completed) == 5, 20, "every worker's log of its tasks")
    told = account(lines())
    # Every task completed once, by the workers' own account; never two owners at once.
    assert set(told.completed.values()) == {1}, told
    assert told.two_owners == 0
    for task in tasks:
        assert len([e for e in events_named(state, job.job_id, "task.succeeded")
                    if e.task_id == task.task_id]) == 1  # fmt: skip
    # Ridden out by the clients' retries: no worker died and was started again.
    assert len(up.logged("fleet.worker_started")) == 4
    state.client.close()


def test_up_with_replicated_acks_refuses_a_primary_without_a_replica(redis_url: str) -> None:
    refused = run("up", "--durability", "replicated", "--burst", url=redis_url)
    assert_one_line_error(refused, "--durability replicated needs a replica")
