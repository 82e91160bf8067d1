"""``redfleet limits``: each model route's shared limits, set for the whole fleet, and its use;
each tenant's share, cap and daily money budget.

A route is a provider's model at one endpoint, named as the workers call it
(``openai:gpt-4.1-mini@api.openai.com/v1``; ``limits show`` lists every route
the fleet has called). Limits apply to every worker process on every
machine at their next call; a route without limits still cools down for the
whole fleet when its provider answers 429 or fails.
"""

# No ``from __future__ import annotations``: typer evaluates string annotations on every
# run (see ``cli``).

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .errors import CoordinatorError
from .text import one_line

if TYPE_CHECKING:  # each command imports what it runs: the CLI's options load neither
    from shared_state.admission import RouteLimits, RouteState

limits_app = typer.Typer(
    help=(
        "Shared limits of model routes: requests and tokens per minute and calls at once,\n"
        "for the whole fleet. A route is provider:model@endpoint, e.g.\n"
        "openai:gpt-4.1-mini@api.openai.com/v1 (`limits show` lists those called so far).\n"
        "And tenants' shares of a busy route, caps, and money budgets a day."
    ),
    no_args_is_help=True,
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
COLUMNS = ["route", "limits", "in flight", "waiting", "cooling", "calls", "by tenant", "429s",
           "failed", "waits", "provider says left"]  # fmt: skip


def load_limits(path: Path) -> dict[str, "RouteLimits"]:
    """A limits file: a JSON object of route -> {"rpm": N, "tpm": N, "concurrency": N}."""
    from pydantic import ValidationError

    from shared_state.admission import RouteLimits

    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise CoordinatorError(f"--limits {path}: cannot read it ({exc.strerror})") from exc
    except ValueError as exc:
        raise CoordinatorError(f"--limits {path}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise CoordinatorError(f"--limits {path}: expected an object of route -> limits")
    out = {}
    for route, limits in doc.items():
        _check_route(route)
        try:
            out[route] = RouteLimits.model_validate(limits)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "limits"
            raise CoordinatorError(
                f"--limits {path}: {one_line(route)}: {where}: {problem['msg']} "
                "(expected rpm, tpm and concurrency, whole numbers >= 0)"
            ) from exc
    return out


def _check_route(route: str) -> None:
    provider, colon, rest = route.partition(":")
    if not (provider and colon and "@" in rest):
        raise CoordinatorError(
            f"route {one_line(route)!r}: expected provider:model@endpoint, e.g. "
            "openai:gpt-4.1-mini@api.openai.com/v1 (`redfleet limits show` lists them)"
        )


@limits_app.command("set")
def set_cmd(
    route: Annotated[str, typer.Argument(metavar="ROUTE", help="provider:model@endpoint")],
    rpm: Annotated[int, typer.Option("--rpm", min=0, help="Requests per minute (0: none).")] = 0,
    tpm: Annotated[
        int, typer.Option("--tpm", min=0, help="Tokens per minute, input and output (0: none).")
    ] = 0,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=0, help="Calls at once (0: none).")
    ] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Set a route's limits for every worker, from its next call (0 lifts one)."""
    from shared_state.admission import RouteLimits, Routes

    from . import views
    from .connection import open_state

    _check_route(route)
    limits = RouteLimits(rpm=rpm, tpm=tpm, concurrency=concurrency)
    with open_state() as state:
        Routes(state.client).set_limits(route, limits)
    if as_json:
        views.print_json({"route": route, **limits.model_dump()})
    else:
        views.write_line(f"{one_line(route)}: {_limits_text(limits)}")


@limits_app.command("tenant")
def tenant_cmd(
    tenant: Annotated[str, typer.Argument(metavar="TENANT", help="The tenant jobs run for.")],
    weight: Annotated[
        int | None,
        typer.Option(
            "--weight",
            min=1,
            max=1000,
            help="Its share against other tenants' while calls wait: 3 goes 3 calls to "
            "another's 1 of weight 1 (default 1).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=0, help="Its calls at once on a route (0: none)."),
    ] = None,
    daily_usd: Annotated[
        float | None,
        typer.Option(
            "--daily-usd",
            min=0,
            help="Its money budget a day (UTC), over all its jobs, at the routes' prices: a "
            "call that would overrun it is not sent and its job fails (0: none).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a tenant's weight, cap and daily money budget for the whole fleet, now.

    What is not given stays as it was: `limits tenant acme --daily-usd 50` keeps
    acme's weight."""
    from shared_state.admission import Routes, TenantShare

    from . import views
    from .connection import open_state

    if weight is None and concurrency is None and daily_usd is None:
        raise CoordinatorError("limits tenant: give --weight, --concurrency or --daily-usd")
    with open_state() as state:
        routes = Routes(state.client)
        share = routes.tenants().get(tenant, TenantShare())
        given = {"weight": weight, "concurrency": concurrency}
        share = share.model_copy(update={k: v for k, v in given.items() if v is not None})
        routes.set_tenant(tenant, share)
        if daily_usd is not None:
            state.spend.set_limit(tenant, daily_usd)
        spent, daily = state.spend.today([tenant])[tenant]
    if as_json:
        views.print_json(
            {"tenant": tenant, **share.model_dump(), "daily_usd": daily, "spent_today_usd": spent}
        )
    else:
        cap = f", at most {share.concurrency} calls at once" if share.concurrency else ""
        budget = f"; ${daily:,.2f} a day (${spent:,.4f} spent today)" if daily else ""
        views.write_line(
            f"tenant {one_line(tenant)}: weight {share.weight}{cap} on every route{budget}"
        )


@limits_app.command("show")
def show_cmd(as_json: JsonOpt = False) -> None:
    """Every route the fleet has called: its limits, calls in flight and waiting,
    cool-down, 429s, failures, waits, calls by tenant, and what the provider last said
    is left; and the tenants' weights, caps and daily money budgets (with what each has
    spent today)."""
    from shared_state.admission import Routes

    from . import views
    from .connection import open_state

    with open_state() as state:
        routes = Routes(state.client)
        shown, tenants = routes.show(), routes.tenants()
        today = state.spend.today(list(tenants))
    if as_json:
        views.print_json(
            {
                "routes": [_doc(r) for r in shown],
                "tenants": {
                    t: {**s.model_dump(), "daily_usd": today[t][1], "spent_today_usd": today[t][0]}
                    for t, s in tenants.items()
                },
            }
        )
        return
    views.table("model routes", [route_row(r) for r in shown], COLUMNS)
    if tenants:
        rows = [{"tenant": t, "weight": s.weight, "calls at once": s.concurrency or "",
                 "daily budget": f"${today[t][1]:,.2f}" if today[t][1] else "",
                 "spent today": f"${today[t][0]:,.4f}" if today[t][1] else ""}
                for t, s in tenants.items()]  # fmt: skip
        views.table("tenants", rows, ["tenant", "weight", "calls at once", "daily budget",
                                      "spent today"])  # fmt: skip


def _limits_text(limits: "RouteLimits") -> str:
    parts = [f"{limits.rpm} rpm" if limits.rpm else "", f"{limits.tpm:,} tpm" if limits.tpm else "",
             f"{limits.concurrency} at once" if limits.concurrency else ""]  # fmt: skip
    return ", ".join(p for p in parts if p) or "no limits"


def _doc(r: "RouteState") -> dict[str, Any]:
    return {**r.__dict__, "limits": r.limits.model_dump()}


def route_row(r: "RouteState") -> dict[str, Any]:
    """A route as ``limits show`` and the dashboard's fleet page show it, a string a cell."""
    waited = f"{r.waits} (avg {r.waited_ms / r.waits / 1000:.1f} s)" if r.waits else "0"
    left = ", ".join(
        f"{v} {what}"
        for v, what in ((r.learned_requests, "requests"), (r.learned_tokens, "tokens"))
        if v
    )
    return {
        "route": r.route,
        "limits": _limits_text(r.limits),
        "in flight": r.in_flight,
        "waiting": r.waiting,
        "cooling": f"{r.cooling_ms / 1000:.1f} s ({r.cool_why})" if r.cooling_ms else "",
        "calls": r.admitted if r.limits.limited else "",  # unlimited: not counted
        "by tenant": ", ".join(f"{t} {n}" for t, n in sorted(r.by_tenant.items())),
        "429s": r.limited,
        "failed": r.failed,
        "waits": waited,
        "provider says left": left,
    }
