"""Serving the dashboard: a listening socket bound up front, then uvicorn on it.

Binding first turns a port in use into the CLI's one-line error, and lets a
caller (the tests) start the server on a socket it already holds.
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.types import ASGIApp

from ..errors import CoordinatorError
from ..logs import route_stdlib


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``; CoordinatorError naming the option if it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:  # in use, not an address of this machine, a name that is unknown
        raise CoordinatorError(
            f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc


def server(app: ASGIApp, *, log_level: str = "info") -> uvicorn.Server:
    """A uvicorn server for ``app``; run it with ``.run(sockets=[bind(...)])``.

    Its log lines are the fleet's JSON lines (``logs.route_stdlib``), not
    uvicorn's own format. The access log is off: a request's address may
    carry ``?token=``.
    """
    route_stdlib("uvicorn", "uvicorn.error")
    config = uvicorn.Config(
        app, access_log=False, log_level=log_level, log_config=None, lifespan="off"
    )
    return uvicorn.Server(config)
