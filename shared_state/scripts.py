"""Loading and calling the Lua scripts in ``lua/``.

Each ``verbNoun-N.lua`` file is one operation (N = its fixed KEYS). Shared
helpers live in ``lua/includes/`` and are inlined where a script says
``--- @include "name"``. Scripts are loaded once per server with SCRIPT LOAD
and called with EVALSHA; after a server restart or SCRIPT FLUSH the first
call reloads them. (``mirrorEvents`` is the exception: ``EventLog`` sends it
with EVAL, and it returns a count.)

Every other script returns ``{code, data, events}`` as plain RESP: a code from
``errors.Code``; its data, a flat name/value list whose values are strings,
integers or hashes as HGETALL returns them; and the events it appended to the
job stream, each a list of its stream id and its fields. Nothing is encoded to
JSON in Lua or decoded from it here: on the hot path (a claim) that is a
fifth of the script's time.

The client re-sends a script whose reply was lost (``client.ClientOptions``),
so every script is idempotent for its caller: by the caller's fencing token
for an owner's writes, by an id the caller chose for a submit, a token
reservation or a usage record. The one exception is the global mirror: a
batch re-sent after a lost reply can appear twice in ``rf:events`` (never in
a job's own stream, which is the record).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import redis

from .client import Queued
from .errors import Code, ConnectionFailed, NotReplicated

if TYPE_CHECKING:
    from .events import EventLog  # which calls the mirror script from here

_INCLUDE = re.compile(r'^--- @include "([\w-]+)"$', re.MULTILINE)


@dataclass(frozen=True)
class ScriptResult:
    """A script's reply: its code, its data, the events it appended to the job stream."""

    code: int
    data: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == Code.OK

    @classmethod
    def parse(cls, raw: list[Any]) -> ScriptResult:
        code, data, events = raw
        return cls(
            code=int(code),
            data=_fields(data),
            events=[{"id": e[0].decode(), **_fields(e[1:])} for e in events],
        )


def _fields(flat: list[Any]) -> dict[str, Any]:
    """A flat name/value list as a dict: bytes decoded, a nested list (a hash) in turn."""
    pairs = iter(flat)
    return {name.decode(): _value(value) for name, value in zip(pairs, pairs, strict=True)}


def _value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    return _fields(value) if isinstance(value, list) else value  # else an integer


@dataclass(frozen=True)
class LuaScript:
    name: str
    source: str
    sha: str


def _read(name: str, folder: str = "") -> str:
    path = resources.files("shared_state").joinpath("lua", folder, f"{name}.lua")
    return path.read_text(encoding="utf-8")


def _expand(source: str) -> str:
    return _INCLUDE.sub(lambda m: _read(m.group(1), "includes"), source)


def _load_all() -> dict[str, LuaScript]:
    scripts = {}
    for entry in resources.files("shared_state").joinpath("lua").iterdir():
        if not entry.name.endswith(".lua"):
            continue
        source = _expand(entry.read_text(encoding="utf-8"))
        name = entry.name.removesuffix(".lua").rsplit("-", 1)[0]
        scripts[name] = LuaScript(name, source, hashlib.sha1(source.encode()).hexdigest())
    return scripts


SCRIPTS: dict[str, LuaScript] = _load_all()


def evalsha(
    client: redis.Redis | redis.client.Pipeline, name: str, keys: list[str], args: list[Any]
) -> Any:
    """Queue or run EVALSHA for script ``name`` (no reload handling)."""
    script = SCRIPTS[name]
    return client.evalsha(script.sha, len(keys), *keys, *args)


def _parsed(raw: Any) -> ScriptResult | redis.ResponseError:
    """A script's reply parsed, or its error reply as it is."""
    return raw if isinstance(raw, redis.ResponseError) else ScriptResult.parse(raw)


def to_ms(time_reply: tuple[int, int]) -> int:
    """A TIME reply (seconds, microseconds) in milliseconds."""
    sec, usec = time_reply
    return sec * 1000 + usec // 1000


def server_ms(client: redis.Redis) -> int:
    """Redis server time in ms: the clock every lease and index uses, never the host's."""
    return to_ms(client.time())


def load(client: redis.Redis, name: str) -> None:
    client.script_load(SCRIPTS[name].source)


def run_plain(client: redis.Redis, name: str, keys: list[str], args: list[Any]) -> ScriptResult:
    """Call a script that emits no job events (memory, artifacts), loading it if needed."""
    try:
        raw = evalsha(client, name, keys, args)
    except redis.exceptions.NoScriptError:
        load(client, name)
        raw = evalsha(client, name, keys, args)
    return ScriptResult.parse(raw)


def run_plain_reading(
    client: redis.Redis, name: str, keys: list[str], args: list[Any], reads: Reads
) -> tuple[ScriptResult, list[Any]]:
    """``run_plain`` for a script that writes nothing, with the plain reads ``reads``
    queues sent after it in the same round trip; their replies in order. Not through a
    ``Runner``: no writes ride along (nor wait for a replica). A server that lost the
    script is given it and sent all again; any error reply is raised."""

    def send() -> list[Any]:
        pipe = client.pipeline(transaction=False)
        evalsha(pipe, name, keys, args)
        reads(pipe)
        return pipe.execute(raise_on_error=False)

    replies = send()
    if isinstance(replies[0], redis.exceptions.NoScriptError):
        load(client, name)
        replies = send()
    failed = next((r for r in replies if isinstance(r, Exception)), None)
    if failed is not None:
        raise failed
    return ScriptResult.parse(replies[0]), replies[1:]


# Replicated durability: how long a write waits for a replica's acknowledgement at
# a time, and how long in all before it is an error (a failover, with a replica
# back in its place, takes a few seconds; a deployment without one never acks).
REPLICA_WAIT_MS = 1_000
REPLICATION_DEADLINE_S = 30.0
ACKS = "rf:acks"  # a channel nobody reads: a PUBLISH is a write that replicates
# Scripts a second send of finds nothing to do because the first one did it, with no
# caller's id to answer it from the record: the first send's success is the answer.
FIRST_SEND_COUNTS = frozenset({"reapTask", "redeliverTask"})


# One script call: (script name, job id, keys, args).
Call = tuple[str, str, list[str], list[Any]]
# What a caller of ``Runner.ride`` does with its call's answer (raises to refuse it).
Check = Callable[[ScriptResult | redis.ResponseError], None]
# Plain reads a caller queues on a call's pipeline (``Runner.run_reading``).
Reads = Callable[[redis.client.Pipeline], object]


class Runner:
    """Calls scripts for one client, mirroring the events they emit.

    Once a batch of global-mirror entries has queued up, it rides in the same
    pipeline as the next EVALSHA, so a worker's write stays one round trip.

    A write that need not be made before the thread's next one (a step's
    checkpoint, which must only precede the next model call; a settlement,
    which the call's usage record follows at once) can ride too: ``ride``
    queues it for the calling thread, and the thread's next pipeline sends it
    first, in order (``flush`` sends what waits on its own). Its answer is
    checked as it comes: a refused rider (fenced) raises there.

    ``replicas`` > 0 (``durability replicated``): each call's pipeline ends
    with a PUBLISH and ``WAIT replicas REPLICA_WAIT_MS``, so a claim,
    completion, spawn or journal entry is acknowledged only once a replica
    has it and a failover cannot take it back. (The PUBLISH is a write: the
    WAIT then covers everything written before it, even when the script
    wrote nothing itself — a replay answered from the record — or a client
    retry sent the pipeline on a fresh connection.) A call not acknowledged
    in time is sent again — every script is idempotent for its caller, and
    the last send's reply is the one that counts (but see
    ``FIRST_SEND_COUNTS``); after a failover that lost the write, the second
    send makes it again. Every send's events are mirrored, once. Past
    ``deadline_s`` it is ``NotReplicated``, never a silent success.
    """

    def __init__(
        self,
        client: redis.Redis,
        events: EventLog,
        *,
        replicas: int = 0,
        deadline_s: float = REPLICATION_DEADLINE_S,
    ) -> None:
        self.client = client
        self.events = events
        self.replicas = replicas
        self.deadline_s = deadline_s
        self.unacknowledged = 0  # sends no replica acknowledged in time, so far
        self._local = threading.local()  # each thread's riders: list[tuple[Call, Check]]

    def run(self, name: str, job_id: str, keys: list[str], args: list[Any]) -> ScriptResult:
        result, _ = self.run_reading(name, job_id, keys, args)
        return result

    def run_reading(
        self,
        name: str,
        job_id: str,
        keys: list[str],
        args: list[Any],
        reads: Reads | None = None,
        carrying: Sequence[Queued] = (),
    ) -> tuple[ScriptResult, list[Any]]:
        """``run``, with the reads ``reads`` queues on the pipeline sent in the same round
        trip, after the script; their replies in order (an error reply in its place). Then
        the commands ``carrying`` holds, as a pipeline queued them (another client's writes
        that need no round trip of their own: an envelope's start, ``slots``); their replies
        are not read. Reads and carried commands are sent once: a send again (the script's
        NOSCRIPT, an unacknowledged write) is the script's alone."""
        queued: list[Any] = []
        if reads is not None:
            # Queued first, on a pipeline of their own: the caller's code raising here
            # leaves the mirror batch and the riders where they were.
            scratch = self.client.pipeline(transaction=False)
            reads(scratch)
            queued = list(scratch.command_stack)
        answered = len(queued)
        (result,), read = self._run([(name, job_id, keys, args)], [*queued, *carrying])
        if isinstance(result, Exception):
            raise result
        return result, read[:answered]

    def ride(self, calls: list[Call], check: Check) -> None:
        """Queue ``calls`` to go first in this thread's next pipeline; ``check`` is given
        each one's answer then."""
        riders = self._riders()
        riders.extend((call, check) for call in calls)

    def flush(self) -> None:
        """Send what rides, if anything, now (before what must follow it: a model call)."""
        if self._riders():
            self._run([])

    def drop(self) -> int:
        """Forget what rides for this thread, unsent; how many. For a run that ended
        without the write that would have carried it (fenced, abandoned): sent with
        the next run's first write, a fenced rider would refuse that write."""
        riders = self._riders()
        dropped = len(riders)
        riders.clear()
        return dropped

    def _riders(self) -> list[tuple[Call, Check]]:
        riders = getattr(self._local, "riders", None)
        if riders is None:
            riders = self._local.riders = []
        return riders

    def run_many(
        self, name: str, calls: list[tuple[str, list[str], list[Any]]]
    ) -> list[ScriptResult | redis.ResponseError]:
        """Script ``name`` once per (job_id, keys, args), all in one pipeline: one round trip.

        For the heartbeat, whose renewals of many slots' leases must not cost a
        round trip each. Each call's error reply (OOM, READONLY) is its own,
        in its place in the list; a lost connection raises ConnectionFailed.
        """
        answers, _ = self._run([(name, job_id, keys, args) for job_id, keys, args in calls])
        return answers

    def _run(
        self, calls: list[Call], reads: list[Any] | None = None
    ) -> tuple[list[ScriptResult | redis.ResponseError], list[Any]]:
        """``calls``' answers, after this thread's riders (sent first and checked here), and
        the replies to ``reads`` (commands a pipeline queued, sent after them)."""
        riders = self._riders()
        taken, riders[:] = riders[:], []
        if not taken and not calls:
            return [], []
        try:
            answers, read = self._send_all([call for call, _ in taken] + calls, reads)
        except ConnectionFailed:
            # Maybe sent, maybe not: they ride again with the next (each is idempotent).
            riders[:0] = taken
            raise
        for (_, check), answer in zip(taken, answers, strict=False):
            check(answer)
        return answers[len(taken) :], read

    def _send_all(
        self, calls: list[Call], reads: list[Any] | None = None
    ) -> tuple[list[ScriptResult | redis.ResponseError], list[Any]]:
        pending = self.events.take_batch()
        started = time.monotonic()
        replies, acked, read = self._call_many(calls, pending, reads)
        sends = [(replies, acked)]
        while not sends[-1][1]:  # no replica acknowledged it (only when replicas are asked)
            self.unacknowledged += 1
            if time.monotonic() - started > self.deadline_s:
                self._answers(calls, sends)  # what reached the job streams is mirrored
                names = "+".join(dict.fromkeys(name for name, *_ in calls))
                raise NotReplicated(names, self.replicas, self.deadline_s)
            replies, acked, _ = self._call_many(calls, [])
            sends.append((replies, acked))
        return self._answers(calls, sends), read

    def _answers(
        self, calls: list[Call], sends: list[tuple[list[Any], bool]]
    ) -> list[ScriptResult | redis.ResponseError]:
        """Each call's answer from its sends (first to last); every send's events deferred
        for the mirror, each once."""
        results: list[ScriptResult | redis.ResponseError] = []
        for i, (name, job_id, _, _) in enumerate(calls):
            answers = [_parsed(replies[i]) for replies, _ in sends]
            seen: set[str] = set()
            for answer in answers:  # a replay answers with no events, or with the same ones
                if isinstance(answer, ScriptResult):
                    fresh = [e for e in answer.events if e["id"] not in seen]
                    seen.update(e["id"] for e in fresh)
                    self.events.defer(job_id, fresh)
            last = answers[-1]
            if name in FIRST_SEND_COUNTS and isinstance(last, ScriptResult) and not last.ok:
                last = next((a for a in answers if isinstance(a, ScriptResult) and a.ok), last)
            results.append(last)
        return results

    def _pipeline(self, pending: list) -> redis.client.Pipeline:
        """A pipeline whose first command writes the mirror batch ``pending``, if any."""
        pipe = self.client.pipeline(transaction=False)
        if pending:
            self.events.queue_mirror(pipe, pending)
        return pipe

    def _durable(self, pipe: redis.client.Pipeline) -> None:
        """Queue the acknowledgement after a pipeline's scripts (none if not replicated)."""
        if self.replicas:
            pipe.publish(ACKS, "")
            pipe.execute_command("WAIT", self.replicas, REPLICA_WAIT_MS)

    def _send(self, pipe: redis.client.Pipeline, pending: list) -> list[Any]:
        """Execute a ``_pipeline``; the replies after the batch's.

        The batch is settled here, once, whatever happens: written, or put
        back for the next flush (its command failed: OOM, READONLY; or the
        connection was lost), and never put back again by a retry after it.
        """
        try:
            replies = pipe.execute(raise_on_error=False)
        except ConnectionFailed:
            self.events.defer_mirrored(pending)
            raise
        if not pending:
            return replies
        mirrored, *rest = replies
        if isinstance(mirrored, Exception):
            self.events.defer_mirrored(pending)
        return rest

    def _call_many(
        self, calls: list[Call], pending: list, reads: list[Any] | None = None
    ) -> tuple[list[Any], bool, list[Any]]:
        """The scripts' replies, whether the replicas asked for acknowledged them, and the
        replies to ``reads`` (sent after the scripts, before the acknowledgement)."""
        pipe = self._pipeline(pending)
        for name, _, keys, args in calls:
            evalsha(pipe, name, keys, args)
        queued = len(reads or ())
        pipe.command_stack.extend(reads or ())
        self._durable(pipe)
        replies, acked = self._acks(self._send(pipe, pending))
        read = replies[len(replies) - queued :] if queued else []
        del replies[len(replies) - queued :]
        unrun = [i for i, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)]
        if unrun:
            # The server lost its script cache (restart, SCRIPT FLUSH, a failover to a
            # replica that never loaded it): load, send those again. Their WAIT is the
            # one that counts: it covers what the first pipeline wrote too.
            for name in dict.fromkeys(calls[i][0] for i in unrun):
                load(self.client, name)
            pipe = self.client.pipeline(transaction=False)
            for i in unrun:
                name, _, keys, args = calls[i]
                evalsha(pipe, name, keys, args)
            self._durable(pipe)
            redone, acked = self._acks(pipe.execute(raise_on_error=False))
            for i, reply in zip(unrun, redone, strict=True):
                replies[i] = reply
        return replies, acked, read

    def _acks(self, replies: list[Any]) -> tuple[list[Any], bool]:
        """The scripts' replies, without the acknowledgement's, and whether it was given."""
        if not self.replicas:
            return replies, True
        *scripts, _published, acked = replies
        return scripts, isinstance(acked, int) and acked >= self.replicas
