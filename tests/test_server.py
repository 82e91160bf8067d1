"""The embedded redis-server: loading, durability, stopping under a fleet, port reuse, orphans.

Every test runs real redis-server processes and stops the ones it started.
"""

from __future__ import annotations

import enum
import gc
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.job import JobStatus

from coordinator.connection import Embedded
from shared_state import ConnectionFailed, RedisServer, State, StateError, free_port
from shared_state import client as client_module
from shared_state.client import PACKER, ClientOptions, connect, sibling

from .conftest import wait_for
from .processes import alive
from .proxy import FaultProxy
from .test_cli import run

# The session server's fixture skips these tests without a redis-server binary (fails in CI).
pytestmark = pytest.mark.usefixtures("redis_server")

ROOT = Path(__file__).resolve().parents[1]
FILL = "for i = 1, 1000 do redis.call('SET', ARGV[1] .. i, ARGV[2]) end"
WORKER_FIELDS = {"pid": 1, "host": "test", "role": "coder", "state": "idle"}


def no_retry(url: str) -> redis.Redis:
    """A client that raises a LOADING reply at once instead of retrying it."""
    return connect(url, ClientOptions(retries=0))


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(*args, url=None, home=str(home), timeout=60)


def start_embedded(home: Path) -> str:
    """Start the embedded server through the CLI, whose process then exits; its URL."""
    proc = cli(home, "workers", "--json")
    assert proc.returncode == 0, proc.stderr
    info = Embedded(home).status()
    assert info, "the embedded server is not running after a CLI command"
    return info["url"]


@pytest.fixture
def start_server() -> Iterator[Callable[..., RedisServer]]:
    """Start RedisServers; every one is stopped after the test."""
    started: list[RedisServer] = []

    def start(**options: Any) -> RedisServer:
        started.append(RedisServer(**options))
        return started[-1].start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A REDFLEET_HOME whose embedded server is stopped after the test."""
    yield tmp_path
    Embedded(tmp_path).stop(force=True)


def test_a_restart_over_a_large_append_only_file_serves_commands_once_start_returns(
    tmp_path: Path, start_server: Callable[..., RedisServer]
) -> None:
    first = start_server(data_dir=tmp_path)
    with redis.Redis(port=first.port) as client:
        for batch in range(200):  # 200,000 keys: loading them takes a measurable time
            client.eval(FILL, 0, f"k{batch}:", "x" * 20)
    first.process.kill()
    first.process.wait()
    for _ in range(3):
        server = start_server(data_dir=tmp_path)
        with no_retry(server.url) as client:
            assert client.get("k199:1000") == b"x" * 20
            assert client.info("persistence")["loading"] == 0
            assert client.dbsize() == 200_000
        server.process.kill()
        server.process.wait()


def test_a_server_that_exits_at_start_reports_the_tail_of_its_log(
    tmp_path: Path, start_server: Callable[..., RedisServer]
) -> None:
    (tmp_path / "appendonly.aof").write_bytes(b"garbage\r\n")
    with pytest.raises(StateError, match=r"exited at start: .*Bad file format") as raised:
        start_server(data_dir=tmp_path)
    assert "\n" not in str(raised.value)  # the CLI reports it as one line


def test_the_embedded_server_fsyncs_every_write_and_keeps_acknowledged_ones_over_a_kill(
    home: Path,
) -> None:
    url = start_embedded(home)
    with redis.Redis.from_url(url) as client:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
        for i in range(100):
            client.set(f"done:{i}", i)
    os.kill(Embedded(home).status()["pid"], signal.SIGKILL)
    wait_for(lambda: Embedded(home).status() is None, timeout=10, what="the server to die")
    assert start_embedded(home) == url
    with no_retry(url) as client:
        assert client.mget([f"done:{i}" for i in range(100)]) == [b"%d" % i for i in range(100)]


def test_server_stop_refuses_while_a_worker_beats_and_stops_with_force(home: Path) -> None:
    url = start_embedded(home)
    with State.connect(url) as state:
        state.workers.beat("w-coder-t1", 60_000, WORKER_FIELDS)
    for args in (("server", "stop"), ("server", "stop", "--json")):
        proc = cli(home, *args)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert "1 live worker (w-coder-t1)" in line
        assert "redfleet server stop --force" in line
        assert proc.stdout == ""
    assert Embedded(home).status()["url"] == url  # still the same server
    proc = cli(home, "server", "stop", "--force", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"stopped": True}
    assert Embedded(home).status() is None


def test_server_stop_refuses_while_a_client_is_connected_and_stops_once_it_left(
    home: Path,
) -> None:
    url = start_embedded(home)
    with redis.Redis.from_url(url) as client:
        client.ping()
        proc = cli(home, "server", "stop")
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert "1 client connection;" in line and "live worker" not in line
    proc = cli(home, "server", "stop")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped"
    assert Embedded(home).status() is None


def test_a_server_started_again_after_stop_takes_the_same_port_and_data(home: Path) -> None:
    url = start_embedded(home)
    with redis.Redis.from_url(url) as client:
        client.set("kept", "yes")
    assert cli(home, "server", "stop").stdout.strip() == "stopped"
    assert start_embedded(home) == url
    with no_retry(url) as client:
        assert client.get("kept") == b"yes"


def test_a_server_started_again_takes_another_port_when_its_old_one_is_taken(
    home: Path, start_server: Callable[..., RedisServer]
) -> None:
    url = start_embedded(home)
    port = Embedded(home).status()["port"]
    assert cli(home, "server", "stop").stdout.strip() == "stopped"
    squatter = start_server(port=port)
    new_url = start_embedded(home)
    assert new_url != url
    with no_retry(new_url) as client:
        client.set("ours", 1)
    with no_retry(squatter.url) as client:
        assert client.get("ours") is None


CHILD = """
import sys
from shared_state import RedisServer
server = RedisServer().start()
print(server.process.pid, server.url, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_parent_leaves_no_redis_server_behind() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    pid = 0
    try:
        first, url = parent.stdout.readline().split()
        pid = int(first)
        with no_retry(url.decode()) as client:
            assert client.info("server")["process_id"] == pid  # a live server, the child's
        parent.kill()
        parent.wait()
        wait_for(lambda: not alive(pid), timeout=10, what=f"redis-server {pid} to exit")
        assert not alive(pid)
    finally:
        parent.kill()
        parent.wait()
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)  # the orphan this test found


def test_a_lost_server_is_one_error_for_every_command_and_pipeline() -> None:
    server = RedisServer().start()
    state = State.connect(server.url, client_options=ClientOptions(retries=0))
    state.client.set("k", "v")
    server.stop()
    for call in (
        lambda: state.client.get("k"),
        lambda: state.client.pipeline(transaction=False).get("k").execute(),
        lambda: state.client.pipeline(transaction=True).get("k").execute(),
        lambda: state.jobs.get("j-1"),
        lambda: state.tasks.claim("j-1", "c-1", "w", 1_000),
    ):
        with pytest.raises(ConnectionFailed) as caught:
            call()
        # A StateError to redfleet's callers, still a redis.ConnectionError to redis-py's.
        assert isinstance(caught.value, StateError) and isinstance(
            caught.value, redis.ConnectionError
        )
        assert "Redis unreachable" in str(caught.value)
    state.client.close()


def test_a_new_connection_names_redfleet_and_reads_no_package_metadata(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py looks its version up in the package metadata for every connection it makes
    unless told it: a slot's pool grows while tasks run, so that lookup was per-task CPU."""
    client = connect(redis_url)
    looked_up: list[str] = []
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: looked_up.append(name) or real(name)
    )
    try:
        pool = client.connection_pool
        first, second = pool.get_connection(), pool.get_connection()  # two: a new one made
        for connection in (first, second):
            connection.send_command("PING")
            assert connection.read_response() == b"PONG"
        assert first.driver_info.formatted_name.startswith("redis-py(redfleet_v")
        pool.release(first)
        pool.release(second)
    finally:
        client.close()
    assert looked_up == []


class _Roles(enum.StrEnum):
    CODER = "coder"
    ACCENT = "codé"


class _Codes(enum.IntEnum):
    OK = 0


class _Verbs(enum.StrEnum):
    HGETALL = "HGETALL"


def test_every_client_packs_commands_in_one_hiredis_call_as_redis_py_would(
    redis_url: str,
) -> None:
    """The wire bytes are redis-py's for every argument; what hiredis is not handed (a
    non-ASCII str, an enum of ints, a buffer, an int too long to print), redis-py's packer
    converts or refuses as before (``DataError``, ``ValueError``) — hiredis would crash the
    process on that int. An enum of ASCII strings (RQ's job statuses) goes to hiredis."""
    redis_py = redis.connection.Connection()._command_packer
    commands: list[tuple[Any, ...]] = [
        ("SET", "k", "é ü"),
        ("SET", b"k", b"\x00\xff"),
        ("EVALSHA", "abc", 2, "k1", "k2", -5, 2**70, 1.5, 0.1, 1e20, float("inf")),
        ("HSET", "h", "role", _Roles.CODER, "code", _Codes.OK),
        ("HSET", "h", "role", _Roles.CODER, "status", JobStatus.FINISHED, "x", _Roles.ACCENT),
        ("SET", "k", bytearray(b"ab")),
        ("SET", "k", memoryview(b"abcdef")[::2]),  # strided: "ace"
        ("CLIENT SETNAME", "n"),
        (b"CLIENT SETNAME", b"n"),
        ("GET\t", "k"),
    ]
    for command in commands:
        assert b"".join(map(bytes, PACKER.pack(*command))) == b"".join(
            map(bytes, redis_py.pack(*command))
        ), command
    for bad in (True, None, [1]):
        with pytest.raises(redis.DataError, match="Invalid input of type"):
            PACKER.pack("SET", "k", bad)
    with pytest.raises(ValueError, match="limit"):
        PACKER.pack("SET", "k", 10**5000)

    client = connect(redis_url)
    rq_client = sibling(client, ClientOptions())
    handed: list[tuple[Any, ...]] = []
    # Counted where redis-py's packer is asked: never for ASCII str, bytes, int or float.
    real = PACKER._redis_py.pack
    PACKER._redis_py.pack = lambda *args: handed.append(args) or real(*args)  # type: ignore[method-assign]
    try:
        for c in (client, rq_client):
            connection = c.connection_pool.get_connection()
            assert connection._command_packer is PACKER
            c.connection_pool.release(connection)
            c.hset("h", mapping={"text": "a b", "n": 2**70, "x": 0.1, "raw": b"\xff"})
            assert c.hmget("h", "text", "n", "x", "raw") == [
                b"a b",
                b"1180591620717411303424",
                b"0.1",
                b"\xff",
            ]
            assert c.pipeline(transaction=True).incrby("c", 2).get("c").execute() == [2, b"2"]
            c.delete("c")
            c.hset("h", mapping={"role": _Roles.CODER, "status": JobStatus.FINISHED})
        assert handed == []
        client.set("k", "é ü")
        assert client.get("k") == "é ü".encode() and len(handed) == 1
    finally:
        del PACKER._redis_py.pack
        client.close()
        rq_client.close()


def _outcome(call: Callable[[], Any]) -> Any:
    """What a call returned, or the kind and text of what it raised."""
    try:
        return call()
    except redis.RedisError as exc:
        return (type(exc).__name__, str(exc))


def _commands_and_pipelines(r: redis.Redis) -> list[Any]:
    """Commands with reply callbacks, error replies and the replies redis-py reads its own
    way (INFO undecoded, MGET of no keys answered [] for its error reply), alone and in
    pipelines."""
    r.flushall()

    def pipeline(transaction: bool, raise_on_error: bool, unsent: bool = False) -> Any:
        pipe = r.pipeline(transaction=transaction)
        pipe.set("s", "1").incr("s").hset("h", mapping={"a": 1, "b": "x"}).hgetall("h")
        pipe.zadd("z", {"m": 1.5}).zrange("z", 0, -1, withscores=True).expire("h", 100)
        pipe.set("s", "2", nx=True).hincrby("h", "b", 1).get("s").exists("s", "h", "none")
        if unsent:
            pipe.mget([])
        pipe.ttl("h").lpush("s", "x").echo("last")
        return pipe.execute(raise_on_error=raise_on_error)

    def refused_as_queued() -> Any:
        pipe = r.pipeline(transaction=True)
        pipe.set("q", "1").execute_command("NO-SUCH-COMMAND").incr("q")
        return pipe.execute()

    def refused_without_aborting(raise_on_error: bool) -> Any:
        """A WATCH inside the MULTI is refused as it is queued, and the rest runs."""
        pipe = r.pipeline(transaction=True)
        pipe.set("w", "1").execute_command("watch", "w").get("w")
        return pipe.execute(raise_on_error=raise_on_error)

    calls: list[Callable[[], Any]] = [
        lambda: r.set("k", "v"),
        lambda: r.set("k", "w", nx=True),
        lambda: r.get("k"),
        lambda: r.incr("k"),  # an error reply: not an integer
        lambda: r.hset("h2", mapping={"n": 2}),
        lambda: r.hgetall("h2"),
        lambda: r.hgetall("missing"),
        lambda: r.zadd("z2", {"a": 1, "b": 2}),
        lambda: r.zrange("z2", 0, -1, withscores=True),
        lambda: r.expire("h2", 50),
        lambda: r.ttl("h2"),
        lambda: r.mget([]),
        lambda: r.mget(["k", "missing"]),
        lambda: r.evalsha("0" * 40, 0),
        lambda: r.eval("return {1, 'two', {3}}", 0),
        lambda: "redis_version" in r.info("server"),
        lambda: r.execute_command("HIMPORT", "SET", "k"),  # unknown to this server
        lambda: r.execute_command(_Verbs.HGETALL, "h2"),  # a name of a str subclass
        # A large value's buffer (a memoryview) between the packed commands, uncopied.
        lambda: (
            r.pipeline(transaction=False)
            .set("mv", memoryview(b"v" * 70_000))
            .strlen("mv")
            .get("k")
            .execute()
        ),
        lambda: pipeline(transaction=False, raise_on_error=False),
        lambda: pipeline(transaction=True, raise_on_error=False),
        lambda: pipeline(transaction=False, raise_on_error=True),
        lambda: pipeline(transaction=True, raise_on_error=True),
        lambda: pipeline(transaction=False, raise_on_error=False, unsent=True),
        lambda: pipeline(transaction=True, raise_on_error=False, unsent=True),
        refused_as_queued,
        lambda: r.get("q"),  # nothing of the refused transaction ran
        lambda: refused_without_aborting(raise_on_error=False),
        lambda: refused_without_aborting(raise_on_error=True),
    ]
    outcomes = [_outcome(call) for call in calls]
    # Pipelines answer an error reply in its place: its kind and text, comparable.
    return [
        [(type(o).__name__, str(o)) if isinstance(o, Exception) else o for o in outcome]
        if isinstance(outcome, list)
        else outcome
        for outcome in outcomes
    ]


def test_a_client_answers_every_command_and_pipeline_as_redis_py_does(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's commands and pipelines are sent and read in one go a round trip, past
    redis-py's per-reply layers: every answer — through its reply callback, an error reply
    raised or in its place, a transaction refused as it was queued — is what redis-py's own
    client answers on the same server."""
    ours = connect(redis_server.url)
    theirs = redis.Redis(port=redis_server.port)
    read = client_module._read
    reads: list[int] = []
    monkeypatch.setattr(client_module, "_read", lambda conn, n: reads.append(n) or read(conn, n))
    try:
        expected = _commands_and_pipelines(theirs)
        assert reads == []
        assert _commands_and_pipelines(ours) == expected
        # All read in one go (the FLUSHALL first and 29 calls) but for what redis-py reads
        # its own way: INFO, MGET of no keys, the two pipelines with one, and HIMPORT.
        assert len(reads) == 1 + 29 - 5 and max(reads) == 1 + 14 + 1  # MULTI, 14 commands, EXEC
        assert [True, 70_000, b"v"] in expected
        assert ("ResponseError", "value is not an integer or out of range") in expected
        assert ("NoScriptError", "No matching script. Please use EVAL.") in expected
        assert [1, b"two", [3]] in expected
    finally:
        ours.close()
        theirs.close()


class _Interrupted(Exception):
    pass


def test_each_thread_keeps_one_connection_and_none_is_left_mid_reply(redis_url: str) -> None:
    """A thread's commands and pipelines share one connection the pool never hands out;
    one interrupted between sending and reading its reply, or cut by the server, is
    replaced, so no command reads another's reply; a finished thread's connection closes
    with it (no collector needed); a forked child makes its own; ``close`` closes all."""
    client = connect(redis_url, ClientOptions(client_name="pinned-test"))
    other = connect(redis_url)
    taken: list[object] = []
    pool = client.connection_pool
    real_get = pool.get_connection
    pool.get_connection = lambda *a, **k: taken.append(1) or real_get(*a, **k)  # type: ignore[method-assign]
    names = lambda: [c for c in other.client_list() if c["name"] == "pinned-test"]  # noqa: E731
    try:
        mine = client.client_id()
        assert client.pipeline(transaction=False).client_id().execute() == [mine]
        assert client.pipeline(transaction=True).client_id().execute() == [mine]
        theirs: list[int] = []
        gc.disable()  # a thread's connection closes when the thread ends, not when collected
        try:
            thread = threading.Thread(target=lambda: theirs.append(client.client_id()))
            thread.start()
            thread.join()
            assert theirs and theirs[0] != mine
            wait_for(lambda: len(names()) == 1, what="the finished thread's connection closed")
        finally:
            gc.enable()
        assert taken == []  # the pool was never asked

        client.set("k", "v")
        for interrupted in (
            lambda: client.get("k"),
            lambda: client.pipeline(transaction=False).get("k").get("k").execute(),
            lambda: client.pipeline(transaction=True).get("k").get("k").execute(),
        ):
            # A signal's exception after the command went out, before its reply was read.
            parser = client.pinned()._parser
            read = parser.read_response

            def interrupt(*_args: Any, parser: Any = parser, read: Any = read, **_kw: Any) -> Any:
                parser.read_response = read
                raise _Interrupted

            parser.read_response = interrupt
            with pytest.raises(_Interrupted):
                interrupted()
            # The GET's reply ("v") is not what these read.
            assert client.echo("after") == b"after"
            assert client.pipeline(transaction=False).echo("x").echo("y").execute() == [
                b"x",
                b"y",
            ]
        assert client.client_id() != mine

        cut = client.client_id()
        other.client_kill_filter(_id=cut)
        assert client.echo("retried") == b"retried"  # the connection's retry, as before
        assert client.client_id() != cut

        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            try:
                os.write(write, str(client.client_id()).encode())
            finally:
                os._exit(0)
        os.close(write)
        os.waitpid(child, 0)
        assert int(os.read(read, 64) or b"0") not in (0, client.client_id())
        os.close(read)
        assert taken == []

        assert names()
        client.close()
        wait_for(lambda: not names(), what="every thread's connection closed")
    finally:
        other.close()


def test_a_watchs_pooled_connection_is_closed_after_it_and_a_sibling_closes_its_pool(
    redis_url: str,
) -> None:
    """A WATCH takes one of the pool's connections (redis-py's path), closed once its
    pipeline is done, not kept idle beside the thread's own: RQ watches after every failed
    envelope, and each slot held two from then on. A sibling's ``close`` closes its pool's
    connections too (a pub/sub's)."""
    base = connect(redis_url)
    client = sibling(base, ClientOptions(client_name="watch-test"))
    other = connect(redis_url)
    names = lambda: [c for c in other.client_list() if c["name"] == "watch-test"]  # noqa: E731
    try:
        client.set("w", "1")
        with client.pipeline() as pipe:
            pipe.watch("w")
            assert pipe.get("w") == b"1"  # read at once, on the WATCH's connection
            pipe.multi()
            pipe.set("w", "2")
            assert pipe.execute() == [True]
        assert client.transaction(lambda p: p.multi() or p.incr("n"), "w") == [1]
        assert len(names()) == 1  # the thread's own
        pubsub = client.pubsub()
        pubsub.subscribe("news")
        assert len(names()) == 2
        client.close()
        wait_for(lambda: not names(), what="the pinned and the pub/sub connection closed")
    finally:
        other.close()
        base.close()


def test_a_refused_server_is_dialled_once_per_retry_not_once_per_retry_squared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread's connection dials once per attempt of the command's retries: connecting
    with redis-py's own retry inside each attempt made 16 dials of 4 attempts (169 of 13
    with the defaults, minutes of backoff)."""
    dials: list[int] = []
    real = redis.connection.Connection._connect
    monkeypatch.setattr(
        redis.connection.Connection, "_connect", lambda self: dials.append(1) or real(self)
    )
    options = ClientOptions(retries=3, backoff_base_s=0.0, backoff_cap_s=0.0)
    client = connect(f"redis://127.0.0.1:{free_port()}/0", options)
    for call in (client.ping, lambda: client.pipeline(transaction=False).ping().execute()):
        dials.clear()
        with pytest.raises(ConnectionFailed):
            call()
        assert len(dials) == 4
    client.close()


def test_what_a_client_carries_goes_as_one_multi_ahead_of_its_threads_next_command(
    redis_server: RedisServer,
) -> None:
    """``carry``'s writes go in the round trip of the thread's next command, before it and
    as one MULTI; before a pipeline or a WATCH, in a round trip of their own; a MULTI
    Redis refuses is handed to ``refused``, the command that carried it answered all
    the same; one whose connection was lost goes with the next command. Another
    thread's commands carry nothing of this one's."""
    with FaultProxy(redis_server.port) as proxy:
        client = connect(proxy.url)
        client.flushall()
        refused: list[Exception] = []
        set_k = [(("SET", "k", "1"), {}), (("INCR", "k"), {})]

        client.get("k")  # this thread's connection dialled
        client.carry(set_k, refused.append)
        other = threading.Thread(target=lambda: client.set("k", "other's"))
        other.start()
        other.join()  # it carried nothing: the SET ran alone, before the MULTI
        before = proxy.requests
        assert client.get("k") == b"2"  # the carried MULTI ran first, in the GET's trip
        assert proxy.requests - before == 1
        assert client.get("k") == b"2"  # and once

        client.carry(set_k, refused.append)
        before = proxy.requests
        assert client.pipeline(transaction=False).get("k").execute() == [b"2"]
        assert proxy.requests - before == 2  # the carried MULTI, then the pipeline
        client.carry([(("DEL", "k"), {})], refused.append)
        with client.pipeline() as pipe:
            pipe.watch("k")  # after the carried DEL: nothing changes it while watched
            pipe.multi()
            pipe.set("k", "watched")
            assert pipe.execute() == [True]

        client.carry([(("SET", "k", "x"), {}), (("NO-SUCH-COMMAND",), {})], refused.append)
        assert client.echo("answered") == b"answered"
        assert len(refused) == 1 and "unknown command" in str(refused[0])
        assert client.get("k") == b"watched"  # the refused MULTI wrote nothing
        client.carry([(("SET", "k", "x"), {}), (("INCR", "k"), {})], refused.append)
        assert client.echo("answered") == b"answered"
        assert len(refused) == 2 and "not an integer" in str(refused[1])  # failed as it ran
        client.carry([(("SET", "k", "dropped"), {})], refused.append)
        assert client.drop_carried() == 1
        assert client.get("k") == b"x"  # the SET before the failed INCR ran; none since
        client.close()

        # Answered, the carried MULTI is not sent again by the retries of a command that
        # carried it and then timed out (a slot's blocking dequeue).
        quick = connect(proxy.url, ClientOptions(socket_timeout_s=0.3, retries=2))
        quick.ping()
        quick.carry([(("INCR", "counted"), {})], refused.append)
        with pytest.raises(ConnectionFailed, match="Timeout"):
            quick.blpop(["empty"], 2)
        assert quick.get("counted") == b"1"
        quick.close()

        brittle = connect(proxy.url, ClientOptions(retries=0))
        brittle.ping()
        brittle.carry([(("SET", "lost", "1"), {})], refused.append)
        proxy.sever()
        with pytest.raises(ConnectionFailed):
            brittle.get("lost")
        assert brittle.get("lost") == b"1"  # carried again, by the next command
        brittle.close()
