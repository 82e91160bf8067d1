"""The fleet's metrics for Prometheus, read from Redis at each scrape.

Counters come from ``rf:metrics``, which the event mirror adds to as it
writes every job's events to the global stream (``mirrorEvents``, a batch's
counters summed by the worker that sends it), so they are
fleet-wide — every worker on every machine — and survive the process serving
them; they lag the job streams as the mirror does (up to a heartbeat), and
a mirror batch re-sent after a lost reply is counted twice. A scrape costs
one read of the counters, and per unfinished job its tasks and leases.
Gauges are read from the records at scrape time: live claims, queue depths,
workers by role and state, tasks of unfinished jobs by role and status.

    redfleet_events_total{event,role}          every job event
    redfleet_claims_total, _renewals_total, _fenced_writes_total,
    redfleet_reaps_total, _redeliveries_total  the coordination core at work
    redfleet_tasks_finished_total{role,status} succeeded, dead
    redfleet_model_calls_total, redfleet_tokens_total{kind}, redfleet_cost_usd_total
    redfleet_worker_cpu_seconds_total{phase}   worker CPU by phase (sent with heartbeats)
    redfleet_cache_hit_ratio                   cached / input tokens, all calls
    redfleet_context_high_water_tokens         the largest input of any call
    redfleet_step_latency_seconds              histogram of model call latency
    redfleet_tasks{role,status}, redfleet_claims_live{role}, redfleet_queue_depth{queue},
    redfleet_workers{role,state}, redfleet_jobs_active
    redfleet_tenant_cost_usd_total{tenant}     spend, by the tenant a call's job runs for
    redfleet_route_calls_total, _429s_total, _failures_total{route}
    redfleet_admission_waits_total, redfleet_admission_wait_seconds_total{route}
    redfleet_route_cooling_seconds, _in_flight, _waiting{route}   each route now
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from threading import Thread

from prometheus_client import start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from shared_state import State, keys

from .errors import CoordinatorError


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class FleetCollector(Collector):
    """One scrape = one read of the counters plus one of the live records."""

    def __init__(self, state: State) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        raw = {k.decode(): v.decode() for k, v in self.state.client.hgetall(keys.METRICS).items()}
        yield from self._counters(raw)
        yield from self._gauges()
        yield from self._routes()

    def _routes(self) -> Iterator[Metric]:
        """Each model route's admission: calls, 429s, failures, waits, and now."""
        shown = self.state.routes.show()
        families = {
            "calls": CounterMetricFamily(
                "redfleet_route_calls",
                "Model calls admitted by a route's limits (a route without limits counts none).",
                labels=["route"],
            ),
            "limited": CounterMetricFamily(
                "redfleet_route_429s", "429 and 529 answers, by route.", labels=["route"]
            ),
            "failed": CounterMetricFamily(
                "redfleet_route_failures", "Calls a route did not answer.", labels=["route"]
            ),
            "waits": CounterMetricFamily(
                "redfleet_admission_waits", "Calls that waited for admission.", labels=["route"]
            ),
            "waited": CounterMetricFamily(
                "redfleet_admission_wait_seconds",
                "Time calls waited for admission, summed.",
                labels=["route"],
            ),
            "cooling": GaugeMetricFamily(
                "redfleet_route_cooling_seconds", "How long a route still cools.", labels=["route"]
            ),
            "in_flight": GaugeMetricFamily(
                "redfleet_route_in_flight", "Admitted calls not yet settled.", labels=["route"]
            ),
            "waiting": GaugeMetricFamily(
                "redfleet_route_waiting", "Calls waiting for admission.", labels=["route"]
            ),
        }
        for r in shown:
            values = {
                "calls": r.admitted, "limited": r.limited, "failed": r.failed,
                "waits": r.waits, "waited": r.waited_ms / 1000, "cooling": r.cooling_ms / 1000,
                "in_flight": r.in_flight, "waiting": r.waiting,
            }  # fmt: skip
            for name, family in families.items():
                family.add_metric([r.route], values[name])
        yield from families.values()

    def _counters(self, raw: dict[str, str]) -> Iterator[Metric]:
        events: Counter[tuple[str, str]] = Counter()
        for field, value in raw.items():
            if field.startswith("event|"):
                _, name, role = field.split("|", 2)
                events[(name, role)] += int(value)
        family = CounterMetricFamily(
            "redfleet_events", "Job events, by name and role.", labels=["event", "role"]
        )
        for (name, role), n in sorted(events.items()):
            family.add_metric([name, role], n)
        yield family

        def total(name: str) -> int:
            return sum(n for (event, _), n in events.items() if event == name)

        yield _counter("redfleet_claims", "Tasks claimed.", total("task.claimed"))
        yield _counter("redfleet_renewals", "Leases renewed.", total("task.renewed"))
        yield _counter(
            "redfleet_fenced_writes", "Writes refused for a stale token.", total("task.fenced")
        )
        yield _counter(
            "redfleet_reaps", "Attempts ended by an expired lease.", int(raw.get("reaps", 0))
        )
        yield _counter(
            "redfleet_redeliveries", "Lost deliveries sent again.", int(raw.get("redeliveries", 0))
        )
        finished = CounterMetricFamily(
            "redfleet_tasks_finished", "Tasks ended, by role and status.", labels=["role", "status"]
        )
        for (name, role), n in sorted(events.items()):
            if name in ("task.succeeded", "task.dead"):
                finished.add_metric([role, name.removeprefix("task.")], n)
        yield finished
        yield _counter("redfleet_model_calls", "Model calls.", total("model.called"))
        cpu = CounterMetricFamily(
            "redfleet_worker_cpu_seconds",
            "Worker CPU by phase of the work (workers/phases.py), as of their last heartbeat.",
            labels=["phase"],
        )
        for field, value in sorted(raw.items()):
            if field.startswith("cpu_us|"):
                cpu.add_metric([field.removeprefix("cpu_us|")], int(value) / 1e6)
        yield cpu
        tokens = CounterMetricFamily(
            "redfleet_tokens", "Tokens of model calls, by kind.", labels=["kind"]
        )
        for kind in ("input", "cached", "output"):
            tokens.add_metric([kind], int(raw.get(f"tokens|{kind}", 0)))
        yield tokens
        yield _counter(
            "redfleet_cost_usd",
            "Estimated cost of model calls.",
            int(raw.get("cost_micro_usd", 0)) / 1e6,
        )
        spend = CounterMetricFamily(
            "redfleet_tenant_cost_usd", "Estimated cost of model calls, by tenant.",
            labels=["tenant"],
        )  # fmt: skip
        for field, value in sorted(raw.items()):
            if field.startswith("cost_micro_usd|"):
                spend.add_metric([field.removeprefix("cost_micro_usd|")], int(value) / 1e6)
        yield spend
        input_tokens = int(raw.get("tokens|input", 0))
        ratio = int(raw.get("tokens|cached", 0)) / input_tokens if input_tokens else 0.0
        yield GaugeMetricFamily(
            "redfleet_cache_hit_ratio", "Cached share of input tokens, all calls.", value=ratio
        )
        yield GaugeMetricFamily(
            "redfleet_context_high_water_tokens",
            "The largest input of any model call.",
            value=int(raw.get("high_water", 0)),
        )
        buckets = sorted(
            (int(f.rsplit("|", 1)[1]), int(v))
            for f, v in raw.items()
            if f.startswith("latency|le|")
        )
        count = int(raw.get("latency|count", 0))
        yield HistogramMetricFamily(
            "redfleet_step_latency_seconds",
            "Model call latency.",
            buckets=[(f"{le / 1000:g}", n) for le, n in buckets] + [("+Inf", count)],
            sum_value=int(raw.get("latency|sum", 0)) / 1000,
        )

    def _gauges(self) -> Iterator[Metric]:
        state = self.state
        active = state.jobs.active()
        tasks = GaugeMetricFamily(
            "redfleet_tasks",
            "Tasks of unfinished jobs, by role and status.",
            labels=["role", "status"],
        )
        by_status: Counter[tuple[str, str]] = Counter()
        for job_id in active:
            for task in state.tasks.list(job_id):
                by_status[(task.role.value, task.status.value)] += 1
        for (role, status), n in sorted(by_status.items()):
            tasks.add_metric([role, status], n)
        yield tasks
        claims = GaugeMetricFamily("redfleet_claims_live", "Live claims, by role.", labels=["role"])
        for role, n in sorted(Counter(t.role.value for t, _ in state.tasks.claims(active)).items()):
            claims.add_metric([role], n)
        yield claims
        depth = GaugeMetricFamily(
            "redfleet_queue_depth", "Envelopes waiting in each role queue.", labels=["queue"]
        )
        for queue, n in state.delivery.depths().items():
            depth.add_metric([queue], n)
        yield depth
        live = state.workers.list()
        workers = GaugeMetricFamily(
            "redfleet_workers", "Live worker processes, by role, state.", labels=["role", "state"]
        )
        for (role, st), n in sorted(Counter((w.role.value, w.state) for w in live).items()):
            workers.add_metric([role, st], n)
        yield workers
        slots = GaugeMetricFamily(
            "redfleet_worker_slots",
            "Task slots of the live workers, by role and state (busy: holding a task).",
            labels=["role", "state"],
        )
        by_slot: Counter[tuple[str, str]] = Counter()
        for w in live:
            by_slot[(w.role.value, "busy")] += w.busy
            by_slot[(w.role.value, "idle")] += w.slots - w.busy
        for (role, st), n in sorted(by_slot.items()):
            slots.add_metric([role, st], n)
        yield slots
        yield GaugeMetricFamily("redfleet_jobs_active", "Jobs not yet finished.", value=len(active))


def registry(state: State) -> CollectorRegistry:
    """A registry holding only the fleet's collector (no process metrics of this process)."""
    fleet = CollectorRegistry(auto_describe=False)
    fleet.register(FleetCollector(state))
    return fleet


def serve(state: State, port: int, host: str = "127.0.0.1") -> Thread:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread; returns it.

    CoordinatorError naming the option when it cannot listen there (in use,
    not an address of this machine).
    """
    try:
        _server, thread = start_http_server(port, addr=host, registry=registry(state))
    except OSError as exc:
        raise CoordinatorError(
            f"--metrics-port/--metrics-host: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    return thread
