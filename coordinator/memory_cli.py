"""``redfleet memory``: list, show, search, add, forget and history of a tenant's memory.

An operator at the CLI acts for one tenant (``--tenant``, default
``default``) and sees every scope of it; ``--user`` narrows to one user's
items. ``add`` is the user's own assertion (source ``user``, authority 3),
so it may go straight to ``app:`` or ``user:<id>:``. Text is printed
terminal-safe (it came from users and models); ``--json`` keeps it exact.
"""

# No ``from __future__ import annotations``: typer evaluates string annotations on every
# run (see ``cli``).

import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .errors import CoordinatorError
from .text import multi_line, one_line

if TYPE_CHECKING:  # each command imports what it runs: the CLI's options load none of it
    from shared_state.memory.items import ItemKind, MemoryContext, MemoryItem, Scope
    from shared_state.memory.store import MemoryStore

memory_app = typer.Typer(
    help=(
        "Long-term memory: what jobs of a tenant keep between them, with its provenance.\n\n"
        "Items have a scope (app:, user:<id>:, job:<id>:, temp:<task>:) and belong to a\n"
        "tenant; workers read and write them for the job's tenant and user only. `add`\n"
        "records your own assertion; `forget` deletes an item and everything derived from it."
    ),
    no_args_is_help=True,
)

TenantOpt = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        help="Whose memory: the tenant jobs were submitted under (default: `redfleet "
        "--tenant`, REDFLEET_TENANT, else default).",
    ),
]
UserOpt = Annotated[str, typer.Option("--user", help="Only this user's items (any scope).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
COLUMNS = ["id", "scope", "key", "status", "source", "authority", "age", "text"]


def _tenant(given: str | None) -> str:
    """The tenant a command acts for; a CLI scoped to one tenant refuses another."""
    from .settings import Settings

    scope = Settings().tenant
    if given is not None and scope is not None and given != scope:
        raise CoordinatorError(
            f"--tenant: this CLI acts for tenant {scope!r} only (REDFLEET_TENANT)"
        )
    return given or scope or "default"


def _context(tenant: str, user: str = "") -> "MemoryContext":
    from shared_state.memory.items import MemoryContext

    from .api import operator

    return MemoryContext(tenant=tenant, user=user, actor=operator())


def _show_file(ctx: "MemoryContext", path: str, as_json: bool) -> None:
    """A memory file as it is (terminal-safe), or a folder's files with their sizes."""
    from shared_state.errors import MemoryNotFound
    from shared_state.memory.files import MemoryFiles, resolve

    from . import views
    from .connection import open_state

    with open_state() as state:
        files = MemoryFiles(state.client)
        folder = not resolve(ctx, path).relative or path.endswith("/")
        try:
            if folder:
                raise MemoryNotFound(path)
            content, digest = files.read(ctx, path)
            doc: dict[str, Any] = {"path": path, "sha256": digest, "content": content}
        except MemoryNotFound:
            listing = files.listing(ctx, path)  # a file's name may be a folder's too
            if not listing:
                raise
            doc = {"path": path, "files": [{"path": f, "bytes": n} for f, n in listing]}
    if as_json:
        views.print_json(doc)
    elif "files" in doc:
        views.table(f"memory files under {path}", doc["files"], ["path", "bytes"])
    else:
        sys.stdout.write(multi_line(doc["content"]).rstrip("\n") + "\n")


def _scope(text: str, option: str = "--scope") -> "Scope":
    from pydantic import ValidationError

    from shared_state.memory.items import Scope

    try:
        return Scope.parse(text)
    except ValidationError as exc:  # a bad id in a well-formed scope
        why = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise CoordinatorError(f"{option}: {why}") from exc
    except ValueError as exc:
        raise CoordinatorError(f"{option}: {str(exc).removeprefix('Value error, ')}") from exc


def _doc(item: "MemoryItem") -> dict[str, Any]:
    return item.model_dump(mode="json") | {"scope": str(item.scope)}


def _clip(text: str, width: int) -> str:
    """``text`` within ``width`` characters, an ellipsis marking a cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _row(item: "MemoryItem", now_ms: int) -> dict[str, Any]:
    from shared_state.memory.items import age_text

    p = item.provenance
    flags = [item.status]
    if item.expired(now_ms):
        flags.append("expired")
    elif item.stale(now_ms):
        flags.append("stale")
    if item.status == "current" and now_ms < item.shadowed_until:
        # A temporary value holds instead; this one holds again when it expires.
        flags.append(f"shadowed for {age_text(item.shadowed_until - now_ms)}")
    return {
        "id": item.id,
        "scope": str(item.scope),
        "key": _clip(item.key, 40),
        "status": ",".join(flags),
        "source": f"{p.source_kind.value} {p.source_ref}",
        "authority": p.authority,
        "age": age_text(now_ms - p.observed_at),
        "text": _clip(one_line(item.text), 120),
    }


def _show(items: list["MemoryItem"], title: str, store: "MemoryStore", as_json: bool) -> None:
    from . import views

    if as_json:
        views.print_json([_doc(i) for i in items])
        return
    now = store.now_ms()
    views.table(title, [_row(i, now) for i in items], COLUMNS)


@memory_app.command("list")
def list_cmd(
    tenant: TenantOpt = None,
    user: UserOpt = "",
    scope: Annotated[
        str | None, typer.Option("--scope", help="Only this scope, e.g. app: or user:alice:.")
    ] = None,
    expired: Annotated[bool, typer.Option("--expired", help="Include expired items.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """The tenant's items, newest first, with scope, status and provenance."""
    from shared_state.memory.store import MemoryStore

    from .connection import open_state

    tenant = _tenant(tenant)
    where = _scope(scope) if scope else None
    with open_state() as state:
        store = MemoryStore(state.client)
        items = store.items(
            _context(tenant), scope=where, user=user, operator=True, include_expired=expired
        )
        _show(items, f"memory of tenant {tenant}", store, as_json)


@memory_app.command()
def show(
    item_id: Annotated[
        str | None, typer.Argument(metavar="ITEM_ID", help="An item id, m-...")
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            metavar="PATH",
            help="A memory file instead, e.g. /memories/project/AGENTS.md (the project "
            "memory every job of the tenant reads at start); a folder lists its files.",
        ),
    ] = None,
    tenant: TenantOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One item in full: text, scope, lifecycle and provenance; or a memory file's content."""
    from shared_state.memory.items import age_text
    from shared_state.memory.store import MemoryStore

    from . import views
    from .connection import open_state

    tenant = _tenant(tenant)
    if (item_id is None) == (file is None):
        raise CoordinatorError("ITEM_ID or --file PATH: give one")
    if file is not None:
        _show_file(_context(tenant), file, as_json)
        return
    assert item_id is not None
    with open_state() as state:
        store = MemoryStore(state.client)
        item = store.get(_context(tenant), item_id, operator=True)
        if as_json:
            views.print_json(_doc(item))
            return
        now = store.now_ms()
    p = item.provenance
    lines = [
        f"{item.id}  {item.scope}  {item.kind}  {item.status}  version {item.version}",
        f"key: {item.key}",
        f"source: {p.source_kind.value} {p.source_ref} (authority {p.authority})",
        f"written by {p.actor or '?'} in job {p.job or '-'} task {p.task or '-'}, "
        f"{age_text(now - p.observed_at)} ago",
    ]
    if p.derived_from:
        lines.append(f"derived from: {' '.join(p.derived_from)}")
    if item.valid_until:
        lines.append(f"valid until: {views.when(item.valid_until)}")
    if item.reverify_after:
        lines.append(f"re-verify after: {views.when(item.reverify_after)}")
    if item.status == "current" and now < item.shadowed_until:
        lines.append(f"shadowed until: {views.when(item.shadowed_until)} (a temporary value)")
    for line in lines:
        views.write_line(one_line(line))
    views.write_line(multi_line(item.text))


class Ranking(StrEnum):
    HYBRID = "hybrid"
    KEYWORD = "keyword"
    DENSE = "dense"


@memory_app.command()
def search(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="Words to look for.")],
    tenant: TenantOpt = None,
    user: Annotated[
        str, typer.Option("--user", help="Search as this user: their items and app:.")
    ] = "",
    limit: Annotated[int, typer.Option("--limit", min=1, max=100)] = 10,
    ranking: Annotated[
        Ranking,
        typer.Option(
            "--ranking",
            help="hybrid: meaning and keywords fused (keywords alone without an embedder); "
            "keyword: BM25 only; dense: meaning only.",
        ),
    ] = Ranking.HYBRID,
    as_json: JsonOpt = False,
) -> None:
    """Recall over current, unexpired items, best first: by what the query means (the
    offline embedder, all-MiniLM-L6-v2) and by its words (BM25), fused. The title says
    which ranking served the hits."""
    from shared_state.memory.store import MemoryStore

    from . import views
    from .connection import open_state

    tenant = _tenant(tenant)
    from shared_state.memory.recall import Recall  # numpy: only for the command that ranks

    if not query.strip():
        raise CoordinatorError("QUERY: give words to look for")

    with open_state() as state:
        store = MemoryStore(state.client)
        ctx = _context(tenant, user)
        hits = Recall(store).search(ctx, query, k=limit, operator=not user, ranking=ranking.value)
        if as_json:
            views.print_json([_doc(h.item) | {"score": h.score, "index": h.index} for h in hits])
            return
        now = store.now_ms()
        rows = [_row(h.item, now) | {"score": f"{h.score:.3f}"} for h in hits]
    served = hits[0].index if hits else ranking.value
    views.table(
        f"memory of tenant {tenant} for {query!r} (ranked by {served})", rows, ["score", *COLUMNS]
    )


@memory_app.command()
def add(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="What to remember.")],
    tenant: TenantOpt = None,
    scope: Annotated[
        str, typer.Option("--scope", help="app: (every job of the tenant) or user:<id>:.")
    ] = "app:",
    key: Annotated[
        str,
        typer.Option(
            "--key",
            help="What it is about, e.g. deploy.region: a later claim with the same key "
            "supersedes it (or is contested, if weaker).",
        ),
    ] = "",
    kind: Annotated[str, typer.Option("--kind", help="fact, decision or preference.")] = "fact",
    valid_for: Annotated[
        int, typer.Option("--valid-for", min=0, metavar="SECONDS", help="Expire after (0: never).")
    ] = 0,
    reverify_after: Annotated[
        int,
        typer.Option("--reverify-after", min=0, metavar="SECONDS", help="Stale after (0: never)."),
    ] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Remember TEXT as your own assertion (source user)."""
    from shared_state.memory.items import Claim, Scope, SourceKind
    from shared_state.memory.store import MemoryStore

    from . import views
    from .connection import open_state

    tenant = _tenant(tenant)
    try:
        where: Scope | None = Scope.parse(scope)
    except ValueError:  # its message lists job: and temp: too, which only workers write
        where = None
    if where is None or not where.wide:
        raise CoordinatorError(f"--scope: memory add writes app: or user:<id>:, not {scope!r}")
    if kind not in ("fact", "decision", "preference"):
        raise CoordinatorError(f"--kind: expected fact, decision or preference, not {kind!r}")
    item_kind: ItemKind = kind  # type: ignore[assignment]
    ctx = _context(tenant, where.id)
    claim = Claim(
        scope=where,
        text=text,
        key=key,
        kind=item_kind,
        source_kind=SourceKind.USER,
        source_ref="memory add",
        valid_for_s=valid_for,
        reverify_after_s=reverify_after,
    )
    with open_state() as state:
        item = MemoryStore(state.client, embedder="default").write(ctx, claim)
    if as_json:
        views.print_json(_doc(item))
    else:
        views.write_line(one_line(f"{item.id} {item.status} ({item.scope} {item.key})"))


@memory_app.command()
def forget(
    item_ids: Annotated[
        list[str] | None, typer.Argument(metavar="ITEM_ID", help="Items to forget.")
    ] = None,
    tenant: TenantOpt = None,
    user: Annotated[
        str, typer.Option("--user", help="Forget all of this user's memory instead.")
    ] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would go; remove and redact nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete items and everything derived from them; prints what was removed.

    Derived means promoted copies, episodes and items that quote it, and, in
    the tenant's job records, transcripts, working states and events that
    quoted it are redacted. A quote is the whole text (or an identifier in
    it, such as ACCT-7Q2X9) standing on its own, never inside a longer word;
    a text under 12 characters is not looked for (it cannot be told from the
    same letters elsewhere): such an item is listed as not searched. A quote
    is found in any case and however its spaces run; the job's goal and the
    tasks' briefs are redacted too, and event entries removed with their
    bytes. Then Redis rewrites its append-only file (and saves a snapshot,
    where it keeps them) and the forget waits for it: the output says what
    the disk holds. What was forgotten cannot be written back by a worker
    (it may by you, with `memory add`). Try --dry-run first.
    """
    from shared_state.memory.quotes import MIN_QUOTE_CHARS
    from shared_state.memory.store import MemoryStore

    from . import views
    from .connection import open_state

    tenant = _tenant(tenant)
    if bool(item_ids) == bool(user):
        raise CoordinatorError("give ITEM_ID... or --user, one of the two")
    with open_state() as state:
        store = MemoryStore(state.client)
        ctx = _context(tenant)
        report = (
            store.forget_user(ctx, user, dry_run=dry_run)
            if user
            else store.forget(ctx, item_ids or [], dry_run=dry_run)
        )
    if as_json:
        views.print_json(
            {
                "dry_run": report.dry_run,
                "removed": [r.__dict__ for r in report.removed],
                "redacted": report.redacted,
                "not_reached": report.not_reached,
                "unsearched": report.unsearched,
                "disk": report.disk,
            }
        )
        return
    would = "would be " if dry_run else ""
    for r in report.removed:
        views.write_line(one_line(f"{would}removed {r.id} {r.kind} {r.scope} {r.key}"))
    for name in report.redacted:
        views.write_line(one_line(f"{would}redacted {name}"))
    for item_id in report.unsearched:
        views.write_line(
            f"text not looked for in records (under {MIN_QUOTE_CHARS} characters; "
            f"its identifiers were): {item_id}"
        )
    for place in report.not_reached:
        views.write_line(one_line(f"NOT redacted (its owner kept rewriting it): {place}"))
    for part, outcome in report.disk.items():
        views.write_line(one_line(f"on disk, {part}: {outcome}"))
    views.write_line(
        f"{len(report.removed)} item(s) {would}removed, "
        f"{len(report.redacted)} record(s) {would}redacted"
        + (" (dry run: nothing changed)" if dry_run else "")
    )


@memory_app.command()
def history(
    key: Annotated[str, typer.Argument(metavar="KEY", help="The claim's key, e.g. db.port.")],
    scope: Annotated[str, typer.Option("--scope", help="The chain's scope.")] = "app:",
    tenant: TenantOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every version of one claim, oldest first: which holds, which were superseded or
    contested."""
    from shared_state.memory.store import MemoryStore

    from .connection import open_state

    tenant = _tenant(tenant)
    where = _scope(scope)
    with open_state() as state:
        store = MemoryStore(state.client)
        items = store.history(_context(tenant), where, key, operator=True)
        _show(items, f"history of {where}{key}", store, as_json)
