"""The event log: one capped Redis Stream per job, and a global one.

Lua scripts append to the job stream atomically with the state change they
make, so a job's stream is authoritative. The global stream (``rf:events``)
is a mirror for ``redfleet logs`` across jobs, and what the fleet's metrics
(``rf:metrics``) are counted from as it is written; Cluster-safety forbids a script
to touch it together with a job's keys, so the events a script returns are
queued here and written in batches, one ``mirrorEvents`` script call each: in
the same round trip as the caller's next write once ``MIRROR_BATCH`` entries
are queued, and at every worker heartbeat (a third of the lease apart), reaper
tick and close. The mirror thus lags by up to a heartbeat, and a worker killed
with SIGKILL may miss its last entries there — never in the job stream.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import redis

from . import keys
from .models import Event
from .scripts import SCRIPTS

DEFAULT_JOB_MAXLEN = 10_000
DEFAULT_GLOBAL_MAXLEN = 100_000
MIRROR_BATCH = 32
# The step latency histogram's bounds (ms): cumulative buckets, as Prometheus reads them.
LATENCY_BUCKETS_MS = (100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class EventLog:
    def __init__(self, client: redis.Redis, *, global_maxlen: int = DEFAULT_GLOBAL_MAXLEN) -> None:
        self._client = client
        self._global_maxlen = global_maxlen
        self._pending: list[dict[str, str]] = []
        self._lock = threading.Lock()

    # -- writing ---------------------------------------------------------------

    def defer(self, job_id: str, events: list[dict[str, str]]) -> None:
        """Queue events a script wrote to ``job_id``'s stream for the global mirror."""
        if not events:
            return
        mirrored = []
        for fields in events:
            copy = {k: v for k, v in fields.items() if k != "id"}
            copy["job_id"] = job_id
            copy["ts_ms"] = fields["id"].split("-", 1)[0]  # the job stream's own time
            mirrored.append(copy)
        with self._lock:
            self._pending.extend(mirrored)

    def defer_mirrored(self, mirrored: list[dict[str, str]]) -> None:
        """Put back mirror entries that were taken but could not be written."""
        with self._lock:
            self._pending[:0] = mirrored

    def take_pending(self) -> list[dict[str, str]]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def take_batch(self) -> list[dict[str, str]]:
        """The queued entries if a full batch is waiting, else nothing."""
        with self._lock:
            if len(self._pending) < MIRROR_BATCH:
                return []
            pending, self._pending = self._pending, []
        return pending

    def queue_mirror(self, pipe: redis.client.Pipeline, pending: list[dict[str, str]]) -> None:
        """Queue one command that appends ``pending`` to the global stream, in order, and
        adds what they count to the fleet's metrics (summed here: one increment a counter
        per batch, not a dozen per model call)."""
        counts, high_water = fleet_counts(pending)
        args: list[str | int] = [self._global_maxlen, high_water, len(counts)]
        for name, n in counts.items():
            args += [name, n]
        for fields in pending:
            args.append(2 * len(fields))
            for item in fields.items():
                args.extend(item)
        # EVAL with the source, not EVALSHA: the server caches it all the same, and
        # a mirror queued behind another command needs no reload-and-retry path.
        where = keys.script_keys("mirrorEvents")
        pipe.eval(SCRIPTS["mirrorEvents"].source, len(where), *where, *args)

    def flush(self) -> None:
        """Write the queued mirror entries now (heartbeats and shutdown call this)."""
        pending = self.take_pending()
        if pending:
            pipe = self._client.pipeline(transaction=False)
            self.queue_mirror(pipe, pending)
            pipe.execute()

    def append(
        self,
        event: str,
        fields: dict[str, Any],
        *,
        job_id: str = "",
        job_maxlen: int = DEFAULT_JOB_MAXLEN,
        pipeline: redis.client.Pipeline | None = None,
    ) -> None:
        """Append an event written from Python (not by a script) to both streams."""
        entry = {"event": event, **{k: str(v) for k, v in fields.items()}}
        pipe = pipeline if pipeline is not None else self._client.pipeline(transaction=False)
        if job_id:
            pipe.xadd(keys.job_events(job_id), entry, maxlen=job_maxlen, approximate=True)
            entry = {**entry, "job_id": job_id}
        pipe.xadd(keys.EVENTS, entry, maxlen=self._global_maxlen, approximate=True)
        if pipeline is None:
            pipe.execute()

    # -- reading ---------------------------------------------------------------

    @staticmethod
    def _stream(job_id: str | None) -> str:
        return keys.job_events(job_id) if job_id else keys.EVENTS

    @staticmethod
    def _parse(entry_id: Any, fields: dict[Any, Any], job_id: str | None) -> Event:
        decoded = {_text(k): _text(v) for k, v in fields.items()}
        return Event.from_entry(_text(entry_id), decoded, job_id or "")

    def read(
        self,
        job_id: str | None = None,
        *,
        last: int = 1000,
        hide: frozenset[str] = frozenset(),
        keep: Callable[[Event], bool] | None = None,
    ) -> list[Event]:
        """The last ``last`` events of a job (or of all jobs), in stream order, oldest first.

        Events named in ``hide``, and those ``keep`` says no to, are skipped and
        not counted: the stream is read backwards in pages until ``last``
        others are found or it ends.
        """
        found: list[Event] = []
        for entries in self._pages(job_id, last, filtered=bool(hide) or keep is not None):
            found += self._kept(entries, job_id, hide, keep)[: last - len(found)]
            if len(found) == last:
                break
        return found[::-1]

    def latest(
        self,
        last: int,
        *,
        hide: frozenset[str] = frozenset(),
        keep: Callable[[Event], bool] | None = None,
    ) -> tuple[list[Event], str]:
        """The ``last`` most recent events of every job by their time, oldest first, and the
        id of the newest entry read ("$": none), to follow the global stream from.

        The mirror writes in batches, so an event can reach the global stream after a
        later one, but never before it happened (an entry's id is when it was mirrored).
        So the stream is read backwards until ``last`` are found and the entries not yet
        read were all mirrored before the oldest of the ``last`` most recent happened.
        """
        found: list[Event] = []
        newest = "$"
        if last < 1:
            return found, newest
        for entries in self._pages(None, last, filtered=True):
            if newest == "$":
                newest = _text(entries[0][0])
            found += self._kept(entries, None, hide, keep)
            if len(found) >= last:
                found.sort(key=_by_time)
                del found[:-last]
                mirrored_ms = int(_text(entries[-1][0]).partition("-")[0])
                if mirrored_ms < found[0].ts.timestamp() * 1000:
                    break
        found.sort(key=_by_time)
        return found, newest

    def _pages(self, job_id: str | None, last: int, *, filtered: bool) -> Iterator[list[Any]]:
        """The stream's entries backwards, newest first, a page at a time, until it ends."""
        stream, upper = self._stream(job_id), "+"
        page = min(max(2 * last, 100), 10_000) if filtered else last
        while entries := self._client.xrevrange(stream, max=upper, count=page):
            yield entries
            if len(entries) < page:
                return
            upper = f"({_text(entries[-1][0])}"

    def _kept(
        self,
        entries: list[Any],
        job_id: str | None,
        hide: frozenset[str],
        keep: Callable[[Event], bool] | None,
    ) -> list[Event]:
        """``entries`` as events, newest first, but those hidden or not kept."""
        events = [
            self._parse(entry_id, fields, job_id)
            for entry_id, fields in entries
            if _text(fields.get(b"event", b"")) not in hide
        ]
        return events if keep is None else [e for e in events if keep(e)]

    def first(self, job_id: str | None = None) -> Event | None:
        """The oldest event the stream still holds (None: empty)."""
        entries = self._client.xrange(self._stream(job_id), count=1)
        return self._parse(*entries[0], job_id) if entries else None

    def scan(self, job_id: str | None, event: str, *, page: int = 1000) -> Iterator[Event]:
        """Every event named ``event`` in the stream, oldest first (the whole stream is read)."""
        stream, lower = self._stream(job_id), "-"
        while entries := self._client.xrange(stream, min=lower, count=page):
            for entry_id, fields in entries:
                if _text(fields.get(b"event", b"")) == event:
                    yield self._parse(entry_id, fields, job_id)
            lower = f"({_text(entries[-1][0])}"

    def read_after(
        self, job_id: str | None, after: str, *, block_ms: int | None = None
    ) -> list[Event]:
        """The events after stream id ``after`` (``$``: only new ones), oldest first.

        Waits up to ``block_ms`` for the first one (None: does not wait).
        """
        reply = self._client.xread({self._stream(job_id): after}, block=block_ms, count=500)
        return [self._parse(i, f, job_id) for _name, entries in reply or [] for i, f in entries]

    def follow(
        self, job_id: str | None = None, *, after: str = "$", block_ms: int = 1000
    ) -> Iterator[Event]:
        """Yield events as they arrive, after stream id ``after``; runs until closed."""
        while True:
            for event in self.read_after(job_id, after, block_ms=block_ms):
                after = event.id
                yield event


def _by_time(event: Event) -> tuple[Any, ...]:
    """An event's time, then (for one millisecond's) its place in the stream."""
    ms, _, seq = event.id.partition("-")
    return event.ts, int(ms), int(seq or 0)


def _int(value: str | None) -> int:
    try:
        return int(float(value or 0))
    except ValueError:
        return 0


def fleet_counts(entries: list[dict[str, str]]) -> tuple[Counter[str], int]:
    """What mirror entries add to the fleet's metrics (``rf:metrics``), and the largest
    input among their model calls (tokens; 0 if none).

        event|<name>|<role>        every event, by name and role ('' if none)
        reaps, redeliveries        attempts ended by an expired lease, lost deliveries
        tokens|input|cached|output model.called tokens; cost_micro_usd, and
        cost_micro_usd|<tenant>    by the tenant the call's job runs for
        latency|le|<ms>, latency|count, latency|sum   the step latency histogram
                                   (cumulative; steps only, not summarizing calls)
    """
    counts: Counter[str] = Counter()
    high_water = 0
    for f in entries:
        name = f.get("event", "?")
        counts[f"event|{name}|{f.get('role', '')}"] += 1
        reason = f.get("reason", "")
        if name in ("task.requeued", "task.dead"):
            if reason.startswith("lease expired"):
                counts["reaps"] += 1
            elif reason.startswith("delivery lost"):
                counts["redeliveries"] += 1
        elif name == "model.called":
            given = _int(f.get("input_tokens"))
            high_water = max(high_water, given)
            counts["tokens|input"] += given
            counts["tokens|cached"] += _int(f.get("cached_tokens"))
            counts["tokens|output"] += _int(f.get("output_tokens"))
            cost = _int(f.get("cost_micro_usd"))
            counts["cost_micro_usd"] += cost
            if "tenant" in f:
                counts[f"cost_micro_usd|{f['tenant']}"] += cost
            if f.get("latency_ms") and f.get("kind") != "compaction":  # a summary is no step
                ms = _int(f["latency_ms"])
                for le in LATENCY_BUCKETS_MS:
                    if ms <= le:
                        counts[f"latency|le|{le}"] += 1
                counts["latency|count"] += 1
                counts["latency|sum"] += ms
    return +counts, high_water
