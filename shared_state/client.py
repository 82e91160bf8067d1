"""Redis clients that survive a real network: timeouts, keepalive, retries with backoff.

``redis.Redis.from_url`` alone retries nothing and waits forever on a silent
peer. Every client redfleet makes comes from ``connect`` with
``ClientOptions``: a socket timeout (a stalled connection raises instead of
hanging), TCP keepalive (a dead peer is noticed while idle), a health check
before reusing an idle connection, and retries of connection errors and
timeouts with jittered exponential backoff — long enough to ride out a Redis
restart. A retry re-sends the same command, so every script is idempotent
for its caller (see ``lua/``): a reply lost on the wire never doubles an effect.

A Sentinel deployment is named by a URL of its own (``SENTINEL_URL``):
``redis+sentinel://[:password@]host:port[,host:port...]/<master>[/<db>]``,
the sentinels' password, if they have one, as ``?sentinel_password=...``.
Its clients ask the sentinels where the primary is on every new connection,
so a failover is ridden out by the same retries as a restart: the
connections to the old primary fail, and the retries connect to the new one.

Every connection names its library to the server as ``redis-py(redfleet_v<version>)``
(``CLIENT SETINFO``: ``CLIENT LIST`` shows it from Redis 7.2), from ``driver()``, made
once: without it redis-py looks its own version up in the package metadata for each
new connection (~0.5 ms of CPU, and a slot's pool grows with the tasks it runs),
and puts a command on the wire with one hiredis call where it can (``Packer``). A
``Client`` gives each thread a connection of its own for its commands and pipelines
(``Client.pinned``), outside redis-py's pool and its per-round-trip bookkeeping, and
sends a round trip's commands in one write and reads their replies in one go
(``_exchange``), past redis-py's per-reply layers: the answers are redis-py's, through
its reply callbacks (``tests/test_server.py`` compares them with its own client's).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any
from urllib.parse import unquote

import hiredis
import redis
from redis import DriverInfo
from redis.backoff import EqualJitterBackoff
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.connection import Encoder, HiredisRespSerializer, PythonRespSerializer
from redis.exceptions import ExecAbortError, ReadOnlyError, WatchError
from redis.retry import Retry
from redis.sentinel import (
    DEMOTED_MASTER_UNBLOCKED_ERROR,
    MasterNotFoundError,
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
)

from .errors import ConnectionFailed, ConnectionTimedOut
from .redact import redact

# A command as a pipeline queues it (an entry of its ``command_stack``): args, options.
Queued = tuple[tuple[Any, ...], dict[str, Any]]


@cache
def driver() -> DriverInfo:
    """How every connection names its library, made at the first (the package lookup costs
    ~5 ms: not at import, where ``redfleet --version`` would pay it)."""
    try:
        version = importlib.metadata.version("redfleet")
    except importlib.metadata.PackageNotFoundError:  # run from a tree never installed
        version = "0"
    return DriverInfo(lib_version=redis.__version__).add_upstream_driver("redfleet", version)


# Python refuses to write an int of more than 4,300 digits (``sys.set_int_max_str_digits``):
# redis-py's packer raises for one, and hiredis, handed one, crashes the process.
_INT_LIMIT = 10**4000


class Packer:
    """Puts a command on the wire with one hiredis call.

    redis-py's own packer converts every argument in Python before hiredis
    packs them (~1 µs an argument: ~10 of a ten-argument command's ~12 µs,
    where hiredis alone takes ~1), and a worker sends hundreds of commands a
    task. A command whose arguments are all ASCII str (an enum of strings too:
    RQ's statuses, the roles), bytes, float or an int of a printable size goes
    to hiredis as it is, which writes the same bytes (a string's own text, as
    redis-py's ``str.encode`` does; ``repr`` of a number). Anything else — a
    non-ASCII str (hiredis would keep a UTF-8 copy inside a string the program
    may hold on to), an enum of ints (redis-py sends its ``repr``), a bool,
    None, a bytearray or memoryview (sent without a copy) — goes to redis-py's
    packer, which converts or refuses it as it always did (``DataError``).
    Strings are UTF-8, as every reply redfleet reads is decoded: an
    ``encoding`` in the Redis URL is not supported.
    """

    def __init__(self) -> None:
        encode = Encoder("utf-8", "strict", decode_responses=False).encode
        python = PythonRespSerializer(6000, encode)  # redis-py's buffer cutoff
        self._redis_py = HiredisRespSerializer(python.pack, encode)

    def pack(self, *args: Any) -> list[bytes | memoryview]:
        command = args[0]
        # A command of two words ("CLIENT SETNAME") is two arguments, split as redis-py does.
        if isinstance(command, str):
            args = (*command.encode().split(), *args[1:])
        elif b" " in command:
            args = (*command.split(), *args[1:])
        for arg in args:
            kind = type(arg)
            if kind is str:
                if not arg.isascii():
                    break
            elif kind is int:
                if not -_INT_LIMIT < arg < _INT_LIMIT:
                    break
            elif (
                kind is not bytes
                and kind is not float
                # a str subclass last: rarer, and isinstance costs more than ``is``
                and not (isinstance(arg, str) and arg.isascii())
            ):
                break
        else:
            return [hiredis.pack_command(args)]
        return self._redis_py.pack(*args)


PACKER = Packer()  # nothing in it changes: every connection and thread shares it


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """How a client talks to Redis.

    The default retry budget (12 retries, backoff from 0.1 s doubling to 2 s,
    jittered) waits 10 to 19 s for a server that refuses connections, and each
    attempt on a stalled connection ends after ``socket_timeout_s``.
    """

    socket_timeout_s: float = 5.0
    connect_timeout_s: float = 3.0
    retries: int = 12
    backoff_base_s: float = 0.05
    backoff_cap_s: float = 2.0
    health_check_interval_s: int = 10
    keepalive_idle_s: int = 10
    keepalive_interval_s: int = 3
    keepalive_count: int = 3
    client_name: str | None = None  # CLIENT SETNAME on every connection: who it is, in CLIENT LIST

    def with_(self, **changes: Any) -> ClientOptions:
        return replace(self, **changes)

    def kwargs(self, *, tcp: bool = True) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis``; ``tcp`` False for a unix socket."""
        keepalive = {}
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; macOS names them differently
            keepalive = {
                socket.TCP_KEEPIDLE: self.keepalive_idle_s,
                socket.TCP_KEEPINTVL: self.keepalive_interval_s,
                socket.TCP_KEEPCNT: self.keepalive_count,
            }
        tcp_only = {"socket_keepalive": True, "socket_keepalive_options": keepalive}
        return {
            **(tcp_only if tcp else {}),
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": self.connect_timeout_s,
            "health_check_interval": self.health_check_interval_s,
            "retry": Retry(
                EqualJitterBackoff(self.backoff_cap_s, self.backoff_base_s), self.retries
            ),
            "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
            "client_name": self.client_name,
            "driver_info": driver(),
            "command_packer": PACKER,
        }


def _translated(exc: Exception) -> ConnectionFailed:
    kind = ConnectionTimedOut if isinstance(exc, redis.TimeoutError) else ConnectionFailed
    return kind(redact(f"Redis unreachable: {describe(exc)}"))


_SENTINEL_CLIENT = "<redis.client.Redis("
_ADDRESS = re.compile(r"\bhost=([^,<>()]+),.*?\bport=(\d+)")


def describe(exc: BaseException) -> str:
    """``str(exc)``; for ``MasterNotFoundError``, each sentinel redis-py writes into it as
    its client's whole repr (~1,500 characters: pool, connection, every option) is named
    by its address instead, so that what each sentinel answered can be read."""
    text = str(exc)
    if not isinstance(exc, MasterNotFoundError):
        return text
    parts, at = [], 0
    while (start := text.find(_SENTINEL_CLIENT, at)) >= 0:
        depth, end = 0, len(text) - 1
        for i in range(start, len(text)):  # to the ">" that closes the client's "<"
            depth += (text[i] == "<") - (text[i] == ">")
            if depth == 0:
                end = i
                break
        found = _ADDRESS.search(text, start, end)
        parts += [text[at:start], f"sentinel {found[1]}:{found[2]}" if found else "a sentinel"]
        at = end + 1
    return "".join([*parts, text[at:]])


def _dial(conn: redis.connection.AbstractConnection) -> None:
    """Connect ``conn`` once: the round trip's retries are the retries (``connect`` would
    retry on its own inside each). A Sentinel connection asks where the primary is first;
    sending on an unconnected one would dial its own defaults, localhost:6379."""
    if isinstance(conn, SentinelManagedConnection):
        conn._connect_retry()  # one ask, one connect
    else:
        conn.connect_check_health(check_health=True, retry_socket_connect=False)


def _in_step(conn: redis.connection.AbstractConnection, attempt: Callable[[], Any]) -> Any:
    """``attempt`` on ``conn`` with the connection's retries; a connection that may hold
    part of a reply afterwards (anything raised but an error reply) is dropped."""

    def connected_attempt() -> Any:
        if not conn.is_connected:
            _dial(conn)
        return attempt()

    try:
        return conn.retry.call_with_retry(connected_attempt, lambda _error: conn.disconnect())
    except redis.ResponseError:  # a whole reply was read: the connection is in step
        raise
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        conn.disconnect()
        raise _translated(exc) from exc
    except BaseException:  # a signal, a reply a callback could not parse: never reused
        conn.disconnect()
        raise


def _send(conn: redis.connection.AbstractConnection, commands: list[tuple[Any, ...]]) -> None:
    """``commands`` in one write: the packed bytes joined, a large value's own buffer (which
    the packer hands on as a memoryview) between them as it is, uncopied."""
    pack = conn._command_packer.pack
    chunks: list[bytes | memoryview] = []
    joined: list[bytes] = []
    for args in commands:
        for chunk in pack(*args):
            if type(chunk) is memoryview:
                if joined:
                    chunks.append(b"".join(joined))
                    joined = []
                chunks.append(chunk)
            else:
                joined.append(chunk)
    if joined:
        chunks.append(b"".join(joined))
    conn.send_packed_command(chunks)  # connects first if need be; checks health


def _read(conn: redis.connection.AbstractConnection, count: int) -> list[Any]:
    """The next ``count`` replies on ``conn``, an error reply as its ``ResponseError``: what
    ``read_response`` reads each, with the work it does around every reply done once (it
    formats the host's name for an error that may not come and reads the clock for the
    health check: ~2 µs a reply, a third of a pipelined command's client CPU). Its errors
    are redis-py's; it runs in ``_in_step``, which drops the connection on any of them.
    A Sentinel's primary that answers as a replica (READONLY; or UNBLOCKED, a blocked
    command's on its demotion) is a lost connection, as redis-py's Sentinel connection
    makes it: retried, the next dial asks the sentinels where the primary is now."""
    read = conn._parser.read_response  # a RESP3 push frame is handled inside, as ever
    try:
        replies = [read() for _ in range(count)]
    except (TimeoutError, redis.TimeoutError) as exc:  # the socket's, the parser's
        raise redis.TimeoutError(f"Timeout reading from {conn._host_error()}") from exc
    except OSError as exc:
        raise redis.ConnectionError(
            f"Error while reading from {conn._host_error()} : {exc.args}"
        ) from exc
    if conn.health_check_interval:
        conn.next_health_check = time.monotonic() + conn.health_check_interval
    if isinstance(conn, SentinelManagedConnection) and conn.connection_pool.is_master:
        for reply in replies:
            if isinstance(reply, ReadOnlyError) or (
                isinstance(reply, redis.ResponseError)
                and str(reply).startswith(DEMOTED_MASTER_UNBLOCKED_ERROR)
            ):
                conn.disconnect()
                raise redis.ConnectionError("The previous master is now a slave")
    return replies


def _exchange(
    conn: redis.connection.AbstractConnection, commands: list[tuple[Any, ...]]
) -> list[Any]:
    """``commands`` sent in one write, and their replies in order (``_read``)."""
    _send(conn, commands)
    return _read(conn, len(commands))


def _exchangeable(conn: redis.connection.AbstractConnection, stack: list[Queued]) -> bool:
    """Whether ``_exchange`` may send ``stack`` on ``conn`` (connected): not a command read
    undecoded (INFO, DUMP, …: ``NEVER_DECODE``), one with a stand-in answer for its error
    reply (MGET of no keys, which a MULTI leaves unsent) or one sent after a step of its
    own (HIMPORT, whose field set is prepared on the connection first), nor on a
    connection that fell back to RESP2, whose replies take other callbacks."""
    if getattr(conn, "_resp2_fallback", False):
        return False
    for args, options in stack:
        if options and (NEVER_DECODE in options or EMPTY_RESPONSE in options):
            return False
        name = args[0]
        if name[:1] in _H:  # most commands end here: one slice, one look-up
            head = name[:7] if isinstance(name, str) else bytes(name[:7]).decode("latin-1")
            if head.upper() == "HIMPORT":
                return False
    return True


_H = frozenset(("h", "H", b"h", b"H"))


class _Pin:
    """A thread's connection, closed when the thread ends and its locals go: a connection
    sits in reference cycles (its notification handlers) that only the collector frees,
    which for long-lived objects can be a long while."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: redis.connection.AbstractConnection) -> None:
        self.conn = conn

    def __del__(self) -> None:
        # In a forked child this closes only the child's descriptor; at interpreter exit
        # there may be nothing left to close with.
        with contextlib.suppress(Exception):
            self.conn.disconnect()


class _Pipeline(redis.client.Pipeline):
    def __init__(self, client: Client, transaction: bool, shard_hint: Any) -> None:
        super().__init__(client.connection_pool, client.response_callbacks, transaction, shard_hint)
        self._client = client

    def watch(self, *names: Any) -> Any:
        self._client.flush_carried()  # before the keys are watched: it may write them
        return super().watch(*names)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        self._client.flush_carried()  # what this thread's client carries goes first
        if self.watching or self.connection is not None or self.scripts:
            # WATCH holds a pooled connection from its first command: redis-py's own path.
            try:
                return super().execute(raise_on_error)
            except ConnectionFailed:
                raise
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                raise _translated(exc) from exc
        stack = self.command_stack
        if not stack:
            return []
        multi = self.transaction or self.explicit_transaction

        def send() -> list[Any]:
            if not _exchangeable(conn, stack):
                redis_py = self._execute_transaction if multi else self._execute_pipeline
                return redis_py(conn, stack, raise_on_error)
            answers = self._transaction(conn, stack) if multi else self._pipelined(conn, stack)
            if raise_on_error:
                self.raise_first_error(stack, answers)
            return answers

        # Held as the pipeline's while it runs (a short EXEC reply disconnects
        # ``self.connection``), and let go before ``reset``, which would hand it to the pool.
        self.connection = conn = self._client.pinned()
        try:
            return _in_step(conn, send)
        finally:
            self.connection = None
            self.reset()

    def _pipelined(self, conn: redis.connection.AbstractConnection, stack: list[Queued]) -> list:
        return self._answers(stack, _exchange(conn, [args for args, _ in stack]))

    def _transaction(self, conn: redis.connection.AbstractConnection, stack: list[Queued]) -> list:
        """``stack`` in MULTI/EXEC, answered as redis-py's ``_execute_transaction`` answers:
        a command refused as it was queued is in its place, numbered as in the pipeline
        (and raised, if it aborted the EXEC); an error as a command ran is in its place."""
        *queued, executed = _exchange(conn, [("MULTI",), *(a for a, _ in stack), ("EXEC",)])
        refused = []
        for number, reply in enumerate(queued):
            if isinstance(reply, redis.ResponseError):
                if number:  # not MULTI's own
                    self.annotate_exception(reply, number, stack[number - 1][0])
                refused.append((max(number - 1, 0), reply))
        if isinstance(executed, redis.ResponseError):
            if refused and isinstance(executed, ExecAbortError):
                raise refused[0][1]
            raise executed
        if executed is None:  # only after a WATCH, which takes redis-py's own path
            raise WatchError("Watched variable changed.")
        for at, error in refused:
            executed.insert(at, error)
        if len(executed) != len(stack):
            conn.disconnect()
            raise redis.ResponseError("Wrong number of response items from pipeline execution")
        return self._answers(stack, executed)

    def _answers(self, stack: list[Queued], replies: list[Any]) -> list[Any]:
        answer = self._client.answer
        return [answer(a, options, r) for (a, options), r in zip(stack, replies, strict=True)]

    def reset(self) -> None:
        # A pooled connection (a WATCH's): ``execute`` lets go of the thread's own first.
        pooled = self.connection is not None
        super().reset()
        if pooled:
            # Closed, not kept idle beside the thread's own connection: RQ watches after
            # every failed envelope, and a slot would hold two from then on.
            self._client.connection_pool.disconnect(inuse_connections=False)


class Client(redis.Redis):
    """A ``redis.Redis`` whose lost connections and timeouts, once its retries are spent,
    are ``ConnectionFailed``: translated here, once, for every command and pipeline, so
    a caller catches one exception (a ``StateError``, and a ``redis.ConnectionError`` for
    code that expects redis-py's).

    Each thread sends its commands and pipelines on a connection of its own, made at
    its first and kept (``pinned``). redis-py's pool takes and returns a connection for
    every round trip, polls it for stray data and records its state for observability:
    about half of a single command's ~120,000 instructions. A connection one thread
    alone uses is never left mid-reply (``_in_step`` drops one that might be), so it
    needs neither. The retries, timeouts and health check are the connection's own, as
    before; on Sentinel a connection to a primary the sentinels no longer name is
    dropped before its next round trip, as the pool drops one handed back. A pipeline
    that WATCHes takes a pooled connection, as redis-py's does. ``close`` closes every
    thread's. A round trip's replies are read in one go and answered through redis-py's
    reply callbacks (``answer``), but for what redis-py reads its own way (``_exchangeable``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pool = self.connection_pool
        self._primary = (
            pool if isinstance(pool, SentinelConnectionPool) and pool.is_master else None
        )
        self._pins = threading.local()
        self._pinned: weakref.WeakSet[_Pin] = weakref.WeakSet()
        self._pins_lock = threading.Lock()

    def pinned(self) -> redis.connection.AbstractConnection:
        """This thread's connection (a new one in a forked child: the parent's socket is
        the parent's), closed when the thread ends."""
        pin = getattr(self._pins, "pin", None)
        if pin is None or pin.conn.pid != os.getpid():
            pool = self.connection_pool
            pin = self._pins.pin = _Pin(pool.connection_class(**pool.connection_kwargs))
            with self._pins_lock:
                self._pinned.add(pin)
        conn = pin.conn
        primary = self._primary
        if (
            primary is not None
            and conn.is_connected
            and primary.master_address is not None
            and (conn.host, conn.port) != primary.master_address
        ):
            conn.disconnect()  # a failover moved the primary: the next send asks again
        return conn

    def carry(self, commands: list[Queued], refused: Callable[[Exception], None]) -> None:
        """Send ``commands`` (as a transaction's pipeline queued them) as one MULTI ahead of
        this thread's next command on this client, in that command's round trip: writes
        that must land before whatever the thread sends next, and need no round trip of
        their own (an envelope's end, ``slots``). A pipeline sent next sends them first,
        in a round trip of their own, and so does a command redis-py reads its own way
        (``_exchangeable``: INFO, …). ``refused`` is given the first error of the MULTI
        (EXECABORT: out of memory, a command Redis does not know; or one that failed as
        it ran); the command that carried it is answered all the same. Anything raised
        before Redis answered them (a lost connection) keeps them for the next command,
        which sends them again: they may have been written."""
        self._pins.carried = (commands, refused)

    def drop_carried(self) -> int:
        """Forget what ``carry`` holds for this thread, unsent; how many commands."""
        carried = self._take_carried()
        return len(carried[0]) if carried is not None else 0

    def _take_carried(self) -> tuple[list[Queued], Callable[[Exception], None]] | None:
        carried = getattr(self._pins, "carried", None)
        if carried is not None:
            self._pins.carried = None
        return carried

    def execute_command(self, *args: Any, **options: Any) -> Any:
        conn = self.pinned()
        carried = self._take_carried()
        if carried is not None:
            unread = [carried]  # emptied once Redis answered them: a retry sends the command
            try:
                return _in_step(conn, lambda: self._send_carrying(conn, unread, args, options))
            except BaseException:
                if unread:  # maybe sent, maybe not: with the next command, again
                    self._pins.carried = carried
                raise
        return _in_step(conn, lambda: self._send_one(conn, args, options))

    def _send_one(
        self,
        conn: redis.connection.AbstractConnection,
        args: tuple[Any, ...],
        options: dict[str, Any],
    ) -> Any:
        if not _exchangeable(conn, [(args, options)]):
            return self._send_command_parse_response(conn, args[0], *args, **options)
        (reply,) = _exchange(conn, [args])
        answer = self.answer(args, options, reply)
        if isinstance(answer, redis.ResponseError):
            raise answer
        return answer

    def answer(self, args: tuple[Any, ...], options: dict[str, Any], reply: Any) -> Any:
        """``reply`` to ``args`` as redis-py's ``parse_response`` returns it: through the
        command's callback, an error reply as it is (not raised)."""
        if isinstance(reply, Exception):  # an error reply (a parser's error, as redis-py)
            return reply
        callback = self.response_callbacks.get(args[0])
        if callback is None:
            return reply
        if options:
            options = {name: v for name, v in options.items() if name != "keys"}
        return callback(reply, **options)

    def _send_carrying(
        self,
        conn: redis.connection.AbstractConnection,
        unread: list[tuple[list[Queued], Callable[[Exception], None]]],
        args: tuple[Any, ...],
        options: dict[str, Any],
    ) -> Any:
        if not unread:
            return self._send_one(conn, args, options)
        commands, refused = unread[0]
        carried = [("MULTI",), *(c for c, _ in commands), ("EXEC",)]
        plain = _exchangeable(conn, [(args, options)])  # else redis-py sends it, after
        _send(conn, [*carried, args] if plain else carried)
        *queued, executed = _read(conn, len(carried))
        # Answered: a retry from here sends the command alone (a blocking one may time out).
        unread.clear()
        # MULTI's OK, each QUEUED, then EXEC's list: the first error of any is the refusal.
        executed = executed if isinstance(executed, list) else [executed]
        error = next((r for r in [*queued, *executed] if isinstance(r, Exception)), None)
        try:
            if not plain:
                return self._send_one(conn, args, options)
            answer = self.answer(args, options, _read(conn, 1)[0])
            if isinstance(answer, redis.ResponseError):
                raise answer
            return answer
        finally:
            if error is not None:
                refused(error)

    def flush_carried(self) -> None:
        """Send what ``carry`` holds for this thread now, in a round trip of its own."""
        carried = self._take_carried()
        if carried is None:
            return
        commands, refused = carried
        pipe = self.pipeline()
        pipe.command_stack.extend(commands)
        try:
            pipe.execute()
        except redis.ResponseError as exc:  # answered
            refused(exc)
        except BaseException:  # maybe sent, maybe not: with the next command, again
            self._pins.carried = carried
            raise

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> _Pipeline:
        return _Pipeline(self, transaction, shard_hint)

    def close(self) -> None:
        with self._pins_lock:
            pinned = list(self._pinned)
        for pin in pinned:
            pin.conn.disconnect()
        super().close()


SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_URL = f"{SENTINEL_SCHEME}://[:password@]host:port[,host:port...]/<master>[/<db>]"
SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelTarget:
    """A Sentinel deployment's primary, as a ``redis+sentinel://`` URL names it."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # the data nodes'
    sentinel_password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str) -> SentinelTarget:
        """ValueError (naming what is wrong, never a password) for a malformed URL."""
        rest = url.removeprefix(f"{SENTINEL_SCHEME}://")
        # The credentials end at the last "@": a password may hold "/", "?" or "@" (an "@"
        # in the sentinels' password, in the query, is written %40).
        userinfo, _at, rest = rest.rpartition("@")
        rest, _, query = rest.partition("?")
        hosts, _, path = rest.partition("/")
        username, _, password = userinfo.partition(":")
        sentinels = []
        for n, host in enumerate(hosts.split(","), start=1):
            name, colon, port = host.rpartition(":") if ":" in host else (host, "", "")
            if not name or (colon and not port.isdigit()):
                raise ValueError(f"sentinel address {n}: expected host:port")
            sentinels.append((name, int(port) if colon else SENTINEL_PORT))
        master, _, db = path.partition("/")
        if not master:
            raise ValueError("no master name")
        if db and not db.isdigit():
            raise ValueError("the database is not a number")
        given = dict(p.partition("=")[::2] for p in query.split("&") if p)
        return cls(
            sentinels=tuple(sentinels),
            master=unquote(master),
            db=int(db or 0),
            username=unquote(username) or None,
            password=unquote(password) or None,
            sentinel_password=unquote(given.get("sentinel_password", "")) or None,
        )


def connect(url: str, options: ClientOptions | None = None) -> Client:
    """A client for ``url`` (not yet connected); ConnectionFailed for a malformed URL."""
    options = options or ClientOptions()
    try:
        if url.startswith(f"{SENTINEL_SCHEME}://"):
            return _primary(SentinelTarget.parse(url), options)
        tcp = not url.startswith("unix:")
        return Client.from_url(url, **options.kwargs(tcp=tcp))
    except ValueError as exc:
        raise ConnectionFailed(redact(f"bad Redis URL {url!r}: {exc}")) from exc


def _primary(target: SentinelTarget, options: ClientOptions) -> Client:
    """A client of the deployment's primary, wherever the sentinels say it is now."""
    asked = {
        "socket_timeout": options.connect_timeout_s,
        "socket_connect_timeout": options.connect_timeout_s,
        "password": target.sentinel_password,
    }
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=asked)
    client = sentinel.master_for(
        target.master,
        redis_class=Client,
        db=target.db,
        username=target.username,
        password=target.password,
        **options.kwargs(tcp=True),
    )
    assert isinstance(client, Client)
    return client


def sibling(client: redis.Redis, options: ClientOptions) -> Client:
    """A client to the same server with its own connection pool and ``options``.

    For a thread that must not share timeouts with the rest of the process:
    the heartbeat (short timeout, its own tick is the retry) and RQ's blocking
    dequeue (RQ would raise the socket timeout of the client it is given; a
    slot's is already as long as RQ asks). RQ takes a ``Client`` as it is: a
    ``ConnectionFailed`` is a ``redis.ConnectionError``, a ``ConnectionTimedOut``
    a ``redis.TimeoutError`` too. ``close`` closes its pool.
    """
    old = client.connection_pool
    tcp = not issubclass(old.connection_class, redis.UnixDomainSocketConnection)
    kwargs = {**old.connection_kwargs, **options.kwargs(tcp=tcp)}
    if isinstance(old, SentinelConnectionPool):  # the same sentinels, asked on its own
        del kwargs["connection_pool"]  # the old pool's proxy, which the new one replaces
        pool: redis.ConnectionPool = SentinelConnectionPool(
            old.service_name, old.sentinel_manager, **kwargs
        )
    else:
        pool = old.__class__(connection_class=old.connection_class, **kwargs)
    made = Client(connection_pool=pool)
    made.auto_close_connection_pool = True  # its own pool
    return made
