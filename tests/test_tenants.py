"""Tenants as a boundary for readers: the CLI's --tenant, a scoped Client, tenant dashboard tokens.

Two tenants' jobs run on one fleet; each reader scoped to tenant A must not
find B's job, nor show B's goal (a marker only B's job holds) in anything it
prints or answers, while the unscoped operator sees both.
"""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from coordinator.api import Client
from coordinator.dashboard import create_app
from coordinator.errors import CoordinatorError
from shared_state import JobNotFound, JobSpec, Scenario, State

from .test_cli import assert_one_line_error, run

A_GOAL = "write a greeting module for tenant alpha"
B_MARK = "zebra-quartz-7731"  # only tenant B's goal holds it
B_GOAL = f"write a greeting module ({B_MARK})"


@pytest.fixture
def two_tenants(state: State) -> tuple[str, str]:
    """A job of each tenant with records to read: B's goal, events and artifact hold the
    marker. No fleet: what is tested is who may read them, not how they were made."""
    a = state.jobs.submit(JobSpec(goal=A_GOAL, scenario=Scenario.AGENTS, tenant="alpha"))
    b = state.jobs.submit(JobSpec(goal=B_GOAL, scenario=Scenario.AGENTS, tenant="beta"))
    for job in (a, b):
        store = state.artifacts(job.job_id)
        store.put(f"notes on {job.goal}", kind="note", title=f"notes: {job.goal}")
        state.events.append("note.test", {"text": job.goal}, job_id=job.job_id)
    state.events.flush()
    return a.job_id, b.job_id


def test_the_cli_scoped_to_a_tenant_neither_finds_nor_shows_anothers_job(
    state: State, redis_url: str, two_tenants: tuple[str, str]
) -> None:
    a, b = two_tenants
    b_artifact = state.artifacts(b).list()[0].id
    # The operator (no tenant) sees both: the marker is there to be leaked.
    assert B_MARK in run("status", url=redis_url).stdout
    assert B_MARK in run("logs", "--last", "10000", url=redis_url).stdout

    scoped = ("--tenant", "alpha")
    listing = run(*scoped, "status", "--json", url=redis_url)
    assert [j["job_id"] for j in json.loads(listing.stdout)["jobs"]] == [a]
    everything = run(*scoped, "logs", "--last", "10000", "--all", url=redis_url)
    assert everything.returncode == 0 and a in everything.stdout
    assert B_MARK not in everything.stdout and b not in everything.stdout
    for command in (
        ("status", b),
        ("logs", b),
        ("artifacts", b),
        ("handoff", b),
        ("diff", b),
        ("cancel", b),
        ("show", b_artifact, "--job", b),
    ):
        refused = run(*scoped, *command, url=redis_url)
        assert_one_line_error(refused, b)
        assert B_MARK not in refused.stdout + refused.stderr, command
    assert run(*scoped, "show", b_artifact, url=redis_url).returncode == 2  # not searched
    assert run(*scoped, "status", a, url=redis_url).returncode == 0
    # The fleet's view: every worker, but only the tasks of the tenant's own jobs.
    held = {"pid": 1, "host": "h", "role": "coder", "state": "busy", "tasks": f"{a}/c-1 {b}/c-2"}
    state.workers.beat("w-both", 60_000, held)
    listed = json.loads(run(*scoped, "workers", "--json", url=redis_url).stdout)
    (worker,) = [w for w in listed if w["worker_id"] == "w-both"]
    assert worker["tasks"] == [f"{a}/c-1"]
    # Acting for another tenant is refused, not quietly done as this one.
    assert_one_line_error(
        run(*scoped, "submit", "x", "--tenant", "beta", url=redis_url), "alpha", "beta"
    )
    assert_one_line_error(run("--tenant", "no way", "status", url=redis_url), "tenant")


def test_a_client_given_a_tenant_reads_and_acts_for_that_tenant_only(
    state: State, redis_url: str, two_tenants: tuple[str, str]
) -> None:
    a, b = two_tenants
    with Client.connect(redis_url, tenant="alpha") as client:
        assert client.status(a)["goal"] == A_GOAL
        for read in (client.status, client.artifacts, client.progress, client.diff):
            with pytest.raises(JobNotFound):
                read(b)
        with pytest.raises(JobNotFound):
            client.show(state.artifacts(b).list()[0].id, job_id=b)
        with pytest.raises(JobNotFound):
            client.state.jobs.cancel(b)
        with pytest.raises(CoordinatorError, match="alpha"):
            client.submit("x", tenant="beta")
        assert [j.job_id for j in client.state.jobs.list(50)] == [a]
    with pytest.raises(CoordinatorError, match="tenant"):
        Client.connect(redis_url, tenant="no way")
    with Client.connect(redis_url) as operator:
        assert operator.status(b)["goal"] == B_GOAL


def test_a_tenant_token_opens_that_tenants_jobs_and_no_others(
    state: State, two_tenants: tuple[str, str]
) -> None:
    a, b = two_tenants
    tokens = {"t-admin": None, "t-alpha": "alpha", "t-beta": "beta"}
    web = TestClient(create_app(state, tokens=tokens))
    alpha = {"Authorization": "Bearer t-alpha"}
    listed = web.get("/api/jobs", headers=alpha)
    assert [j["job_id"] for j in listed.json()["jobs"]] == [a]
    artifact = state.artifacts(b).list()[0].id
    for path in (
        f"/jobs/{b}",
        f"/api/jobs/{b}",
        f"/api/jobs/{b}/events",
        f"/api/jobs/{b}/calls",
        f"/api/jobs/{b}/artifacts/{artifact}",
    ):
        answer = web.get(path, headers=alpha)
        assert answer.status_code == 404, path
        assert B_MARK not in answer.text, path
    assert web.get(f"/api/jobs/{a}", headers=alpha).status_code == 200
    held = {"pid": 1, "host": "h", "role": "coder", "state": "busy", "tasks": f"{a}/c-1 {b}/c-2"}
    state.workers.beat("w-both", 60_000, held)
    listed = web.get("/api/workers", headers=alpha).json()["workers"]
    (worker,) = [w for w in listed if w["worker_id"] == "w-both"]
    assert worker["tasks"] == [f"{a}/c-1"] and b not in json.dumps(listed)
    beta = web.get(f"/api/jobs/{b}", headers={"Authorization": "Bearer t-beta"})
    assert beta.json()["goal"] == B_GOAL
    everyone = web.get("/api/jobs", headers={"Authorization": "Bearer t-admin"})
    assert {j["job_id"] for j in everyone.json()["jobs"]} == {a, b}

    # A tenant's token kept in the cookie reads as that tenant, too.
    given = web.get("/", params={"token": "t-alpha"}, follow_redirects=False)
    assert given.status_code == 303
    assert web.get(f"/api/jobs/{b}").status_code == 404
    assert [j["job_id"] for j in web.get("/api/jobs").json()["jobs"]] == [a]

    # A dashboard served for one tenant cannot be widened by a token.
    one = TestClient(create_app(state, tokens=tokens, tenant="alpha"))
    assert one.get(f"/api/jobs/{b}", headers={"Authorization": "Bearer t-admin"}).status_code == 404
    assert one.get("/api/jobs", headers={"Authorization": "Bearer t-beta"}).status_code == 403


def test_tenant_tokens_are_checked_before_the_dashboard_starts(redis_url: str) -> None:
    for pairs, needle in (
        (["alpha"], "TENANT=TOKEN"),
        (["alpha="], "TENANT=TOKEN"),
        (["bad name=tok-1"], "tenant"),
        (["alpha=tok-2", "beta=tok-2"], "already given"),
    ):
        options = [x for pair in pairs for x in ("--tenant-token", pair)]
        proc = run("dashboard", "--port", "1", *options, url=redis_url)
        assert_one_line_error(proc, needle)
        assert "tok-" not in proc.stderr  # a token never appears in an error
