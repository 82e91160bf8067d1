"""The dashboard in a real headless browser (Debian's chromium) over a real server and fleet.

Playwright drives the system's ``/usr/bin/chromium``; nothing is downloaded.
Without it the test is skipped, except in CI (``CI`` set), where it fails.
``REDFLEET_DASHBOARD_SCREENSHOT=docs/dashboard.png`` also writes the job
page's screenshot there (the README's picture).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from coordinator import Client
from coordinator.dashboard import bind, create_app, server
from shared_state import Scenario, State, keys

from .conftest import events_named, wait_for
from .test_dashboard import HOSTILE

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DEMO_GOAL = "Build slug.py: slugify(text, max_length=None) for URL slugs, with pytest tests"
LIVE_MS = 120_000  # how long the page may take to show a job's end (a slow shared machine)


@pytest.fixture
def chromium() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def dashboard(state: State) -> Iterator[str]:
    """A real uvicorn serving the dashboard on a free port, in a thread; its base URL."""
    sock = bind("127.0.0.1", 0)
    web = server(create_app(state), log_level="warning")
    thread = threading.Thread(target=web.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    web.should_exit = True
    thread.join(10)
    sock.close()


def test_a_job_shows_live_and_its_plot_has_a_point_per_model_call(
    state: State, start_fleet, dashboard: str, chromium: Browser, tmp_path: Path
) -> None:
    start_fleet(planners=1, coders=2, reviewers=1, lease_ms=3_000)
    page = chromium.new_page(viewport={"width": 1400, "height": 1300})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("dialog", lambda d: problems.append(f"a dialog opened: {d.message}"))
    page.on(
        "response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None
    )

    page.goto(dashboard + "/")
    expect(page.locator("#live")).to_have_text(re.compile("^live"), timeout=10_000)
    client = Client(state)
    job_id = client.submit(DEMO_GOAL, scenario=Scenario.AGENTS)
    row = page.locator(f'#jobs tr[data-job="{job_id}"]')
    expect(row).to_have_count(1, timeout=10_000)  # appeared without a reload
    expect(row.locator(".status")).to_have_text("succeeded", timeout=LIVE_MS)
    expect(row.locator("td").nth(2)).to_have_text("5/5")

    row.locator("a").click()
    page.wait_for_url(f"**/jobs/{job_id}")
    calls = state.usage(job_id).get().calls
    assert calls == state.client.scard(keys.usage_calls(job_id)) > 0
    expect(page.locator("#plot-calls g.call")).to_have_count(calls, timeout=10_000)
    expect(page.locator("#tree li[data-task]")).to_have_count(len(state.tasks.list(job_id)))
    expect(page.locator('#events li[data-event="job.succeeded"]')).to_have_count(1)
    expect(page.locator("#features tbody tr")).to_have_count(3)
    expect(page.locator("#features .v-passes")).to_have_count(3)
    expect(page.locator("#plot-latency rect")).to_have_count(4)  # planner, coder, ...
    page.screenshot(path=str(tmp_path / "job.png"), full_page=True)
    wanted = os.environ.get("REDFLEET_DASHBOARD_SCREENSHOT")
    if wanted:  # the page's first screen: tasks, usage, plots and features
        page.screenshot(path=wanted)

    page.locator("#features tbody a").first.click()  # evidence: the check's log, as text
    expect(page.locator("#content")).to_contain_text("passed", timeout=10_000)

    slow = client.submit("hold a lease", scenario=Scenario.SLOW, fanout=1)
    page.goto(f"{dashboard}/jobs/{slow}")
    lease = page.locator("#tree .lease").first
    expect(lease).to_have_text(re.compile(r"^lease [0-9]+\.[0-9] s$"), timeout=20_000)
    counted = lease.text_content()
    expect(lease).not_to_have_text(counted or "")  # counts down between polls
    assert problems == []


def test_a_hostile_goal_is_text_on_every_page(
    state: State, dashboard: str, chromium: Browser
) -> None:
    job_id = Client(state).submit(HOSTILE, scenario=Scenario.NOOP)
    page = chromium.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("dialog", lambda d: problems.append(f"a dialog opened: {d.message}"))
    page.goto(dashboard + "/")
    expect(page.locator(f'#jobs tr[data-job="{job_id}"] td.goal')).to_have_text(HOSTILE)
    page.goto(f"{dashboard}/jobs/{job_id}")
    expect(page.locator("#heading")).to_have_text(HOSTILE)
    expect(page.locator('#events li[data-event="job.submitted"]')).to_contain_text(HOSTILE)
    assert page.locator("img").count() == 0
    assert problems == []


def test_a_gated_call_is_approved_with_the_pages_button(
    state: State, start_fleet, dashboard: str, chromium: Browser
) -> None:
    start_fleet(planners=1, coders=1, reviewers=1, lease_ms=3_000)
    client = Client(state)
    job_id = client.submit(DEMO_GOAL, fanout=1, approve=("write_file",))
    page = chromium.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on(
        "response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None
    )
    page.goto(f"{dashboard}/jobs/{job_id}")
    button = page.locator("#tree .decision button.approve").first
    expect(button).to_be_visible(timeout=LIVE_MS)
    asked = page.locator("#tree .error").filter(has_text="may I call write_file")
    expect(asked.first).to_be_visible()
    button.click()
    expect(page.locator("#live")).to_contain_text("approved", timeout=10_000)
    (decided,) = events_named(state, job_id, "task.approved")

    def approved_to_the_end() -> object:  # the rest of its writes through the API
        for task in state.tasks.list(job_id):
            if task.status.value == "blocked":
                client.approve(job_id, task.task_id)
        return (job := state.jobs.get(job_id)).status.finished and job

    job = wait_for(approved_to_the_end, LIVE_MS / 1000, "the job to end")
    assert job.status.value == "succeeded", job.reason
    assert decided.model_extra["by"] == "dashboard:operator"  # who decided, on the record
    assert problems == []


def test_the_fleet_page_shows_the_model_routes_as_text(
    state: State, dashboard: str, chromium: Browser
) -> None:
    from shared_state.admission import RouteLimits

    hostile = f"openai:{HOSTILE}@127.0.0.1:9/v1"  # a route is named by whoever set its limits
    state.routes.set_limits(hostile, RouteLimits(rpm=60))
    page = chromium.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("dialog", lambda d: problems.append(f"a dialog opened: {d.message}"))
    page.goto(dashboard + "/workers")
    row = page.locator("#routes tbody tr")
    expect(row).to_have_count(1, timeout=10_000)
    expect(row.locator("td").first).to_have_text(hostile)
    expect(row.locator("td").nth(1)).to_have_text("60 rpm")
    expect(page.locator("#routes thead th").first).to_have_text("route")
    assert page.locator("img").count() == 0
    assert problems == []
