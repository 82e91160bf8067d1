"""The dashboard's Starlette app: pages, JSON endpoints, static files and ``/metrics``.

Read-only but for one thing: a person's decision on a blocked task (approve,
reject: ``POST /api/jobs/JOB/tasks/TASK/approve|reject`` with a JSON body),
which only the page itself can send — a JSON body needs the browser's
preflight, no other origin is allowed, and a request another site started
(``Sec-Fetch-Site``, ``Origin``) is refused. Every other route answers GET
(and HEAD) only. JSON errors are ``{"error": message}``: 404 for an unknown
job, task or artifact, 400 for a bad query, 409 for a task that is not
blocked, 503 when Redis does not answer. Every reply forbids framing and
sniffing, and its Content-Security-Policy allows no script but the
dashboard's own file, so text that slipped into the page unescaped would
still not run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared_state import (
    ConnectionFailed,
    JobFinished,
    JobStatus,
    NotBlocked,
    NotFound,
    QuestionChanged,
    State,
)

from .. import metrics
from ..api import Client
from ..errors import CoordinatorError
from . import calls, documents, pages
from .auth import LoopbackHostsOnly, TokenGate

MAX_JOBS = 500
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


class _SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    *((k.encode(), v.encode()) for k, v in HEADERS.items()),
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _error(message: str, status_code: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


def _json(build: Callable[[Request], Any]) -> Callable[[Request], Response]:
    """A JSON endpoint around ``build``; the state layer's refusals become status codes.

    A plain function: Starlette runs it in its thread pool, so a Redis call
    never blocks the event loop.
    """

    def endpoint(request: Request) -> Response:
        try:
            return JSONResponse(build(request), headers={"cache-control": "no-store"})
        except NotFound as exc:
            return _error(str(exc), 404)
        except ConnectionFailed:
            return _error("Redis does not answer", 503)

    return endpoint


def _same_site(request: Request) -> None:
    """403 unless the request came from this dashboard's own page (or no browser at all)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise HTTPException(403, f"a decision is taken on the dashboard's own page, not {site}")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPException(403, "a decision is taken on the dashboard's own page")
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPException(415, 'send the decision as JSON: {"note": "..."}')


async def _decision(request: Request) -> tuple[str, str]:
    """The body's note, and the approval_for of the question the page showed."""
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, 'the body: {"note": "...", "asked": "..."}')
    note, asked = body.get("note", ""), body.get("asked", "")
    if not isinstance(note, str) or len(note) > 2_000:
        raise HTTPException(400, "note: a string of at most 2000 characters")
    if not isinstance(asked, str) or len(asked) > 64:
        raise HTTPException(400, "asked: the approval_for of the question decided on")
    return note, asked


def _status_filter(request: Request) -> JobStatus | None:
    given = request.query_params.get("status") or None
    if given is None:
        return None
    try:
        return JobStatus(given)
    except ValueError:
        known = ", ".join(s.value for s in JobStatus)
        raise HTTPException(400, f"status: one of {known}, not {given!r}") from None


def _limit(request: Request) -> int:
    given = request.query_params.get("limit", "50")
    if not given.isdigit() or not 1 <= int(given) <= MAX_JOBS:
        raise HTTPException(400, f"limit: a number from 1 to {MAX_JOBS}, not {given!r}")
    return int(given)


def _offset(request: Request) -> int:
    given = request.query_params.get("offset", "0")
    if not given.isdigit():
        raise HTTPException(400, f"offset: a number of characters from 0, not {given!r}")
    return int(given)


_STREAM_ID = re.compile(r"[0-9]+-[0-9]+")


def _after(request: Request) -> str | None:
    """The stream id a poll of events asks after (None: the first poll)."""
    given = request.query_params.get("after") or None
    if given is not None and given.isdigit():
        given += "-0"  # a bare time, as Redis reads it: "0" is the start of the stream
    if given is not None and not _STREAM_ID.fullmatch(given):
        raise HTTPException(400, f"after: a stream id like 1700000000000-0, not {given!r}")
    return given


def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.detail, exc.status_code)


def create_app(
    state: State,
    *,
    tokens: dict[str, str | None] | None = None,
    tenant: str | None = None,
) -> Starlette:
    """The dashboard over ``state``.

    With ``tokens`` (token -> the tenant it reads, None: every tenant) every
    request must carry one; ``tenant`` scopes the whole server to one tenant
    (a token cannot widen it). A tenant's reader finds another tenant's job
    as not found, and lists only its own.
    """

    def scoped(request: Request) -> State:
        given = getattr(request.state, "tenant", None)
        if tenant is not None and given is not None and given != tenant:
            raise HTTPException(403, "this token's tenant is not the one this dashboard serves")
        return state.for_tenant(tenant or given)

    def jobs_page(request: Request) -> Response:
        return HTMLResponse(pages.render("jobs", title="jobs", heading="jobs"))

    def job_page(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            goal = scoped(request).jobs.get(job_id).goal
        except NotFound as exc:
            return HTMLResponse(str(exc), status_code=404, media_type="text/plain")
        return HTMLResponse(pages.render("job", title=job_id, heading=goal, job_id=job_id))

    def artifact_page(request: Request) -> Response:
        job_id, artifact_id = request.path_params["job_id"], request.path_params["artifact_id"]
        return HTMLResponse(
            pages.render(
                "artifact", title=artifact_id, heading=artifact_id, job_id=job_id,
                artifact_id=artifact_id,
            )
        )  # fmt: skip

    def workers_page(request: Request) -> Response:
        return HTMLResponse(pages.render("workers", title="workers", heading="workers"))

    async def decide(request: Request) -> Response:
        _same_site(request)
        note, asked = await _decision(request)
        job_id, task_id = path(request, "job_id"), path(request, "task_id")
        verdict = path(request, "decision")
        if verdict not in ("approve", "reject"):
            return _error(f"{verdict!r}: approve or reject", 404)
        client = Client(scoped(request))
        # Who decided, as the records keep it: the dashboard, and whose token it was.
        by = f"dashboard:{getattr(request.state, 'tenant', None) or tenant or 'operator'}"
        try:
            decide = client.approve if verdict == "approve" else client.reject
            await run_in_threadpool(decide, job_id, task_id, note=note, by=by, asked=asked)
        except NotFound as exc:
            return _error(str(exc), 404)
        except (NotBlocked, QuestionChanged, JobFinished) as exc:
            return _error(str(exc), 409)
        except CoordinatorError as exc:  # a rejection without a note
            return _error(str(exc), 400)
        except ConnectionFailed:
            return _error("Redis does not answer", 503)
        decided = "approved" if verdict == "approve" else "rejected"
        return JSONResponse({"job_id": job_id, "task_id": task_id, "decision": decided})

    fleet_metrics = metrics.registry(state)

    def metrics_endpoint(request: Request) -> Response:
        # A scrape reads Redis: a plain function, so it runs in the thread pool.
        return Response(generate_latest(fleet_metrics), media_type=CONTENT_TYPE_LATEST)

    def path(request: Request, name: str) -> str:
        return request.path_params[name]

    routes = [
        Route("/", jobs_page),
        Route("/jobs/{job_id}", job_page),
        Route("/jobs/{job_id}/artifacts/{artifact_id}", artifact_page),
        Route("/workers", workers_page),
        Route(
            "/api/jobs",
            _json(lambda r: documents.jobs(scoped(r), status=_status_filter(r), limit=_limit(r))),
        ),
        Route("/api/jobs/{job_id}", _json(lambda r: documents.job(scoped(r), path(r, "job_id")))),
        Route(
            "/api/jobs/{job_id}/events",
            _json(lambda r: documents.events(scoped(r), path(r, "job_id"), _after(r))),
        ),
        Route(
            "/api/jobs/{job_id}/calls",
            _json(lambda r: calls.document(scoped(r), path(r, "job_id"))),
        ),
        Route(
            "/api/jobs/{job_id}/artifacts/{artifact_id}",
            _json(
                lambda r: documents.artifact(
                    scoped(r), path(r, "job_id"), path(r, "artifact_id"), _offset(r)
                )
            ),
        ),
        Route("/api/workers", _json(lambda r: documents.workers(scoped(r)))),
        Route("/api/jobs/{job_id}/tasks/{task_id}/{decision:str}", decide, methods=["POST"]),
        Route("/metrics", metrics_endpoint),
        Mount("/static", StaticFiles(packages=[(__package__, "static")])),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if tokens:
        middleware.append(Middleware(TokenGate, tokens=tokens))
    else:
        middleware.append(Middleware(LoopbackHostsOnly))
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers={HTTPException: _http_error}
    )
