"""Secrets never stored or shown: redaction where text enters, checked through a real fleet."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from coordinator.dashboard import create_app
from shared_state import JobSpec, Scenario, State
from shared_state.errors import SecretInMemory
from shared_state.memory import Claim, MemoryContext, Scope, ScopeKind, SourceKind
from shared_state.redact import looks_secret, redact
from workers.tools.notes import Note

from .loopback import Loopback
from .test_agent_jobs import finished
from .test_cli import run

# Not shaped like any known key: only knowing what was sent can mask it.
KEY = "proxy-Zq7vR9xK2mW4pL8"


def _every_value(state: State) -> bytes:
    """Every byte Redis holds under every key (names and values), one blob to search."""
    client, out = state.client, []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        out.append(key)
        if kind == "string":
            out.append(client.get(key) or b"")
        elif kind == "hash":
            out += [x for kv in client.hgetall(key).items() for x in kv]
        elif kind == "list":
            out += client.lrange(key, 0, -1)
        elif kind == "set":
            out += list(client.smembers(key))
        elif kind == "zset":
            out += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            out += [x for _, fields in client.xrange(key) for kv in fields.items() for x in kv]
    return b"\n".join(out)


def test_a_401_quoting_the_key_leaves_no_copy_in_redis_the_cli_or_the_dashboard(
    state: State, start_fleet, redis_url: str
) -> None:
    body = {"error": {"message": f"Incorrect API key provided: {KEY}. Check it."}}
    with Loopback() as api:
        for _ in range(20):
            api.answer(401, body)
        job = state.jobs.submit(JobSpec(goal="use the provider", scenario=Scenario.AGENTS))
        env = (
            ("REDFLEET_PROVIDER", "openai"),
            ("REDFLEET_MODEL", "gpt-4.1-mini"),
            ("REDFLEET_BASE_URL", api.url),
            ("OPENAI_API_KEY", KEY),
        )
        start_fleet(planners=1, coders=0, reviewers=0, lease_ms=5_000, worker_env=env)
        done = finished(state, job.job_id)
    assert api.requests and api.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert done.status == "failed" and "API key was rejected" in done.reason
    assert "***" in done.reason
    state.events.flush()
    assert KEY.encode() not in _every_value(state)
    for args in (
        ("status", job.job_id),
        ("status", job.job_id, "--json"),
        ("logs", job.job_id),
        ("logs", "--json"),
        ("handoff", job.job_id),
    ):
        out = run(*args, url=redis_url)
        assert KEY not in out.stdout + out.stderr, args
    web = TestClient(create_app(state), base_url="http://127.0.0.1:8765")
    for path in (
        "/api/jobs",
        f"/api/jobs/{job.job_id}",
        f"/api/jobs/{job.job_id}/events",
        f"/api/jobs/{job.job_id}/calls",
        f"/jobs/{job.job_id}",
        "/",
    ):
        answer = web.get(path)
        assert answer.status_code == 200, path
        assert KEY not in answer.text, path


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://:p@ss@host:6379/0", "redis://:***@host:6379/0"),  # '@' in the password
        ("redis://default:hunter2@host/0", "redis://default:***@host/0"),
        ("https://abc123def456@git.example/x", "https://***@git.example/x"),  # token as user
        ("ssh://git@git.example/repo", "ssh://git@git.example/repo"),  # a name, not a secret
        ("see http://example.com/a@b", "see http://example.com/a@b"),  # '@' in the path
    ],
)
def test_a_urls_credentials_are_masked_whatever_they_hold(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_known_key_is_masked_whatever_its_shape() -> None:
    assert redact(f"bad key {KEY}!", known=(KEY,)) == "bad key ***!"
    assert KEY in redact(f"bad key {KEY}!")  # no pattern knows it: the caller must


def test_a_models_note_is_masked_where_it_enters_the_state() -> None:
    note = Note(kind="decision", text="deploy with password=hunter2 and token sk-abcdefghijklmnop")
    assert "hunter2" not in note.text and "sk-abcdefghijklmnop" not in note.text


def test_memory_refuses_an_assigned_password_even_a_short_one(state: State) -> None:
    assert looks_secret("password=hunter2 for the staging box")
    assert not looks_secret("rotate the password every 90 days")
    ctx = MemoryContext(tenant="t1", user="u1", actor="user")
    claim = Claim(
        text="password=hunter2 for the staging box",
        scope=Scope(kind=ScopeKind.USER, id="u1"),
        source_kind=SourceKind.USER,
        source_ref="cli",
    )
    with pytest.raises(SecretInMemory):
        state.memory.write(ctx, claim)


def test_a_failure_reason_and_a_cancel_reason_are_masked_before_they_are_stored(
    state: State, redis_url: str
) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    claim = state.tasks.claim(job.job_id, job.root_task, "w1", 60_000).claim
    state.tasks.fail(claim, f"boom: api_key={KEY}", retryable=False)
    assert KEY not in state.jobs.get(job.job_id).reason
    other = state.jobs.submit(JobSpec(goal="g"))
    state.jobs.cancel(other.job_id, reason=f"stopped; token={KEY}")
    assert KEY.encode() not in _every_value(state)


def test_code_that_names_a_secret_is_left_verbatim_and_a_value_is_not() -> None:
    for code in ("token=self.token", "password=None", 'key=os.environ["KEY"]', "pw=${PW}"):
        assert redact(code) == code
    assert redact("password=hunter2 and token=self.token") == "password=*** and token=self.token"
