"""An envelope as RQ's own tools see it once a slot has run it.

A slot writes less than RQ's worker does as a job starts and ends (no result
stream, no second job heartbeat, no dependents' expiries: ``slots``), and
`rq info`, rq-dashboard and RQ's registries must still see every envelope
as any finished RQ job: its status and times, the finished registry, its
expiry, the slot's counts.
"""

from __future__ import annotations

import threading

import pytest
import redis
import structlog
import structlog.testing
from rq import Queue
from rq import Worker as RQWorker
from rq.job import Job as RQJob
from rq.job import JobStatus
from rq.serializers import JSONSerializer

from shared_state import JobSpec, Role, Scenario, State, keys
from shared_state.client import ClientOptions, connect
from shared_state.delivery import RESULT_TTL_S
from workers import runtime, slots

from .conftest import wait_for
from .proxy import FaultProxy


def test_a_finished_envelope_is_finished_in_rqs_records_without_a_result(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    envelope = state.client.hget(keys.task(job.job_id, job.root_task), "envelope").decode()
    rt = runtime.WorkerRuntime(state, role=Role.PLANNER, lease_ms=60_000, worker_id="planner-rq")
    monkeypatch.setattr(runtime, "_runtime", rt)
    slot = "planner-rq/0"
    runtime._slot_main(
        state, rt.heartbeat.leases[0], slot, Role.PLANNER, threading.Event(),
        waiting=threading.Event(), burst=True, commands=False,
    )  # fmt: skip
    # The task ran (its claim is the one RQ's delivery led to).
    assert state.tasks.get(job.job_id, job.root_task).attempt == 1

    queue = state.delivery.queues[Role.PLANNER]
    ran = RQJob.fetch(envelope, connection=state.client, serializer=JSONSerializer)
    assert ran.get_status() == JobStatus.FINISHED
    assert ran.started_at is not None and ran.ended_at is not None
    assert ran.started_at <= ran.ended_at
    assert ran.worker_name == slot
    assert envelope in queue.finished_job_registry.get_job_ids()
    assert envelope not in queue.started_job_registry.get_job_ids()
    assert not queue.get_job_ids()  # taken off the queue, and not put back
    assert 0 < state.client.ttl(ran.key) <= RESULT_TTL_S
    assert not state.client.exists(f"rq:results:{envelope}")  # no result stream of None
    # The slot's own record, as `rq info` and rq-dashboard show it.
    worker = RQWorker.find_by_key(f"rq:worker:{slot}", connection=state.client)
    assert worker is not None
    assert worker.successful_job_count == 1
    assert worker.total_working_time > 0


def answer() -> int:
    """A job that returns something (no envelope does)."""
    return 42


def nothing() -> None:
    """A job that returns nothing, as an envelope."""


def test_a_job_with_a_result_or_kept_for_no_time_takes_rqs_own_path(state: State) -> None:
    """What a slot leaves out is what an envelope has no use for: a job that returned a
    value keeps it, and one kept for 0 s is deleted, as RQ's own worker does."""
    queue = Queue("test.slots", connection=state.client, serializer=JSONSerializer)
    kept = queue.enqueue_call(f"{__name__}.answer", result_ttl=RESULT_TTL_S)
    gone = queue.enqueue_call(f"{__name__}.nothing", result_ttl=0)
    slots.SlotWorker(
        [queue], connection=state.client, serializer=JSONSerializer, stop=threading.Event(),
        waiting=threading.Event(), commands=False, suspended=threading.Event(),
    ).work(burst=True, logging_level="WARNING", with_scheduler=False)  # fmt: skip
    ran = RQJob.fetch(kept.id, connection=state.client, serializer=JSONSerializer)
    assert ran.get_status() == JobStatus.FINISHED and ran.return_value() == 42
    assert not state.client.exists(gone.key)
    assert not queue.get_job_ids() and queue.finished_job_registry.get_job_ids() == [kept.id]


def test_a_start_no_claim_carried_is_written_before_the_envelopes_end(state: State) -> None:
    """A slot leaves RQ's start writes for the task's claim to carry; a job whose run
    makes no claim (here: not a task at all) has them written as it ends, before its end
    writes: taken off RQ's intermediate queue, finished, not left started."""
    queue = Queue("test.slots", connection=state.client, serializer=JSONSerializer)
    plain = queue.enqueue_call(f"{__name__}.nothing", result_ttl=RESULT_TTL_S)
    slots.SlotWorker(
        [queue], connection=state.client, serializer=JSONSerializer, stop=threading.Event(),
        waiting=threading.Event(), commands=False, suspended=threading.Event(),
    ).work(burst=True, logging_level="WARNING", with_scheduler=False)  # fmt: skip
    ran = RQJob.fetch(plain.id, connection=state.client, serializer=JSONSerializer)
    assert ran.get_status() == JobStatus.FINISHED
    assert ran.started_at is not None and ran.ended_at is not None
    assert queue.finished_job_registry.get_job_ids() == [plain.id]
    assert plain.id not in queue.started_job_registry.get_job_ids()
    assert not state.client.llen(queue.intermediate_queue_key)
    assert slots.take_start_writes() == []  # nothing left for a later claim to carry


def test_a_slots_rq_loop_that_ends_on_a_lost_connection_runs_again_once_redis_answers(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RQ's dequeue waits out a lost connection itself; where its loop ends anyway (here:
    its birth's write), the slot waits for Redis and runs a new RQ loop in the same
    thread, under its name and the next generation's, and that loop takes the queue."""
    queue = Queue("test.slots", connection=state.client, serializer=JSONSerializer)
    plain = queue.enqueue_call(f"{__name__}.nothing", result_ttl=RESULT_TTL_S)
    births: list[str] = []
    born = slots.SlotWorker.register_birth

    def register_birth(worker: slots.SlotWorker) -> None:
        births.append(worker.name)
        if len(births) == 1:
            raise redis.ConnectionError("lost as the slot was born")
        born(worker)

    monkeypatch.setattr(slots.SlotWorker, "register_birth", register_birth)
    with structlog.testing.capture_logs() as logs:
        slots.serve("s-rt/0", queue.name, state.client, threading.Event(), threading.Event(),
                    burst=True, commands=False, suspended=threading.Event())  # fmt: skip
    assert births == ["s-rt/0", "s-rt/0.1"]
    events = [e["event"] for e in logs if e["event"].startswith("worker.")]
    assert events == ["worker.rq_loop_ended", "worker.resumed"]
    ran = RQJob.fetch(plain.id, connection=state.client, serializer=JSONSerializer)
    assert ran.get_status() == JobStatus.FINISHED and ran.worker_name == "s-rt/0.1"


def test_an_rq_loop_that_ends_with_its_end_writes_unsent_leaves_none_to_the_next(
    state: State, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot's end writes wait for its next command; if its loop ends with Redis away
    (its record of its death unsent), they are dropped with it, not sent by the next RQ
    loop of the slot after the first one's death, which would bring back its record."""
    brittle = connect(proxy.url, ClientOptions(retries=0))
    queue = Queue("test.slots", connection=state.client, serializer=JSONSerializer)
    queue.enqueue_call(f"{__name__}.nothing", result_ttl=RESULT_TTL_S)
    died = slots.SlotWorker.register_death

    def register_death(worker: slots.SlotWorker) -> None:
        proxy.sever()  # the end writes wait, unsent, for this
        died(worker)

    monkeypatch.setattr(slots.SlotWorker, "register_death", register_death)
    worker = slots.SlotWorker(
        [Queue(queue.name, connection=brittle, serializer=JSONSerializer)],
        name="brittle/0", connection=brittle, serializer=JSONSerializer,
        stop=threading.Event(), waiting=threading.Event(), commands=False,
        suspended=threading.Event(),
    )  # fmt: skip
    with structlog.testing.capture_logs() as logs, pytest.raises(redis.ConnectionError):
        # One job, then its death: no dequeue after the job to carry its end writes.
        worker.work(burst=True, max_jobs=1, logging_level="WARNING", with_scheduler=False)
    assert [e for e in logs if e["event"] == "slot.end_unwritten"]
    assert brittle.drop_carried() == 0  # nothing left for the slot's next loop to send
    brittle.close()


def test_a_slots_command_thread_stops_at_once_however_its_unsubscribe_lands(
    state: State,
) -> None:
    """Slot 0 listens for `rq`'s commands on a pubsub thread, and its teardown unsubscribes
    and stops it. Where the thread had already taken the unsubscribe's reply, it waits
    for a new subscription one turn long: RQ's turn is 60 s, and redis-py's ``stop`` joins
    it with no limit, past the fleet's 30 s drain (the worker was killed). A slot's turn
    is ``COMMANDS_TURN_S``, within the stop's own bound (``COMMANDS_STOP_S``)."""
    queue = Queue("test.commands", connection=state.client, serializer=JSONSerializer)
    worker = slots.SlotWorker(
        [queue], connection=state.client, serializer=JSONSerializer, stop=threading.Event(),
        waiting=threading.Event(), commands=True,
    )  # fmt: skip
    worker.subscribe()
    pubsub = worker.pubsub
    wait_for(lambda: pubsub.subscribed, 10, "the command channel subscribed")
    pubsub.unsubscribe()  # the thread reads its reply, then waits for a new subscription
    wait_for(lambda: not pubsub.subscribed, 10, "the thread to take the unsubscribe's reply")
    stopping = threading.Thread(target=worker.unsubscribe, daemon=True)  # as teardown does
    stopping.start()
    stopping.join(timeout=10 * slots.COMMANDS_STOP_S)
    assert not stopping.is_alive(), "the unsubscribe hung on the command thread"
    assert not worker.pubsub_thread.is_alive(), "the thread still waits out a long turn"
