"""A failed attempt's retry waits out a backoff by kind of failure, on Redis time (real server).

The policy is ``shared_state/backoff.py``; the delay is the scripts' (``failAttempt``):
min(cap, base * 2^(attempt - 1)) * (1 + jitter) / 2.
"""

from __future__ import annotations

import json
import socket

import pytest

from coordinator.reaper import Reaper
from coordinator.views import job_doc, task_rows
from shared_state import JobSpec, Role, Scenario, State, TaskStatus
from shared_state import backoff as policy
from shared_state.backoff import RETRY, Failure
from shared_state.scripts import server_ms

from .conftest import events_named, wait_for
from .helpers import job_with_children
from .test_admission import openai_env
from .test_agent_jobs import GOAL
from .test_cli import run


def envelopes_for(state: State, task_id: str) -> int:
    """The envelopes waiting in the coder queue for ``task_id``."""
    return sum(task_id in rq_id for rq_id in state.delivery.queues[Role.CODER].job_ids)


def retry_in(state: State, job_id: str) -> int:
    return int(events_named(state, job_id, "task.requeued")[-1].model_extra["retry_in_ms"])


def test_a_retry_is_refused_and_not_sent_until_due_then_the_reaper_sends_it(
    state: State,
) -> None:
    job, _, (child,) = job_with_children(state, 1)
    reaper = Reaper(state, redeliver_after_ms=60_000)
    first = state.tasks.claim(job.job_id, child, "w1", 10_000)
    assert first is not None
    sent = envelopes_for(state, child)
    failed_at = server_ms(state.client)
    assert state.tasks.fail(first.claim, "flaky", kind=Failure.ERROR) == "requeued"

    delay = retry_in(state, job.job_id)
    base = RETRY[Failure.ERROR].base_ms
    assert base // 2 <= delay < base  # attempt 1: half fixed, half jitter
    task = state.tasks.get(job.job_id, child)
    assert task.status is TaskStatus.QUEUED and task.attempt == 2
    assert 0 <= task.not_before - failed_at - delay <= 50  # due at fail time + delay
    # Not delivered, not claimable, not sent by the reaper before it is due.
    assert envelopes_for(state, child) == sent
    assert state.tasks.claim(job.job_id, child, "w2", 10_000) is None
    assert reaper.tick().due == []
    assert envelopes_for(state, child) == sent

    wait_for(lambda: child in reaper.tick().due, 10, "the reaper to send the due retry")
    assert server_ms(state.client) >= task.not_before
    assert envelopes_for(state, child) == sent + 1
    assert [e.task_id for e in events_named(state, job.job_id, "task.due")] == [child]
    second = state.tasks.claim(job.job_id, child, "w2", 10_000)
    assert second is not None and second.task.attempt == 2
    assert reaper.tick().due == []  # sent once


def test_each_attempt_doubles_the_delay_and_the_jitter_spans_its_upper_half(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _, (child,) = job_with_children(state, 1, max_attempts=10)
    reaper = Reaper(state, redeliver_after_ms=60_000)
    base = RETRY[Failure.ERROR].base_ms
    seen = []
    for n, jitter in enumerate((0.0, 0.0, 0.999)):
        if n:
            wait_for(lambda: child in reaper.tick().due, 20, "the retry to be due")
        monkeypatch.setattr(policy.random, "random", lambda j=jitter: j)
        claimed = wait_for(lambda: state.tasks.claim(job.job_id, child, "w", 10_000), 20)
        state.tasks.fail(claimed.claim, "flaky")
        seen.append(retry_in(state, job.job_id))
    assert seen == [base // 2, base, int(4 * base * (1 + 0.999) / 2)]


def test_a_provider_failure_backs_off_longest_and_a_final_one_not_at_all(state: State) -> None:
    job, _, (a, b) = job_with_children(state, 2)
    first = state.tasks.claim(job.job_id, a, "w1", 10_000)
    state.tasks.fail(first.claim, "provider down", kind=Failure.PROVIDER)
    provider = RETRY[Failure.PROVIDER].base_ms
    assert provider // 2 <= retry_in(state, job.job_id) < provider
    assert RETRY[Failure.PROVIDER].base_ms > RETRY[Failure.ERROR].base_ms

    # `status` says when it is sent again.
    doc = job_doc(state, state.jobs.get(job.job_id))
    row = next(t for t in doc["tasks"] if t["task_id"] == a)
    assert row["status"] == "queued"  # --json keeps the status; the table says the wait
    assert provider // 2 - 1_000 <= row["retry_in_ms"] < provider
    (shown,) = [t for t in task_rows(doc["tasks"]) if t["task_id"] == a]
    assert shown["status"] == f"queued, retry in {-(-row['retry_in_ms'] // 1000)} s"

    other = state.tasks.claim(job.job_id, b, "w2", 10_000)
    assert state.tasks.fail(other.claim, "broken input", retryable=False) == "dead"
    assert state.tasks.get(job.job_id, b).status is TaskStatus.DEAD


def test_a_lost_workers_task_is_taken_over_at_once(state: State) -> None:
    job, _, (child,) = job_with_children(state, 1)
    state.tasks.claim(job.job_id, child, "w1", 1)
    wait_for(lambda: state.tasks.get(job.job_id, child).lease_until < server_ms(state.client))
    assert state.tasks.reap(job.job_id, child) == "requeued"
    assert retry_in(state, job.job_id) == 0 == RETRY[Failure.LOST].base_ms
    assert state.tasks.claim(job.job_id, child, "w2", 10_000) is not None


def test_a_users_retry_sends_a_waiting_retry_at_once(state: State, redis_url: str) -> None:
    job, _, (a, b) = job_with_children(state, 2)
    first = state.tasks.claim(job.job_id, a, "w1", 10_000)
    state.tasks.fail(first.claim, "provider down", kind=Failure.PROVIDER)  # waits 15 s or more
    other = state.tasks.claim(job.job_id, b, "w2", 10_000)
    state.tasks.fail(other.claim, "broken input", retryable=False)  # and the job fails
    assert state.jobs.get(job.job_id).status == "failed"

    done = run("retry", job.job_id, "--json", url=redis_url)
    assert done.returncode == 0, done.stderr
    assert b in json.loads(done.stdout)["requeued"]
    assert state.tasks.get(job.job_id, a).not_before <= server_ms(state.client)
    assert state.tasks.claim(job.job_id, a, "w3", 10_000) is not None


def test_a_provider_down_past_its_wait_fails_the_attempt_and_status_says_when_it_retries(
    state: State, redis_url: str, start_fleet
) -> None:
    with socket.socket() as s:  # a port nothing listens on: the provider is down
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    env = openai_env(dead, REDFLEET_PROVIDER_WAIT_S="2")
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=5_000, worker_env=env)
    job = state.jobs.submit(JobSpec(goal=GOAL, scenario=Scenario.AGENTS))

    def waiting() -> dict | None:
        shown = json.loads(run("status", job.job_id, "--json", url=redis_url).stdout)
        root = shown["tasks"][0]
        return root if root["retry_in_ms"] > 0 else None

    root = wait_for(waiting, 60, "the planner's attempt to fail and wait")
    assert root["attempts"] == 2 and "ProviderUnavailable" in root["error"]
    provider = RETRY[Failure.PROVIDER].base_ms
    assert provider // 2 - 5_000 <= root["retry_in_ms"] < provider
    printed = run("status", job.job_id, url=redis_url).stdout
    assert "queued, retry in" in printed
    # Nobody took it up meanwhile: one claim so far, and the job still runs.
    assert len(events_named(state, job.job_id, "task.claimed")) == 1
    assert state.jobs.get(job.job_id).status == "running"
