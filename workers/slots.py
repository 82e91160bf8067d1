"""Task slots: the RQ workers of one worker process, one per slot, each in its own thread.

A worker process runs ``--concurrency`` slots. Each slot is a whole RQ
worker — its own registration (``<worker id>/<slot>``, so `rq info` lists
every slot, busy or idle), its own blocking dequeue on the role queue (RQ's
atomic BLMOVE path: one envelope to one slot) and its own Redis client —
running RQ's work loop in a thread. Threads, not processes or asyncio: a
task spends nearly all its time waiting on a model over HTTP, and threads
share the process's tokenizer, provider client and connection pools while
the code of a task stays the synchronous code it is (see the README,
"Concurrency", for the measurements).

Signals belong to the process's main thread (``runtime``): a slot installs
no handlers and is stopped through ``stop``. A slot waiting in its dequeue
is woken by ``unblock`` (CLIENT UNBLOCK on the connections named after the
process's slots), so a drain does not wait out RQ's dequeue timeout. Only
slot 0 subscribes to RQ's command channel, for `rq`'s shutdown command
(which stops the whole process: RQ sends the process SIGINT); the commands
about one job (stop-job, kill-horse) have no horse to act on in an
in-process worker, and are not listened for on the other slots.

Riding out Redis: RQ's dequeue retries connection errors itself; any other
end of RQ's work loop that no stop asked for (a Redis timeout, an error its
bookkeeping could not survive) is followed by waiting until Redis answers
(pinging at pauses from 0.5 s doubling to 5 s) and a fresh RQ loop for the
slot — no exit, so no restart storm, and the other slots go on.
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import datetime
from typing import Protocol

import redis
import structlog
from redis.client import Pipeline
from rq import SimpleWorker
from rq.exceptions import StopRequested
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.rate_limit import release_slot
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.timeouts import BaseDeathPenalty
from rq.utils import now as rq_now
from rq.worker import WorkerStatus

from shared_state.client import Client, ClientOptions, Queued, sibling

log = structlog.get_logger("redfleet.worker")

# RQ blocks in its dequeue for worker_ttl - 15 s and raises its client's socket
# timeout to worker_ttl - 5 s: 35 keeps a silent connection noticed within 30 s.
RQ_WORKER_TTL_S = 35
# RQ's client retries a dropped connection; a longer outage ends RQ's loop and
# the slot's own loop (``serve``) waits it out.
RQ_CLIENT = ClientOptions(socket_timeout_s=RQ_WORKER_TTL_S - 5, retries=3)
_PROBE = ClientOptions(socket_timeout_s=2.0, connect_timeout_s=2.0, retries=0)
_RESUME_FIRST_S = 0.5
_RESUME_CAP_S = 5.0
_STEADY_S = 30.0  # an RQ loop that ran this long was no quick failure: the pause starts over
RESTART_PAUSE_S = 1.0  # before a slot whose loop raised starts it again
# The longest RQ's command thread (slot 0: `rq`'s shutdown and kill-horse commands) waits
# in one turn. RQ starts it with 60 s, and redis-py's ``stop`` joins it with no limit: a
# stop that came after the unsubscribe's reply and before the thread's next turn waited
# those 60 s, past the fleet's drain timeout, and the worker was killed.
COMMANDS_TURN_S = 1.0
# How long a stop waits for that thread. Redis away, one turn is the client's retries
# (seconds, more when stalled); the thread, a daemon, then ends with the process.
COMMANDS_STOP_S = 2.0
_BLOCKING = {"blmove", "brpoplpush", "blpop", "brpop"}
_BEAT_MARGIN_S = 1.0  # a tick may run late by this much and still come first
# RQ heartbeats a worker up to five times a job, each an HSET and two EXPIREs sent one
# by one, and the key lives worker_ttl + 60 s (95). A slot's record is beaten at most
# this often, each beat in one round trip; and while the process's heartbeat tick sends
# them for every slot (``SlotBeats``), a slot sends none of its own.
RQ_HEARTBEAT_EVERY_S = 30.0


class _LeaseDecides(BaseDeathPenalty):
    """No RQ job timeout: the lease decides when a task is lost.

    RQ's default arms SIGALRM, which only the main thread may do.
    """

    def setup_death_penalty(self) -> None:
        pass

    def cancel_death_penalty(self) -> None:
        pass


def _plain(job: Job) -> bool:
    """An envelope as ``Delivery.send`` makes it: no callbacks or webhooks as it ends."""
    return job.success_callback is None and job.failure_callback is None and not job.webhooks


_start = threading.local()  # .writes: RQ's writes as this thread's envelope starts, unsent


def take_start_writes() -> list[Queued]:
    """RQ's writes as the envelope this slot thread runs starts (its status and start, the
    execution record, the slot "busy"), as its pipeline queued them, for the task's claim
    to carry in its round trip (``TaskStore.claim``'s ``carrying``); none once taken, or
    outside a slot. What no claim took is written as the envelope ends, before its end."""
    writes = getattr(_start, "writes", None) or []
    _start.writes = None
    return writes


def keep_start_writes(writes: list[Queued]) -> None:
    """Put back what ``take_start_writes`` gave, for a claim that raised before Redis
    answered it: written as the envelope ends (again, if they went: each is idempotent)."""
    _start.writes = writes or None


def slot_name(worker_id: str, slot: int) -> str:
    return f"{worker_id}/{slot}"


class Choice(Protocol):
    """Which envelope a slot runs, given the one its dequeue took (the process's fair
    share, ``runtime.WorkerRuntime``): that one, or another swapped in its place; counted
    as running until ``release`` after the task."""

    def choose(self, rq_id: str) -> str: ...

    def release(self) -> None: ...


class SlotBeats:
    """The RQ records of a process's slots, kept alive from its heartbeat tick.

    RQ heartbeats each worker from its own loop: a slot waiting in its dequeue
    woke every dequeue timeout to send one, a round trip of its own beside the
    dequeue's. The process's heartbeat thread makes a round trip a tick
    anyway; it carries the heartbeats of every slot that is due (``queue``),
    so a slot's heartbeats cost no round trip of their own. A slot still sends
    its own when the ticks have not sent one for ``RQ_HEARTBEAT_EVERY_S``
    (Redis was away, or the ticks are further apart than that).
    """

    def __init__(self) -> None:
        self._workers: dict[str, SlotWorker] = {}  # by slot: its RQ worker of the moment
        self._lock = threading.Lock()

    def add(self, slot: str, worker: SlotWorker) -> None:
        with self._lock:
            self._workers[slot] = worker

    def remove(self, worker: SlotWorker) -> None:
        """Before ``worker`` records its death (or as its loop ends): no later tick beats it.
        (One already on its way may still reach its dead record, which then lives 95 s
        instead of 60: a birth under that name is still allowed.)"""
        with self._lock:
            for slot, known in list(self._workers.items()):
                if known is worker:
                    del self._workers[slot]

    def queue(self, pipe: Pipeline, interval_s: float) -> list[tuple[SlotWorker, datetime]]:
        """Queue on ``pipe`` the heartbeat of each slot that, without one now, could be
        due by its own reckoning before the next tick (``interval_s`` away): each with
        the heartbeat it had before, for ``unsent``.

        Only of an RQ worker whose birth is recorded: a record a tick made first would
        read to RQ as a live worker of that name, and refuse the birth."""
        due_at = max(0.0, RQ_HEARTBEAT_EVERY_S - interval_s - _BEAT_MARGIN_S)
        with self._lock:
            workers = list(self._workers.values())
        queued = []
        for worker in workers:
            last = worker.last_heartbeat
            if worker.born and last is not None and (rq_now() - last).total_seconds() >= due_at:
                worker.heartbeat(None, pipe)  # which takes now for its last heartbeat
                queued.append((worker, last))
        return queued

    @staticmethod
    def unsent(queued: list[tuple[SlotWorker, datetime]]) -> None:
        """The tick that carried ``queued`` failed: each slot's last heartbeat is the one
        it had, so that the slot, or the next tick, sends one."""
        for worker, last in queued:
            worker.last_heartbeat = last


class SlotWorker(SimpleWorker):
    """RQ's in-process worker, run in a slot's thread.

    ``stopping`` asks it to end after the task it runs (a warm stop);
    ``drained`` tells that a burst found the queue empty (or the fleet under
    `rq suspend`) — anything else that ends ``work`` is a failure to ride out.
    """

    # RQ doubles its pause between failed dequeues up to 60 s: after an outage it
    # would sleep on long after Redis is back.
    max_connection_wait_time = _RESUME_CAP_S
    death_penalty_class = _LeaseDecides

    def __init__(
        self,
        *args: object,
        stop: threading.Event,
        waiting: threading.Event,
        commands: bool,
        suspended: threading.Event | None = None,
        choice: Choice | None = None,
        beats: SlotBeats | None = None,
        **kwargs: object,
    ) -> None:
        self.stopping = stop
        self.beats = beats
        self.choice = choice
        self.suspended = suspended  # set while `rq suspend` holds (None: RQ looks each turn)
        self.waiting = waiting  # set while it waits in its dequeue: what ``unblock`` wakes
        self.commands = commands
        self.drained = False
        self._starting: Pipeline | None = None  # ``prepare_execution``'s writes, not yet sent
        self._written: str | None = None  # the state last written to RQ's record of the slot
        self.born = False  # its birth recorded: its record is there to beat (``SlotBeats``)
        super().__init__(*args, **kwargs)

    def _install_signal_handlers(self) -> None:
        pass  # signals reach the main thread only (``runtime``), which sets ``stopping``

    def register_birth(self) -> None:
        super().register_birth()
        self.born = True

    def subscribe(self) -> None:
        """RQ's own, with a turn of ``COMMANDS_TURN_S``: a stop waits on it that long while
        Redis answers (a turn with nothing to read sends nothing)."""
        if not self.commands:
            return
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=COMMANDS_TURN_S,
            daemon=True,
            exception_handler=self._pubsub_exception_handler,
        )

    def unsubscribe(self) -> None:
        """RQ's own, its wait on the thread bounded (``COMMANDS_STOP_S``)."""
        if self.pubsub_thread is None:
            return
        self.pubsub.unsubscribe()
        self._stop_commands()

    def _stop_commands(self) -> None:
        assert self.pubsub_thread is not None
        self.pubsub_thread.stop(timeout=COMMANDS_STOP_S)
        if not self.pubsub_thread.is_alive():  # else it closes the connection as it ends
            self.pubsub.close()

    def check_for_suspension(self, burst: bool) -> None:
        # Called at the top of every turn of RQ's loop: where it looks for a stop. RQ
        # looks for `rq suspend` here too, an EXISTS (and a heartbeat) every turn; the
        # process's heartbeat looks once a tick for all its slots (``suspended``), and
        # RQ's own wait (looking every second until `rq resume`) runs only once it saw it.
        if self.stopping.is_set():
            self._stop_requested = True
        if self.suspended is None or self.suspended.is_set():
            try:
                super().check_for_suspension(burst)
            except StopRequested:
                self.drained = True  # a burst ends on `rq suspend`, as RQ's own does
                raise

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        if pipeline is not None or timeout is not None:
            super().heartbeat(timeout, pipeline)
            return
        last = self.last_heartbeat
        if last is not None and (rq_now() - last).total_seconds() < RQ_HEARTBEAT_EVERY_S:
            return
        with self.connection.pipeline(transaction=False) as pipe:
            super().heartbeat(None, pipe)
            pipe.execute()

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> None:
        # RQ records "idle" as a job ends and again as the next dequeue starts: once will do.
        # A state queued on a pipeline is written once that pipeline is (``_written``); one
        # whose pipeline failed (Redis away as the job ended) is written again, and raises
        # there while Redis stays away.
        if pipeline is not None:
            self._written = None
            super().set_state(state, pipeline)
            return
        if state == self._written:
            return
        super().set_state(state)
        self._written = state

    # One envelope's bookkeeping, in no round trip of its own where RQ takes seven:
    # its writes as a job starts (the execution record, "busy", the job's status) go
    # with the task's claim, the run's first round trip (``take_start_writes``; with
    # no claim to carry them, as the envelope ends, before its end writes), and its
    # writes as a job ends (its status, the counters, the execution's removal,
    # "idle"), one MULTI, with the slot's next command: its next dequeue
    # (``Client.carry``). What is left out, because an
    # envelope has no use for it:
    # - the job's own heartbeat as it starts (an HSET of ``last_heartbeat``, which
    #   the job's status write repeats) and as it ends (it keeps a job listed as
    #   started while its callbacks run: envelopes have none);
    # - its result: RQ stores the return value in a stream of its own, where an
    #   envelope returns None (the task's outcome is the task's own), and writes the
    #   status on its own before the whole record (here one write holds both);
    # - the expiry of its dependents and dependencies, and the WATCH that guards
    #   moving dependents to ready: nothing depends on an envelope (nothing but
    #   ``Delivery.send`` enqueues on a role queue, and it sets no ``depends_on``).
    # `rq info` and RQ's registries see it as any finished job: status, end, the
    # finished registry, the expiry. A job with callbacks or repeats, one that returned
    # something, or one whose result is not kept for a while (``result_ttl`` 0 or -1)
    # takes RQ's own path.
    # ``benchmarks/rq_settings.py`` measures each of these against RQ's own.

    def prepare_execution(self, job: Job) -> Execution:
        pipe = self.connection.pipeline()
        execution = Execution.create(
            job, self.get_heartbeat_ttl(job), pipeline=pipe, worker_name=self.name
        )
        self.executions[execution.id] = execution
        self.set_state(WorkerStatus.BUSY, pipeline=pipe)
        self._starting = pipe  # completed by ``prepare_job_execution``, next in RQ's path
        return execution

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        pipe, self._starting = self._starting, None
        if pipe is None:
            super().prepare_job_execution(job, remove_from_intermediate_queue)
            return
        with pipe:
            self.heartbeat(self.get_heartbeat_ttl(job), pipeline=pipe)
            job.prepare_for_execution(self.name, pipeline=pipe)
            pipe.persist(job.key)
            if remove_from_intermediate_queue:
                # RQ asks this only of a worker on one queue: the job's.
                pipe.lrem(self.queues[0].intermediate_queue_key, 1, job.id)
            # Not sent here: the task's claim carries them, next in this thread.
            _start.writes = list(pipe.command_stack)
        self._written = WorkerStatus.BUSY

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        # Every end of an envelope passes here first: the start writes no claim carried (a
        # duplicate delivery, a task gone) go before the writes that end it.
        writes = take_start_writes()
        if writes:
            try:
                with self.connection.pipeline() as pipe:
                    pipe.command_stack.extend(writes)
                    pipe.execute()
            except redis.RedisError as exc:  # RQ's records only: its end writes go on
                log.warning("slot.start_unwritten", worker=self.name, error=str(exc))
        if _plain(job):
            job.ended_at = rq_now()
            return
        super().handle_execution_ended(job, queue, heartbeat_ttl)

    def handle_job_success(
        self,
        job: Job,
        queue: Queue,
        started_job_registry: StartedJobRegistry,
        execution: Execution,
    ) -> None:
        result_ttl = job.get_result_ttl(self.default_result_ttl)
        returned = job._result is not None  # RQ's record of what it returned (an envelope: None)
        if not _plain(job) or job.repeats_left or result_ttl <= 0 or returned:
            super().handle_job_success(job, queue, started_job_registry, execution)
            return
        assert job.started_at is not None and job.ended_at is not None
        with self.connection.pipeline() as pipe:
            self.increment_successful_job_count(pipeline=pipe)
            self.increment_total_working_time(job.ended_at - job.started_at, pipe)
            job._status = JobStatus.FINISHED
            # The whole record, status and end with it (one HSET, as RQ's two): an envelope
            # discarded meanwhile (``Delivery.discard``) may have expired, and a record of
            # only the fields that changed is one RQ's tools cannot read.
            job.save(pipeline=pipe, include_meta=False, include_result=False)
            job.finished_job_registry.add(job, result_ttl, pipe)
            pipe.expire(job.key, result_ttl)
            self.cleanup_execution(job, pipeline=pipe, execution=execution)
            self.set_state(WorkerStatus.IDLE, pipeline=pipe)
            if isinstance(self.connection, Client) and not job.has_rate_limit:
                # Carried by the slot's next command (its next dequeue), in its round trip;
                # a rate limit's slot is released only once they are written.
                self.connection.carry(list(pipe.command_stack), self._end_refused)
            else:
                pipe.execute()
        self._written = WorkerStatus.IDLE
        release_slot(job)

    def _end_refused(self, error: Exception) -> None:
        self._written = None  # "idle" may not be written: the next dequeue writes it
        log.warning("slot.end_unwritten", worker=self.name, error=str(error))

    def set_shutdown_requested_date(self) -> None:
        # Not written: RQ writes it from the signal handler, in the middle of a task,
        # where a call stalled by a partition would freeze the task and an error would
        # surface in its code. Only `rq info` shows it.
        pass

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        if self.stopping.is_set():
            raise StopRequested()
        self.waiting.set()
        try:
            found = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        except redis.ResponseError as exc:
            if "UNBLOCKED" in str(exc) and self.stopping.is_set():
                raise StopRequested() from None  # woken by ``unblock``: the drain
            raise
        finally:
            self.waiting.clear()
        self.drained = found is None  # only a burst (or an idle limit) comes back empty
        if found is None or self.choice is None:
            return found
        job, queue = found
        chosen = self.choice.choose(job.id)
        if chosen == job.id:
            return found
        try:
            swapped = Queue._fetch_dequeued_job(
                self.connection, queue.key, chosen, job_class=self.job_class,
                serializer=self.serializer, death_penalty_class=self.death_penalty_class,
            )  # fmt: skip
            if swapped is not None:
                swapped[0].redis_server_version = self.get_redis_server_version()  # as RQ's
        except BaseException:  # no task will run for the count ``choose`` took
            self.choice.release()
            raise
        if swapped is None:  # its envelope expired since it was sent: take the next one
            self.choice.release()
            return self.dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        return swapped

    def execute_job(self, job: Job, queue: Queue) -> None:
        try:
            super().execute_job(job, queue)
        finally:
            if self.choice is not None:
                self.choice.release()

    def teardown(self) -> None:
        if self.beats is not None:
            self.beats.remove(self)
        try:
            super().teardown()  # its record of its death sends what its client carries first
        finally:
            # Not written (Redis away): not carried into the next RQ worker of the slot,
            # whose first command would write this one's counters and state after its death
            # (bringing back its record, with no expiry).
            if isinstance(self.connection, Client) and (dropped := self.connection.drop_carried()):
                log.warning("slot.end_unwritten", worker=self.name, dropped=dropped)
            # register_death fails while Redis is away and skips the unsubscribe:
            # without this every resumed loop would leave a pubsub thread behind.
            if self.pubsub_thread is not None and self.pubsub_thread.is_alive():
                self._stop_commands()  # no UNSUBSCRIBE: Redis did not take the last write


def serve(
    name: str,
    queue: str,
    client: redis.Redis,
    stop: threading.Event,
    waiting: threading.Event,
    *,
    burst: bool,
    commands: bool,
    suspended: threading.Event | None = None,
    choice: Choice | None = None,
    beats: SlotBeats | None = None,
) -> None:
    """Run one slot's RQ work loop until a stop is asked for or a burst empties the queue.

    A loop that ends otherwise (RQ logs why) runs again once Redis answers, as
    a fresh RQ worker: RQ refuses a second birth under one name while the
    first was never recorded dead. The pause before it grows while loops keep
    ending quickly, so a fault that persists is no busy loop.
    """
    probe = sibling(client, _PROBE)
    pause = _RESUME_FIRST_S
    try:
        for generation in itertools.count():
            if stop.is_set():
                return
            started = time.monotonic()
            rq_worker = None
            error = "RQ's work loop ended"
            try:
                rq_worker = SlotWorker(
                    [queue],
                    name=f"{name}.{generation}" if generation else name,
                    connection=client,
                    serializer=JSONSerializer,
                    worker_ttl=RQ_WORKER_TTL_S,
                    stop=stop,
                    waiting=waiting,
                    commands=commands,
                    suspended=suspended,
                    choice=choice,
                    beats=beats,
                )
                if beats is not None:
                    beats.add(name, rq_worker)  # in place of the slot's last RQ worker
                rq_worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                error = str(exc)
            except StopRequested:
                pass  # stopped before RQ's loop was entered: ``stop`` is set
            finally:
                if beats is not None and rq_worker is not None:
                    beats.remove(rq_worker)  # its loop is over, its death recorded or not
            if stop.is_set() or (rq_worker is not None and rq_worker.drained):
                return
            if time.monotonic() - started > _STEADY_S:
                pause = _RESUME_FIRST_S
            log.warning("worker.rq_loop_ended", worker=name, error=error, resume_in_s=pause)
            if not _await_redis(probe, stop, pause):
                return
            log.info("worker.resumed", worker=name, generation=generation + 1)
            pause = min(pause * 2, _RESUME_CAP_S)
    finally:
        probe.close()


def _await_redis(probe: redis.Redis, stop: threading.Event, pause: float) -> bool:
    """Wait until Redis answers (True) or a stop is asked for (False), at growing pauses."""
    while not stop.wait(pause):
        try:
            probe.ping()
            return True
        except redis.RedisError:
            pause = min(pause * 2, _RESUME_CAP_S)
    return False


def slot_client(client: redis.Redis, name: str) -> redis.Redis:
    """The slot's own client, its connections named after the slot (for ``unblock``)."""
    return sibling(client, RQ_CLIENT.with_(client_name=name))


def unblock(client: redis.Redis, worker_id: str) -> int:
    """Wake this process's slots waiting in a blocking dequeue; how many were woken.

    CLIENT UNBLOCK ... ERROR makes the waiting BLMOVE fail at once with
    UNBLOCKED, which a stopping slot takes for its stop. One CLIENT LIST:
    O(clients of the server), so the caller asks only while a slot waits, and
    not often. Best effort: a slot not woken still ends at its dequeue timeout.
    """
    prefix = f"{worker_id}/"
    woken = 0
    for entry in client.client_list():
        if entry.get("name", "").startswith(prefix) and entry.get("cmd") in _BLOCKING:
            woken += int(client.client_unblock(int(entry["id"]), error=True))
    return woken
