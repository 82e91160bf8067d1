"""Hostile or odd text, secrets and bad settings at the command line (``coordinator.text``)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
import redis
from pydantic import ValidationError
from rich.console import Console

from coordinator import cli
from coordinator.settings import Settings
from coordinator.text import markup_safe, multi_line, one_line
from shared_state import JobSpec, State, free_port
from shared_state.redact import redact

from .test_cli import assert_one_line_error, run

HOSTILE_GOAL = "[/bold] \x1b[31mred\x1b[0m\nsecond line\r\x07"
SHOWN_GOAL = "[/bold] red\\nsecond line\\r\\x07"  # how a terminal line shows it
TERMINAL_CONTROLS = ("\x1b", "\x07", "\r", "\x9b")


def assert_terminal_safe(out: str) -> None:
    for char in TERMINAL_CONTROLS:
        assert char not in out, f"{char!r} reached the terminal: {out!r}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (HOSTILE_GOAL, SHOWN_GOAL),
        ("\x1b]0;pwned\x07title", "title"),  # OSC: retitles the window
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink
        ("\x1bc reset", " reset"),
        ("tab\there", "tab\\there"),
        ("c1 \x9b31m nel \x85 del \x7f", "c1 \\x9b31m nel \\x85 del \\x7f"),
        ("line\u2028separator", "line\\u2028separator"),
        ("plain [text] ünïcode", "plain [text] ünïcode"),
    ],
)
def test_one_line_removes_escape_sequences_and_shows_other_controls(text, shown) -> None:
    assert one_line(text) == shown
    assert len(one_line(text).splitlines()) == 1


def test_markup_safe_text_prints_through_rich_as_itself() -> None:
    out, text = io.StringIO(), "[/bold] [red]y[/red] a\\[b]"
    Console(file=out, width=200).print(f"[bold]x[/] {markup_safe(text)} [bold]z[/]")
    assert out.getvalue() == f"x {text} z\n"


def test_multi_line_keeps_newlines_and_tabs_only() -> None:
    assert multi_line("a\r\n\tb \x1b[1mbold\x1b[0m\x07\rc\n") == "a\n\tb bold\\x07\\rc\n"


def test_a_hostile_goal_is_one_visible_line_in_status(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal=HOSTILE_GOAL))
    proc = run("status", job.job_id, url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert_terminal_safe(proc.stdout)
    (header,) = [line for line in proc.stdout.splitlines() if line.startswith("job ")]
    assert header == f"job {job.job_id}: queued — {SHOWN_GOAL}"


def test_a_hostile_goal_does_not_break_the_overview(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal=HOSTILE_GOAL))
    proc = run("status", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert_terminal_safe(proc.stdout)
    (row,) = [line for line in proc.stdout.splitlines() if job.job_id in line]
    assert SHOWN_GOAL in row


def test_logs_print_exactly_one_line_per_event(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal=HOSTILE_GOAL))
    fields = {"reason": "one\ntwo\u2028three\x1b[2J", "by": "x\x1b]0;t\x07"}
    state.events.append("task.note", fields, job_id=job.job_id)
    events = state.events.read(job.job_id)
    proc = run("logs", job.job_id, url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert_terminal_safe(proc.stdout)
    lines = proc.stdout.splitlines()
    assert [line.split()[1] for line in lines] == [e.event for e in events]
    assert f"goal={SHOWN_GOAL}" in lines[0]
    assert lines[-1].endswith("reason=one\\ntwo\\u2028three by=x")


def test_worker_ids_and_artifact_titles_print_as_text(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    state.tasks.claim(job.job_id, job.root_task, "w-[/red]\x1b[2J", 60_000)
    state.artifacts(job.job_id).put("x", kind="file", title="[bold]t\x1b]0;pwned\x07")
    claims = run("claims", url=redis_url)
    listed = run("artifacts", job.job_id, url=redis_url)
    for proc, shown in ((claims, "w-[/red]"), (listed, "[bold]t")):
        assert proc.returncode == 0, proc.stderr
        assert_terminal_safe(proc.stdout)
        assert shown in proc.stdout


def test_show_strips_control_characters_unless_raw(state: State, redis_url) -> None:
    job = state.jobs.submit(JobSpec(goal="g"))
    content = "$ pytest \x1b[32mok\x1b[0m\n\tdone\x07\n"
    ref = state.artifacts(job.job_id).put(content, kind="log")
    shown = run("show", ref.id, url=redis_url)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "$ pytest ok\n\tdone\\x07\n"
    assert run("show", ref.id, "--raw", url=redis_url).stdout == content
    assert json.loads(run("show", ref.id, "--json", url=redis_url).stdout)["content"] == content


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("password=hunter", "password=***"),
        ("password: hunter2", "password: ***"),
        ("REDIS_PASSWORD=xyz", "REDIS_PASSWORD=***"),
        ("url?token=abc&x=1", "url?token=***&x=1"),
        ("secret: s3", "secret: ***"),
        ("mysql --password=s3cretpw", "mysql --password=***"),
        ("X-Api-Key: 0123456789abcdef", "X-Api-Key: ***"),
        ("db.password: hunter22", "db.password: ***"),
        ('{"password": "hunter22"}', '{"password": "***"}'),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI", "AWS_SECRET_ACCESS_KEY=***"),
        ("GITHUB_ACCESS_TOKEN=abc", "GITHUB_ACCESS_TOKEN=***"),
        ("client_secret: 9f8e7d6c", "client_secret: ***"),
        ("input_tokens=123 token_budget=5", None),
        # Sentences, paths and options that only mention a name keep their words.
        ("/etc/passwd: a file where 'slug.py' needs a folder", None),
        ("token: the dashboard refuses", None),
        ("--token: must not be empty", None),
    ],
)
def test_redact_masks_assigned_secrets_and_leaves_prose(text: str, shown: str | None) -> None:
    assert redact(text) == (text if shown is None else shown)


def test_a_password_in_an_unreachable_redis_url_is_masked() -> None:
    proc = run("status", url=f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    assert_one_line_error(proc, "cannot reach Redis", "redis://:***@127.0.0.1:")
    assert "s3cret" not in proc.stderr


def test_up_without_redis_fails_at_once_and_announces_no_fleet() -> None:
    proc = run("up", "--burst", url=f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    assert_one_line_error(proc, "cannot reach Redis", "redis://:***@127.0.0.1:")
    assert "fleet of" not in proc.stderr and "s3cret" not in proc.stderr


def test_every_error_line_is_masked_and_one_line(monkeypatch, capsys) -> None:
    def lost(*_args: object) -> None:
        raise redis.ConnectionError("lost redis://:s3cret@h:1/0\nmid-command")

    from coordinator import connection

    monkeypatch.setattr(connection, "open_state", lost)  # a command imports it as it runs
    monkeypatch.setattr(sys, "argv", ["redfleet", "claims"])
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err == "redfleet: error: Redis: lost redis://:***@h:1/0\\nmid-command\n"
    )


def test_log_lines_mask_secrets_and_stay_one_line_each() -> None:
    program = textwrap.dedent(
        """
        import structlog
        from coordinator import logs

        logs.configure("info")
        log = structlog.get_logger()
        log.warning("fleet.check_failed", error="redis://:s3cret@h:1/0 down\\nnext line")
        try:
            raise RuntimeError("cannot reach redis://:s3cret@h:1/0")
        except RuntimeError:
            log.exception("task.error", key="sk-abcdefghijklmnopqrstuv")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "s3cret" not in proc.stderr and "sk-abc" not in proc.stderr
    warning, error = (json.loads(line) for line in proc.stderr.splitlines())
    assert warning["error"] == "redis://:***@h:1/0 down\nnext line"
    assert error["key"] == "***"
    assert error["exception"][0]["exc_value"] == "cannot reach redis://:***@h:1/0"


def test_a_logged_traceback_names_its_frames_never_their_locals() -> None:
    """A frame's locals may hold a key in no shape redaction knows (a local server's own)."""
    program = textwrap.dedent(
        """
        import structlog
        from coordinator import logs

        logs.configure("info")

        def call(api_key):
            raise RuntimeError("refused")

        try:
            call("local-vllm-key-7f3a")
        except RuntimeError:
            structlog.get_logger().exception("task.error")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.splitlines()
    frames = json.loads(line)["exception"][0]["frames"]
    assert frames[-1]["name"] == "call" and all(f.get("locals") is None for f in frames)
    assert "local-vllm-key-7f3a" not in proc.stderr


@pytest.mark.parametrize(
    ("url", "needles"),
    [
        ("redis://:s3cret@127.0.0.1:{port}/x", ["REDIS_URL", "database 'x' is not a number"]),
        ("http://127.0.0.1:{port}/0", ["REDIS_URL", "unknown scheme 'http'", "redis://HOST"]),
        ("redis://127.0.0.1:{port}/0?db=one", ["REDIS_URL", "database 'one'"]),
        ("redis://127.0.0.1:port/0", ["REDIS_URL", "Port could not be cast"]),
        ("unix://", ["REDIS_URL", "no socket path"]),
    ],
)
def test_a_malformed_redis_url_is_one_line_without_its_password(url, needles) -> None:
    proc = run("status", url=url.format(port=free_port()))
    assert_one_line_error(proc, *needles)
    assert "s3cret" not in proc.stderr


@pytest.mark.parametrize("url", ["redis://", "redis:///0", "rediss://:pw@:6380/0"])
def test_a_redis_url_without_a_host_is_refused_not_taken_as_localhost(monkeypatch, url) -> None:
    monkeypatch.setenv("REDIS_URL", url)  # in-process: the CLI would try 127.0.0.1:6379
    with pytest.raises(ValidationError, match="no host"):
        Settings()


def test_an_empty_redis_url_means_not_set(monkeypatch) -> None:
    monkeypatch.setenv("REDIS_URL", "")
    assert Settings().redis_url is None


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"REDFLEET_LOG_LEVEL": "loud"}, ["REDFLEET_LOG_LEVEL", "'debug', 'info', 'warning'"]),
        ({"REDFLEET_LEASE_MS": "5"}, ["REDFLEET_LEASE_MS", "greater than or equal to 200"]),
        ({"REDFLEET_PROVIDER": "magic"}, ["REDFLEET_PROVIDER", "'scripted'"]),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(
    monkeypatch, redis_url, env, needles
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert_one_line_error(run("claims", url=redis_url), *needles)


def test_the_log_level_is_read_in_any_case(monkeypatch, redis_url) -> None:
    monkeypatch.setenv("REDFLEET_LOG_LEVEL", "WARNING")
    assert Settings().log_level == "warning"
    proc = run("worker", "--role", "coder", "--burst", url=redis_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # worker.started and worker.stopped are info


def test_an_unusable_home_is_one_line_naming_redfleet_home(tmp_path) -> None:
    (tmp_path / "file").write_text("not a directory")
    home = tmp_path / "file" / "home"
    proc = run("status", url=None, home=str(home))
    assert_one_line_error(proc, f"REDFLEET_HOME={home}:", "Not a directory")


def test_a_script_of_the_wrong_shape_is_one_line_naming_the_file(tmp_path, redis_url) -> None:
    script = tmp_path / "bad.json"
    script.write_text(json.dumps({"name": "bad", "roles": {"planner": [{"text": 3}]}}))
    proc = run("up", "--burst", "--script", str(script), url=redis_url)
    assert_one_line_error(proc, f"--script: {script}: roles.planner.0.text:", "valid string")


@pytest.mark.parametrize(
    "args",
    [
        ("status", ""),
        ("status", "  "),
        ("logs", ""),
        ("cancel", ""),
        ("artifacts", ""),
        ("show", "a-1", "--job", ""),
    ],
)
def test_a_blank_job_id_is_an_error_not_every_job(state: State, redis_url, args) -> None:
    state.jobs.submit(JobSpec(goal="g"))
    name = "--job" if "--job" in args else "JOB_ID"
    assert_one_line_error(run(*args, url=redis_url), f"{name}: must not be empty")


@pytest.mark.parametrize("args", [["status"], ["logs"], ["status", "--json"]])
def test_a_reader_that_closes_the_pipe_early_is_not_an_error(state: State, redis_url, args) -> None:
    for i in range(3):
        state.jobs.submit(JobSpec(goal=f"job {i}"))
    env = {**os.environ, "REDIS_URL": redis_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # like `| head -0`: every write of the command meets a closed pipe
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err == ""


def test_commands_printed_for_the_user_name_redfleet_as_they_can_run_it(
    tmp_path, monkeypatch
) -> None:
    """A run from a venv not on PATH prints its follow-up commands with the path it was
    started by; one PATH finds prints plain ``redfleet``; ``python -m`` prints ``redfleet``."""
    from coordinator import views

    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    program = bin_dir / "redfleet"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(program), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert views.program() == str(program)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin")
    assert views.program() == "redfleet"
    monkeypatch.setattr(sys, "argv", ["/src/coordinator/__main__.py", "demo"])
    assert views.program() == "redfleet"
