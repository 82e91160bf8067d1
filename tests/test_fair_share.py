"""The fair share of a process's slots: who runs, who yields, and what it costs to ask.

Against a real Redis and real RQ queues: envelopes are sent as the fleet sends
them (``Delivery.send``), and the looks at the queue (one LRANGE each) are counted.
"""

from __future__ import annotations

import pytest

from shared_state import Envelope, Role, State
from shared_state.delivery import job_of
from workers import fair_share
from workers.fair_share import FairShare
from workers.runtime import WorkerRuntime


@pytest.fixture
def looks(state: State, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the queue was looked at (a list, so a test reads it as it grows)."""
    counted = [0]
    peek = state.delivery.waiting

    def counting(role: Role, limit: int) -> list[str]:
        counted[0] += 1
        return peek(role, limit)

    monkeypatch.setattr(state.delivery, "waiting", counting)
    return counted


def _waiting(state: State, job_id: str) -> None:
    state.delivery.send([Envelope(job_id, "t-1", Role.CODER)])


def _empty(state: State) -> None:
    state.client.delete(state.delivery.queues[Role.CODER].key)


def test_under_its_share_a_job_runs_without_a_look_at_the_queue(
    state: State, looks: list[int]
) -> None:
    fair = FairShare(state.delivery, Role.CODER, slots=4)  # a share of 2
    _waiting(state, "j-b")
    assert fair.take("j-a") == [] and fair.take("j-a") == []
    assert looks[0] == 0


def test_at_its_share_a_job_yields_to_one_waiting_under_its_share(
    state: State, looks: list[int]
) -> None:
    fair = FairShare(state.delivery, Role.CODER, slots=4)
    assert fair.take("j-a") == [] and fair.take("j-a") == []
    _waiting(state, "j-b")
    assert fair.take("j-a")
    assert looks[0] == 1
    fair.leave("j-a")  # one of its slots ends: under its share again
    assert fair.take("j-a") == []


def test_at_its_share_a_job_runs_when_nobody_else_waits(state: State, looks: list[int]) -> None:
    fair = FairShare(state.delivery, Role.CODER, slots=4)
    assert fair.take("j-a") == [] and fair.take("j-a") == []
    _waiting(state, "j-a")  # only its own envelopes wait: no slot idles for fairness' sake
    assert fair.take("j-a") == [] and looks[0] == 1


def test_a_look_that_let_a_task_run_serves_again_but_a_yield_takes_a_fresh_look(
    state: State, looks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fair_share, "PEEK_FRESH_S", 3600.0)  # no look goes stale on its own
    fair = FairShare(state.delivery, Role.CODER, slots=4)
    assert fair.take("j-a") == [] and fair.take("j-a") == []
    assert fair.take("j-a") == [] and looks[0] == 1  # nobody else waits
    _waiting(state, "j-b")
    assert fair.take("j-a") == [] and looks[0] == 1  # the recent look served: no new LRANGE
    # A look that would make a task yield is taken fresh: j-b is seen now.
    fair2 = FairShare(state.delivery, Role.CODER, slots=4)
    assert fair2.take("j-c") == [] and fair2.take("j-c") == []
    assert fair2.take("j-c") and looks[0] == 2
    # And a recent look that says another job waits is not trusted to make one yield:
    # j-b's envelope is gone, so a fresh look lets the task run.
    _empty(state)
    assert fair2.take("j-c") == [] and looks[0] == 3


def test_a_job_at_its_share_is_offered_the_envelopes_of_jobs_under_theirs_in_queue_order(
    state: State,
) -> None:
    fair = FairShare(state.delivery, Role.CODER, slots=4)
    assert fair.take("j-a") == [] and fair.take("j-a") == []  # counted: at its share now
    for job in ("j-a", "j-b", "j-c"):
        _waiting(state, job)
    offered = fair.take("j-a")
    assert [job_of(e) for e in offered] == ["j-b", "j-c"]  # not its own, in queue order
    assert offered == [e for e in state.delivery.waiting(Role.CODER, 10) if e in offered]


def test_a_swap_puts_the_taken_envelope_back_at_the_head_and_takes_the_other(
    state: State,
) -> None:
    for job in ("j-a", "j-a", "j-b"):
        _waiting(state, job)
    queue = state.delivery.queues[Role.CODER]
    taken = state.client.lmove(queue.key, queue.intermediate_queue_key).decode()  # RQ's dequeue
    first, other = state.delivery.waiting(Role.CODER, 10)
    assert state.delivery.swap(Role.CODER, taken, other)
    assert state.delivery.waiting(Role.CODER, 10) == [taken, first]  # nothing sent again
    assert state.client.lrange(queue.intermediate_queue_key, 0, -1) == [other.encode()]
    # An envelope another slot took first is not there to swap: nothing changes.
    assert not state.delivery.swap(Role.CODER, other, "j-c_t-1_000000")
    assert state.delivery.waiting(Role.CODER, 10) == [taken, first]
    assert state.client.lrange(queue.intermediate_queue_key, 0, -1) == [other.encode()]


def test_a_slot_counts_the_envelope_it_runs_and_gives_the_count_back(state: State) -> None:
    runtime = WorkerRuntime(
        state, role=Role.CODER, lease_ms=10_000, worker_id="coder-test", concurrency=4
    )
    for job in ("j-a", "j-a", "j-b"):
        _waiting(state, job)
    queue = state.delivery.queues[Role.CODER]
    runtime.fair.enter("j-a")
    runtime.fair.enter("j-a")  # two slots run j-a: its share
    taken = state.client.lmove(queue.key, queue.intermediate_queue_key).decode()  # RQ's dequeue
    chosen = runtime.choose(taken)
    assert job_of(chosen) == "j-b"  # swapped in: j-a's envelope waits at the head again
    assert state.delivery.waiting(Role.CODER, 10)[0] == taken
    assert dict(runtime.fair._running) == {"j-a": 2, "j-b": 1}
    runtime.release()  # RQ never ran it (or its dequeue broke off): the count goes
    assert dict(runtime.fair._running) == {"j-a": 2}
    # Under its share a job's envelope runs as taken, counted once.
    runtime.fair.leave("j-a")
    again = state.client.lmove(queue.key, queue.intermediate_queue_key).decode()
    assert runtime.choose(again) == again
    assert dict(runtime.fair._running) == {"j-a": 2}
    runtime.release()
    assert dict(runtime.fair._running) == {"j-a": 1}
