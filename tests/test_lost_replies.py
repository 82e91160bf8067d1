"""Replies lost on the wire and stalled connections, through a loopback proxy.

Each test arms ``FaultProxy.drop_reply`` for one script: the command reaches
the real server and runs, its reply never reaches the client, whose
connection is cut. The client retries (``shared_state.client``) and every
script is idempotent for its caller, so the retry gets the first call's
answer and no effect happens twice.
"""

from __future__ import annotations

import contextlib
import time

import pytest
import redis

from shared_state import (
    BudgetExceeded,
    Child,
    ConnectionTimedOut,
    Envelope,
    Fenced,
    ForeignTarget,
    JobSpec,
    Role,
    Scenario,
    State,
    SubmitUnconfirmed,
    TaskStatus,
    keys,
)
from shared_state import budget as budget_module
from shared_state import jobs as jobs_module
from shared_state.budget import TokenBudget
from shared_state.client import ClientOptions
from shared_state.jobs import SUBMIT_DEADLINE_MS
from shared_state.scripts import SCRIPTS, load
from workers.heartbeat import Heartbeat

from .conftest import events_named, wait_for
from .helpers import job_with_children
from .proxy import FaultProxy


def lose_reply_to(proxy: FaultProxy, script: str) -> None:
    proxy.drop_reply(SCRIPTS[script].sha.encode())


def waiting_envelope(state: State, job_id: str, task_id: str, role: Role) -> bool:
    envelope = state.client.hget(keys.task(job_id, task_id), "envelope")
    return envelope is not None and state.delivery.is_waiting(role, envelope.decode())


def test_a_lost_claim_reply_is_retried_and_costs_no_attempt(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP, max_attempts=1))
    lose_reply_to(proxy, "claimTask")
    claimed = remote.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    assert proxy.dropped == 1
    task = state.tasks.get(job.job_id, job.root_task)
    assert claimed is not None and claimed.claim.token == task.token
    assert (task.status, task.attempt, task.owner) == (TaskStatus.CLAIMED, 1, "w1")
    assert len(events_named(state, job.job_id, "task.claimed")) == 1


def test_a_lost_completion_reply_still_delivers_the_parent_at_once(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job, parent, (child_id,) = job_with_children(state, 1)
    child = remote.tasks.claim(job.job_id, child_id, "w1", 60_000)
    assert child is not None
    lose_reply_to(proxy, "completeTask")
    done = remote.tasks.complete(child.claim, parent.task_id, "ok")
    assert proxy.dropped == 1
    assert done.parent_requeued == parent.task_id
    # Delivered by the retrying caller, not 5 s later by the reaper.
    assert waiting_envelope(state, job.job_id, parent.task_id, Role.PLANNER)
    assert len(events_named(state, job.job_id, "task.succeeded")) == 1
    assert not events_named(state, job.job_id, "task.fenced")


def test_a_lost_completion_reply_of_the_root_still_reports_the_job_finished(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    root = remote.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    lose_reply_to(proxy, "completeTask")
    assert remote.tasks.complete(root.claim, "", "done").job_finished
    assert len(events_named(state, job.job_id, "job.succeeded")) == 1


def test_a_lost_spawn_reply_creates_the_children_once_and_delivers_them(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    root = remote.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    lose_reply_to(proxy, "spawnChildren")
    ids = remote.tasks.spawn(root.claim, "review", [Child(Role.CODER, f"c{i}") for i in range(3)])
    assert proxy.dropped == 1
    tasks = state.tasks.list(job.job_id)
    assert sorted(t.task_id for t in tasks if t.parent_id) == sorted(ids)
    assert state.tasks.get(job.job_id, root.task.task_id).pending == 3
    assert all(waiting_envelope(state, job.job_id, i, Role.CODER) for i in ids)
    assert len(events_named(state, job.job_id, "task.waiting")) == 1


def test_a_lost_failure_reply_requeues_once_and_delivers_at_once(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP, max_attempts=3))
    root = remote.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    lose_reply_to(proxy, "failTask")
    assert remote.tasks.fail(root.claim, "boom") == "requeued"
    task = state.tasks.get(job.job_id, job.root_task)
    assert (task.status, task.attempt) == (TaskStatus.QUEUED, 2)  # not 3
    assert waiting_envelope(state, job.job_id, job.root_task, Role.PLANNER)
    assert len(events_named(state, job.job_id, "task.failed")) == 1


def test_a_lost_submit_reply_still_returns_the_one_job_it_created(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    lose_reply_to(proxy, "submitJob")
    job = remote.jobs.submit(JobSpec(goal="once", scenario=Scenario.NOOP))
    assert proxy.dropped == 1
    assert [j.decode() for j in state.client.zrange(keys.JOBS, 0, -1)] == [job.job_id]
    assert state.jobs.get(job.job_id).goal == "once"
    assert job.created_ms == state.jobs.get(job.job_id).created_ms > 0
    assert len(events_named(state, job.job_id, "job.submitted")) == 1
    assert waiting_envelope(state, job.job_id, job.root_task, Role.PLANNER)


def test_lost_budget_and_usage_replies_count_once(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", token_budget=10_000))
    budget = remote.budget(job.job_id)
    lose_reply_to(proxy, "reserveTokens")
    held = budget.reserve(1_000)
    assert state.budget(job.job_id).state().reserved == 1_000
    lose_reply_to(proxy, "settleTokens")
    budget.settle(held, 400)
    lose_reply_to(proxy, "recordUsage")
    remote.usage(job.job_id).record(
        input_tokens=300, cached_tokens=100, output_tokens=100, cost_usd=0.01, event={"step": 1}
    )
    assert proxy.dropped == 3
    final = state.budget(job.job_id).state()
    assert (final.used, final.reserved) == (400, 0)
    usage = state.usage(job.job_id).get()
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (1, 300, 100)
    assert len(events_named(state, job.job_id, "model.called")) == 1


def test_a_usage_record_settles_its_calls_reservation_once_and_its_tenants_day_beside_it(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    """An answered call's record is one script for the job (usage, event, settlement) with
    the tenant's settlement riding beside it: its reply lost, it is sent again and every
    total moves once."""
    state.spend.set_limit("acme", 1.0)
    job = state.jobs.submit(JobSpec(goal="g", token_budget=10_000, budget_usd=1, tenant="acme"))
    budget = remote.budget(job.job_id, "acme")
    held = budget.reserve(1_000, 0.05)
    assert held.tenant_key == keys.tenant_spend("acme")
    budget.settle_tenant_with_next_write(held, 400, 0.01)
    lose_reply_to(proxy, "recordUsage")
    usage = remote.usage(job.job_id)
    usage.record(
        input_tokens=300, cached_tokens=0, output_tokens=100, cost_usd=0.01, settles=held.id
    )
    assert proxy.dropped == 1
    final = state.budget(job.job_id).state()
    assert (final.used, final.reserved) == (400, 0)
    spent = state.client.hmget(keys.budget(job.job_id), "used_usd", "reserved_usd")
    assert spent == [b"10000", b"0"]
    day = state.client.hmget(keys.tenant_spend("acme"), "used_usd", "reserved_usd")
    assert day == [b"10000", b"0"]
    assert state.usage(job.job_id).get().calls == 1
    assert len(events_named(state, job.job_id, "model.called")) == 1
    # A settlement sent after it (the fallback when a record was not sent) changes nothing.
    budget.settle(held, 400, 0.01)
    assert state.budget(job.job_id).state().used == 400
    assert state.client.hget(keys.tenant_spend("acme"), "used_usd") == b"10000"


def _sweep_at(state: State, job_id: str) -> int:
    return int(state.client.hget(keys.budget(job_id), "sweep_at"))


def _expiries(state: State, job_id: str) -> dict[int, int]:
    """Tokens -> expiry (ms) of each reservation held."""
    held = state.client.hgetall(keys.budget(job_id))
    return {int(v.split()[0]): int(v.split()[1]) for f, v in held.items() if f.startswith(b"r:")}


def _reserved_now(budget: TokenBudget) -> int:
    """Tokens the job's budget holds, as a reservation sees them (a probe, given back)."""
    probe = budget.reserve(1)
    budget.settle(probe, 0)
    return probe.state.reserved - 1


def test_a_reservation_never_settled_is_given_back_after_it_expires(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", token_budget=1_000))
    budget = state.budget(job.job_id)
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 3_600_000)
    budget.settle(budget.reserve(50), 50)  # settled: the earliest expiry is now a stale one
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 300)
    budget.reserve(800)  # its worker dies mid-call: never settled
    with pytest.raises(BudgetExceeded):
        budget.reserve(800)

    def reserved() -> bool:
        with contextlib.suppress(BudgetExceeded):
            return budget.reserve(800).state.reserved == 800
        return False

    wait_for(reserved, timeout=10, what="the lapsed reservation given back")


def test_expiry_is_looked_for_by_the_earliest_reservation_held(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reservation reads the whole budget hash only once one held may have expired: the
    next look is kept at the earliest expiry, whichever order the reservations came in."""
    job = state.jobs.submit(JobSpec(goal="g", token_budget=10_000))
    budget = state.budget(job.job_id)
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 3_600_000)
    budget.reserve(100)  # held an hour
    assert _sweep_at(state, job.job_id) == _expiries(state, job.job_id)[100]
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 300)
    budget.reserve(200)  # held 300 ms, reserved after the longer one
    assert _sweep_at(state, job.job_id) == _expiries(state, job.job_id)[200]
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 5_000)
    budget.reserve(400)  # held 5 s (a window a loaded machine's polls still see): the next
    # look stays at the 200's expiry
    assert _sweep_at(state, job.job_id) == _expiries(state, job.job_id)[200]
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 3_600_000)
    wait_for(lambda: _reserved_now(budget) == 500, timeout=10, what="the 200 dropped")
    # The look that dropped the 200 set the next one at the 400's expiry, not later.
    wait_for(lambda: _reserved_now(budget) == 100, timeout=10, what="the 400 dropped")
    # The next look is at the hour's expiry now; a shorter reservation brings it nearer.
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 300)
    budget.reserve(300)
    monkeypatch.setattr(budget_module, "RESERVATION_TTL_MS", 3_600_000)
    wait_for(lambda: _reserved_now(budget) == 100, timeout=10, what="the 300 dropped")


def test_a_delivery_resent_after_a_lost_reply_is_a_harmless_duplicate(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    proxy.drop_reply(b"MULTI")
    remote.delivery.send([Envelope(job.job_id, job.root_task, Role.PLANNER)])
    assert proxy.dropped == 1
    first = state.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    assert first is not None
    assert state.tasks.claim(job.job_id, job.root_task, "w2", 60_000) is None


def test_a_stalled_connection_raises_after_its_timeout_instead_of_hanging(
    state: State, proxy: FaultProxy
) -> None:
    client = State.connect(proxy.url, client_options=ClientOptions(socket_timeout_s=0.3, retries=1))
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    proxy.stall()
    started = time.monotonic()
    # A timeout, as redis-py would say (RQ's work loop tells it from a refused connection).
    with pytest.raises(ConnectionTimedOut):
        client.tasks.claim(job.job_id, job.root_task, "w1", 60_000)
    elapsed = time.monotonic() - started
    proxy.resume()
    assert elapsed < 5, f"a stalled call hung for {elapsed:.1f}s"
    # The claim reached the server before the stall hid its reply, or it did not:
    # either way a retry by the same worker now answers, with the same single claim.
    again = wait_for(lambda: client.tasks.claim(job.job_id, job.root_task, "w1", 60_000))
    assert again.claim.token == state.tasks.get(job.job_id, job.root_task).token
    claims = events_named(state, job.job_id, "task.claimed")
    assert len(claims) == 1
    client.client.close()


def test_an_owner_cannot_write_outside_its_own_jobs_records(state: State) -> None:
    job, _, (child_id,) = job_with_children(state, 1)
    owner = state.tasks.claim(job.job_id, child_id, "w1", 60_000).claim
    other = state.jobs.submit(JobSpec(goal="other", scenario=Scenario.NOOP))
    state.tasks.owner_write(owner, [(keys.workspace(job.job_id), "a.py", "a-1")])
    for target in (
        keys.workspace(other.job_id),  # another job's files
        keys.job(job.job_id),  # its own job's status
        keys.task(job.job_id, child_id),  # its own task hash
    ):
        with pytest.raises(ForeignTarget):
            state.tasks.owner_write(
                owner, [(keys.workspace(job.job_id), "b.py", "a-2"), (target, "status", "x")]
            )
    assert state.client.hgetall(keys.workspace(job.job_id)) == {b"a.py": b"a-1"}
    assert state.jobs.get(job.job_id).status.value == "running"
    assert state.tasks.get(job.job_id, child_id).status == TaskStatus.CLAIMED
    assert not state.client.exists(keys.workspace(other.job_id))


def test_a_write_after_the_lease_ran_out_is_fenced_even_before_a_takeover(
    state: State,
) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    root = state.tasks.claim(job.job_id, job.root_task, "w1", 300)
    wait_for(lambda: state.client.zscore(keys.leases(job.job_id), job.root_task) < _now(state))
    with pytest.raises(Fenced) as err:
        state.tasks.renew(root.claim, 300)
    assert err.value.current["status"] == "expired"
    with pytest.raises(Fenced):
        state.tasks.complete(root.claim, "", "late")
    assert state.tasks.get(job.job_id, job.root_task).status == TaskStatus.CLAIMED
    assert not events_named(state, job.job_id, "job.succeeded")


def test_a_script_refuses_keys_of_two_jobs(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    other = state.jobs.submit(JobSpec(goal="h", scenario=Scenario.NOOP))
    task_keys = [
        keys.task(job.job_id, job.root_task),
        keys.job(other.job_id),  # the wrong job's hash
        keys.job_events(job.job_id),
        keys.leases(job.job_id),
        keys.queued(job.job_id),
        keys.tasks(job.job_id),
    ]
    with pytest.raises(redis.ResponseError, match="not a key of the job of KEYS"):
        state.runner.run("claimTask", job.job_id, task_keys, ["w1", 1000, "1"])
    assert state.tasks.get(job.job_id, job.root_task).status == TaskStatus.QUEUED


def _now(state: State) -> int:
    sec, usec = state.client.time()
    return sec * 1000 + usec // 1000


def test_one_stalled_renewal_does_not_cost_the_lease(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    lease_ms = 3_000
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    started = time.monotonic()
    claimed = remote.tasks.claim(job.job_id, job.root_task, "w1", lease_ms)
    beat = Heartbeat(remote, worker_id="w1", role=Role.PLANNER, lease_ms=lease_ms, info={})
    lease = beat.leases[0]
    lease.hold(claimed.claim, started)
    beat.start()
    try:
        wait_for(lambda: events_named(state, job.job_id, "task.renewed"), 10, "a renewal")
        before = lease._deadline
        proxy.stall()  # the next renewal hangs until its timeout
        wait_for(lambda: not beat._reachable, 10, "a renewal to time out")
        proxy.resume()
        # A renewal that got its reply moves the local deadline on; a lost lease never does.
        wait_for(lambda: lease._deadline > before or lease.lost.is_set(), 10, "the next renewal")
        assert not lease.lost.is_set(), lease.lost_reason
    finally:
        lease.release()
        beat.stop()


def test_a_submit_that_reaches_redis_too_late_creates_nothing(state: State, monkeypatch) -> None:
    real = jobs_module.server_ms
    # As if the id had been indexed long before the script ran (a long stall between).
    monkeypatch.setattr(jobs_module, "server_ms", lambda c: real(c) - SUBMIT_DEADLINE_MS - 1_000)
    with pytest.raises(SubmitUnconfirmed, match="nothing was created") as err:
        state.jobs.submit(JobSpec(goal="late", scenario=Scenario.NOOP))
    assert not state.client.exists(keys.job(err.value.job_id))
    assert not state.client.keys(f"rf:{{{err.value.job_id}}}:*")


def test_usage_recorded_after_its_job_was_retired_expires_with_it(state: State) -> None:
    job = state.jobs.submit(JobSpec(goal="g", scenario=Scenario.NOOP))
    state.jobs.cancel(job.job_id)  # retired: its keys expire
    record = {"input_tokens": 10, "cached_tokens": 0, "output_tokens": 5, "cost_usd": 0.0}
    state.usage(job.job_id).record(**record)
    for key in (keys.usage(job.job_id), keys.usage_calls(job.job_id)):
        assert state.client.pttl(key) > 0, key
    gone = state.jobs.submit(JobSpec(goal="gone", scenario=Scenario.NOOP))
    state.client.delete(keys.job(gone.job_id))
    state.usage(gone.job_id).record(**record)
    assert not state.client.exists(keys.usage(gone.job_id), keys.usage_calls(gone.job_id))


def test_a_swap_resent_after_a_lost_reply_is_answered_as_done(
    state: State, remote: State, proxy: FaultProxy
) -> None:
    for job in ("j-a", "j-b"):
        state.delivery.send([Envelope(job, "t-1", Role.CODER)])
    queue = state.delivery.queues[Role.CODER]
    taken = state.client.lmove(queue.key, queue.intermediate_queue_key).decode()  # RQ's dequeue
    (instead,) = state.delivery.waiting(Role.CODER, 10)
    load(state.client, "swapEnvelope")  # so that the reply lost is the swap's, not NOSCRIPT
    lose_reply_to(proxy, "swapEnvelope")
    assert remote.delivery.swap(Role.CODER, taken, instead)  # the re-send: done, not gone
    assert proxy.dropped == 1
    assert state.delivery.waiting(Role.CODER, 10) == [taken]  # given back once
    assert state.client.lrange(queue.intermediate_queue_key, 0, -1) == [instead.encode()]
