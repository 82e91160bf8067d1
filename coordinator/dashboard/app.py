"""The dashboard's Starlette app: pages, JSON endpoints, static files and ``/metrics``.

Read-only: every route answers GET (and HEAD) only. JSON errors are
``{"error": message}``: 404 for an unknown job or artifact, 400 for a bad
query, 503 when Redis does not answer. Every reply forbids framing and
sniffing, and its Content-Security-Policy allows no script but the
dashboard's own file, so text that slipped into the page unescaped would
still not run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import redis
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared_state import ConnectionFailed, JobStatus, NotFound, State

from .. import metrics
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
        except (ConnectionFailed, redis.ConnectionError, redis.TimeoutError) as exc:
            return _error(f"Redis does not answer: {type(exc).__name__}", 503)

    return endpoint


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


def create_app(state: State, *, token: str | None = None) -> Starlette:
    """The dashboard over ``state``; with ``token``, every request must carry it."""

    def jobs_page(request: Request) -> Response:
        return HTMLResponse(pages.render("jobs", title="jobs", heading="jobs"))

    def job_page(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            goal = state.jobs.get(job_id).goal
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
            _json(lambda r: documents.jobs(state, status=_status_filter(r), limit=_limit(r))),
        ),
        Route("/api/jobs/{job_id}", _json(lambda r: documents.job(state, path(r, "job_id")))),
        Route(
            "/api/jobs/{job_id}/events",
            _json(lambda r: documents.events(state, path(r, "job_id"), _after(r))),
        ),
        Route(
            "/api/jobs/{job_id}/calls", _json(lambda r: calls.document(state, path(r, "job_id")))
        ),
        Route(
            "/api/jobs/{job_id}/artifacts/{artifact_id}",
            _json(lambda r: documents.artifact(state, path(r, "job_id"), path(r, "artifact_id"))),
        ),
        Route("/api/workers", _json(lambda r: documents.workers(state))),
        Route("/metrics", metrics_endpoint),
        Mount("/static", StaticFiles(packages=[(__package__, "static")])),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if token is not None:
        middleware.append(Middleware(TokenGate, token=token))
    else:
        middleware.append(Middleware(LoopbackHostsOnly))
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers={HTTPException: _http_error}
    )
