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
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import redis

from .errors import Code, ConnectionFailed

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


class Runner:
    """Calls scripts for one client, mirroring the events they emit.

    Once a batch of global-mirror entries has queued up, it rides in the same
    pipeline as the next EVALSHA, so a worker's write stays one round trip.
    """

    def __init__(self, client: redis.Redis, events: EventLog) -> None:
        self.client = client
        self.events = events

    def run(self, name: str, job_id: str, keys: list[str], args: list[Any]) -> ScriptResult:
        pending = self.events.take_batch()
        result = ScriptResult.parse(self._call(name, keys, args, pending))
        self.events.defer(job_id, result.events)
        return result

    def run_many(
        self, name: str, calls: list[tuple[str, list[str], list[Any]]]
    ) -> list[ScriptResult | redis.ResponseError]:
        """Script ``name`` once per (job_id, keys, args), all in one pipeline: one round trip.

        For the heartbeat, whose renewals of many slots' leases must not cost a
        round trip each. Each call's error reply (OOM, READONLY) is its own,
        in its place in the list; a lost connection raises ConnectionFailed.
        """
        pending = self.events.take_batch()
        raws = self._call_many(name, calls, pending)
        results: list[ScriptResult | redis.ResponseError] = []
        for (job_id, _, _), raw in zip(calls, raws, strict=True):
            if isinstance(raw, redis.ResponseError):
                results.append(raw)
                continue
            result = ScriptResult.parse(raw)
            self.events.defer(job_id, result.events)
            results.append(result)
        return results

    def _pipeline(self, pending: list) -> redis.client.Pipeline:
        """A pipeline whose first command writes the mirror batch ``pending``, if any."""
        pipe = self.client.pipeline(transaction=False)
        if pending:
            self.events.queue_mirror(pipe, pending)
        return pipe

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
        self, name: str, calls: list[tuple[str, list[str], list[Any]]], pending: list
    ) -> list[Any]:
        pipe = self._pipeline(pending)
        for _, keys, args in calls:
            evalsha(pipe, name, keys, args)
        replies = self._send(pipe, pending)
        unrun = [i for i, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)]
        if unrun:
            # The server lost its script cache (restart, SCRIPT FLUSH): load, send those again.
            load(self.client, name)
            again = self.client.pipeline(transaction=False)
            for i in unrun:
                _, keys, args = calls[i]
                evalsha(again, name, keys, args)
            for i, reply in zip(unrun, again.execute(raise_on_error=False), strict=True):
                replies[i] = reply
        return replies

    def _call(self, name: str, keys: list[str], args: list[Any], pending: list) -> Any:
        pipe = self._pipeline(pending)
        evalsha(pipe, name, keys, args)
        (raw,) = self._send(pipe, pending)
        if not isinstance(raw, redis.exceptions.NoScriptError):
            if isinstance(raw, Exception):
                raise raw
            return raw
        # The server lost its script cache (restart, SCRIPT FLUSH): load and retry once.
        load(self.client, name)
        return evalsha(self.client, name, keys, args)
