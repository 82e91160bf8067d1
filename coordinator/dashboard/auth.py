"""Who may read the dashboard: anyone on loopback, only token holders elsewhere.

The dashboard shows goals, model output and worker hosts, so a server that
other machines can reach asks for a token (``--token`` or
``REDFLEET_DASHBOARD_TOKEN``, which reads every tenant, or a tenant's own:
``--tenant-token TENANT=TOKEN``, which reads that tenant's jobs only) and
refuses to start without one. A request
carries it as ``Authorization: Bearer TOKEN`` (scripts, Prometheus), or once
as ``?token=TOKEN``: the reply sets it as an HttpOnly cookie and redirects to
the same address without it, so the token leaves the address bar and the
browser history, and the page's own requests carry the cookie. Tokens are
compared in constant time and never logged (the server's access log is off:
it would print ``?token=``).

Without a token, a request must also name a loopback host (``Host:
127.0.0.1:8765``, ``localhost``, ``[::1]``): otherwise a web page the user
opens could rebind its own name to 127.0.0.1 and read the dashboard from
the browser (DNS rebinding), since a loopback address alone trusts every
page the browser runs.
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import URL
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import CoordinatorError

COOKIE = "redfleet_dashboard"
QUERY = "token"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (a name other than localhost is not)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_token(host: str, tokens: dict[str, str | None]) -> None:
    """CoordinatorError naming the option when ``host`` is not loopback and no token is set."""
    if not tokens and not is_loopback(host):
        raise CoordinatorError(
            f"--token is needed off loopback: the dashboard on {host} is reachable from other "
            "machines; pass --token TOKEN (or --tenant-token TENANT=TOKEN) or set "
            "REDFLEET_DASHBOARD_TOKEN (or use --host 127.0.0.1)"
        )


class TokenGate:
    """ASGI middleware: a request without a token gets 401; ``?token=`` becomes a cookie.

    ``tokens`` maps each token to the tenant it reads (None: every tenant);
    the request's ``scope["state"]["tenant"]`` says which, for the routes.
    """

    def __init__(self, app: ASGIApp, *, tokens: dict[str, str | None]) -> None:
        if not tokens or not all(tokens):
            raise CoordinatorError("--token/--tenant-token: a token must not be empty")
        self.app = app
        self._tokens = [(t.encode(), tenant) for t, tenant in tokens.items()]

    def _matches(self, given: str | None) -> tuple[bytes, str | None] | None:
        """The token and its tenant when ``given`` is one; every token is compared (constant
        time each), so the time taken does not say which matched."""
        if given is None:
            return None
        found = None
        for token, tenant in self._tokens:
            if hmac.compare_digest(given.encode(), token):
                found = (token, tenant)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        offered = [v for k, v in query if k == QUERY]
        carried = self._carried(headers)
        if carried is not None:
            scope.setdefault("state", {})["tenant"] = carried[1]
            await self.app(scope, receive, send)
            return
        matched = self._matches(offered[-1]) if offered else None
        if matched is not None:
            response = self._set_cookie(scope, matched[0], [(k, v) for k, v in query if k != QUERY])
        else:
            response = JSONResponse(
                {"error": "a token is needed: Authorization: Bearer TOKEN, or ?token=TOKEN once"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="redfleet"'},
            )
        await response(scope, receive, send)

    def _carried(self, headers: dict[str, str]) -> tuple[bytes, str | None] | None:
        """The token the request carries as a bearer or in the cookie, with its tenant."""
        scheme, _, bearer = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and (found := self._matches(bearer.strip())):
            return found
        cookie = SimpleCookie(headers.get("cookie", "")).get(COOKIE)
        return self._matches(cookie.value) if cookie is not None else None

    def _set_cookie(self, scope: Scope, token: bytes, rest: list[tuple[str, str]]) -> Response:
        path = URL(scope=scope).path
        # One leading slash only: a browser reads "//host/x" (or "/\\host/x") as another site.
        path = "/" + path.lstrip("/\\")
        response = RedirectResponse(f"{path}?{urlencode(rest)}" if rest else path, 303)
        response.set_cookie(
            COOKIE,
            token.decode(),
            httponly=True,
            samesite="strict",
            secure=scope.get("scheme") == "https",
        )
        return response


def _host_name(header: str) -> str:
    """The name in a Host header, without its port (``[::1]:8765`` -> ``::1``)."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class LoopbackHostsOnly:
    """ASGI middleware for a dashboard without a token: a request must name a loopback host."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        if is_loopback(_host_name(host)):
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {
                "error": "without --token the dashboard answers only requests for a loopback "
                "host (127.0.0.1, localhost, [::1]); serve it with --token to use another name"
            },
            status_code=421,
        )
        await response(scope, receive, send)
