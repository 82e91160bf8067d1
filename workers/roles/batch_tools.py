"""The tools of a job over many items: plan_items and dispatch_batches for the planner,
report_items for its coders, and the reviewer's per-item runs of the job's check.

The item list (``items``) is an artifact whose statuses only code moves; the
planner's context gets counts and the list's handle, never the items, and the
coders' summaries of a batch wave are read by code too (each carries its
``item-results``), so a wave of a hundred batches costs the planner one line.
The counts also go to the job's ``progress`` record, for ``status``, ``--wait``
and the dashboard.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import pathspec
from pydantic import BaseModel, Field, ValidationError

from shared_state import ArtifactRef, Role, Trust
from shared_state.workspace import WorkspaceError

from ..errors import ToolRefused
from ..run_context import RunContext
from ..sandbox import ITEM, CheckRun, command_args, run_commands, with_item, workspace_path
from ..tools import Tool, ToolResult
from .items import (
    MAX_ITEMS,
    ItemCheck,
    ItemList,
    ItemResult,
    batch_ids,
    render_batch,
)
from .task_input import TaskInput

if TYPE_CHECKING:
    from .planner import Planner
    from .task import AgentTask

MAX_BATCHES = 200  # children of one wave
ITEMS, RESULTS, CHECKS = "items", "item-results", "item-checks"


class PlanItemsArgs(BaseModel):
    source: Literal["files", "lines"] = Field(
        description="files: the workspace's text files matching `pattern`; lines: the "
        "non-empty lines of the workspace file `path`"
    )
    pattern: str = Field(default="**", min_length=1, description="files: a glob on the path")
    path: str = Field(default="", description="lines: the file listing one item per line")
    batch_size: int = Field(default=20, ge=1, le=500, description="items per coder")
    brief: str = Field(min_length=1, max_length=4_000, description="what to do with each item")


class BatchArgs(BaseModel):
    batch_size: int = Field(default=20, ge=1, le=500)
    brief: str = Field(min_length=1, max_length=4_000)


class ReportArgs(BaseModel):
    results: list[ItemResult] = Field(
        default_factory=list, max_length=500, description="one per item: done or failed"
    )
    all_done: bool = Field(
        default=False, description="every item of the batch not listed in results is done"
    )


def read_items(task: AgentTask, ref: ArtifactRef) -> ItemList:
    return ItemList.model_validate_json(task.artifacts.text(ref.id))


def store_items(ctx: RunContext, task: AgentTask, items: ItemList) -> ArtifactRef:
    """A new version of the item list: kept as ``items``, its counts the job's progress."""
    ref = ctx.store(
        items.model_dump_json(indent=1), kind=ITEMS, title=items.line(), trust=Trust.TRUSTED
    )
    ctx.keep(ref, name=ITEMS)
    task.run.check()
    counts = {**items.counts(), "total": len(items.items), "items": ref.id}
    task.records.write(task.run.claim, progress=counts)
    return ref


def planner_item_tools(
    task: Planner, plan: Sequence[str], later: Sequence[str], round_: int, max_rounds: int
) -> list[Tool]:
    """plan_items (in ``plan``) and dispatch_batches (in ``later``: a new round, at most
    ``max_rounds`` in all)."""

    def plan_items(ctx: RunContext, a: PlanItemsArgs) -> ToolResult:
        features = ctx.state.refs.get("features")
        if features is None:
            raise ToolRefused("write_features first: every coder gets the feature list")
        planned = ctx.state.refs.get(ITEMS)
        if planned is None:
            items = ItemList.of(_source(a), _values(task, a))
            store_items(ctx, task, items)
        else:  # planned by an attempt that stopped before its dispatch (the journal has it)
            items = read_items(task, planned)
            if items.source != _source(a):
                raise ToolRefused(
                    f"the items are planned already ({items.source}): dispatch_batches for "
                    "the open ones"
                )
        return _dispatch(ctx, task, "plan_items", items, a, task.wave("review", round_))

    def dispatch_batches(ctx: RunContext, a: BatchArgs) -> ToolResult:
        ref = ctx.state.refs.get(ITEMS)
        if ref is None:
            raise ToolRefused("no items are planned: plan_items first")
        if round_ >= max_rounds:
            raise ToolRefused(f"no rounds left ({max_rounds} done): answer with the report")
        return _dispatch(
            ctx, task, "dispatch_batches", read_items(task, ref), a, task.wave("review", round_ + 1)
        )

    return [
        Tool(
            "plan_items",
            "Plan a job over many items (files or lines) and dispatch a coder per batch; "
            "this task resumes with the counts when all are done.",
            PlanItemsArgs,
            plan_items,
            phases=plan,
        ),
        Tool(
            "dispatch_batches",
            "Dispatch a coder per batch of the items still open (pending or failed); a new "
            "round, then the reviewer checks again.",
            BatchArgs,
            dispatch_batches,
            phases=later,
        ),
    ]


def _source(a: PlanItemsArgs) -> str:
    return f"files matching {a.pattern}" if a.source == "files" else f"lines of {a.path}"


def _values(task: AgentTask, a: PlanItemsArgs) -> list[str]:
    ws = task.workspace
    if a.source == "files":
        spec = pathspec.GitIgnoreSpec.from_lines([a.pattern])
        values = [e.path for e in ws.files().values() if not e.binary and spec.match_file(e.path)]
    else:
        if not a.path:
            raise ToolRefused("source 'lines' needs the path of the file listing the items")
        try:
            text = ws.text(str(workspace_path(a.path)))
        except WorkspaceError as exc:  # missing or binary: told to the model
            raise ToolRefused(str(exc)) from exc
        values = [line.strip() for line in text.splitlines() if line.strip()]
    if not values:
        raise ToolRefused(f"no items: nothing in the workspace for {_source(a)!r}")
    if len(values) > MAX_ITEMS:
        raise ToolRefused(f"{len(values)} items, over the cap of {MAX_ITEMS}: narrow the source")
    return values


def _dispatch(
    ctx: RunContext,
    task: Planner,
    tool: str,
    items: ItemList,
    args: PlanItemsArgs | BatchArgs,
    wave: str,
) -> ToolResult:
    open_items = items.open()
    if not open_items:
        raise ToolRefused("every item is done or validated: dispatch_reviewer or report")
    size, what = args.batch_size, args.brief
    batches = items.batches(open_items, size)
    if len(batches) > MAX_BATCHES:
        raise ToolRefused(
            f"{len(batches)} batches of {size}, over {MAX_BATCHES} a wave: a larger batch_size"
        )
    features = ctx.state.refs["features"]
    children = []
    for n, batch in enumerate(batches, start=1):
        ref = ctx.store(
            render_batch(batch),
            kind="batch",
            title=f"batch {n} of {len(batches)}: {batch[0].id}..{batch[-1].id}",
        )  # the items came from the user's files: data, untrusted
        brief = (
            f"{what}\n\nYour batch {n} of {len(batches)}: {len(batch)} items, "
            f"{batch[0].id}..{batch[-1].id}, listed in {ref.handle()} (read_lines, one item "
            "a line: id, tab, item). Do each item, then report each with report_items."
        )
        children.append(
            (Role.CODER, TaskInput(name=f"batch-{n}", brief=brief, inputs=(features.id, ref.id)))
        )
    return task.dispatch(ctx, tool, wave, children, args)


def merge_reports(ctx: RunContext, task: Planner) -> str | None:
    """At the stage after a batch wave: the coders' reports applied to the item list (by
    code); one line for the planner's context, or None for a job without items."""
    ref = ctx.state.refs.get(ITEMS)
    if ref is None:
        return None
    results = []
    for summary in task.results():
        for r in summary.refs:
            if r.kind == RESULTS:
                results += _results(task, r)
    items = read_items(task, ref).reported(results)
    now = store_items(ctx, task, items)
    return f"Items: {items.line()}; the list is {now.handle()}."


def merge_checks(ctx: RunContext, task: Planner, refs: Sequence[ArtifactRef]) -> str | None:
    """At ``report``: the reviewer's per-item checks applied (validated or failed)."""
    ref = ctx.state.refs.get(ITEMS)
    if ref is None:
        return None
    checks = [
        ItemCheck.model_validate(c) for r in refs if r.kind == CHECKS for c in _json_list(task, r)
    ]
    items = read_items(task, ref).checked(checks)
    now = store_items(ctx, task, items)
    return f"Items: {items.line()}; the list is {now.handle()}."


def _results(task: AgentTask, ref: ArtifactRef) -> list[ItemResult]:
    try:
        return [ItemResult.model_validate(r) for r in _json_list(task, ref)]
    except ValidationError:
        return []  # a coder's report that does not parse counts as no report


def _json_list(task: AgentTask, ref: ArtifactRef) -> list[dict]:
    value = json.loads(task.artifacts.text(ref.id))
    return value if isinstance(value, list) else []


def report_tool(task: AgentTask, phases: Sequence[str]) -> list[Tool]:
    """report_items, for a coder given a batch."""
    batch_ref = next((r for r in task.input_refs if r.kind == "batch"), None)
    if batch_ref is None:
        return []
    ids = batch_ids(task.artifacts.text(batch_ref.id))

    def report_items(ctx: RunContext, a: ReportArgs) -> ToolResult:
        unknown = [r.id for r in a.results if r.id not in ids]
        if unknown:
            raise ToolRefused(f"not in your batch: {', '.join(unknown[:10])}")
        earlier = ctx.state.refs.get(RESULTS)
        given = {r.id: r for r in (_results(task, earlier) if earlier else [])}
        given |= {r.id: r for r in a.results}
        if a.all_done:
            given |= {i: ItemResult(id=i, status="done") for i in ids if i not in given}
        body = json.dumps([given[i].model_dump() for i in ids if i in given], indent=1)
        ref = ctx.store(body, kind=RESULTS, title=f"{len(given)} of {len(ids)} items reported")
        ctx.keep(ref, name=RESULTS)
        missing = len(ids) - len(given)
        left = f"; {missing} not reported yet" if missing else "; the whole batch is reported"
        return ToolResult(content=f"recorded {ref.handle()}{left}", refs=(ref,))

    return [
        Tool(
            "report_items",
            "Report items of your batch: done or failed, each with a short note; all_done "
            "marks every item not listed as done.",
            ReportArgs,
            report_items,
            phases=phases,
        )
    ]


def check_items(
    ctx: RunContext,
    task: AgentTask,
    files: Mapping[str, str | bytes],
    command: str,
    items: ItemList,
    modes: Mapping[str, int],
) -> CheckRun:
    """The job's check over the items coders finished: once per item when ``command``
    names ``{item}``, else once for all. Each item's run is its evidence; the item-checks
    artifact (kept for the planner) says which passed. The returned run passes only when
    every item passed and none is left open."""
    todo = [i for i in items.items if i.status in ("done", "validated")]
    if not todo:
        raise ToolRefused("no item is done: there is nothing to check")
    argv = command_args(command)
    if ITEM in argv:  # one run per item, the item one argument of its own
        runs_of = [(shlex.join(with_item(argv, i.item)), with_item(argv, i.item)) for i in todo]
    else:
        runs_of = [(command, argv)]
    # A lease check before each run: a long series stops at once if the task was lost, and
    # the heartbeat sees the slot is not stuck.
    runs = run_commands(files, runs_of, modes=modes, between=task.run.check)
    logs = [
        ctx.store(run.log, kind="log", title=f"check {run.check}: exit {run.exit_code}",
                  source="reviewer:check")
        for run in runs
    ]  # fmt: skip
    if len(runs) == 1 and len(todo) > 1:  # one run for all: each item's evidence is it
        runs, logs = runs * len(todo), logs * len(todo)
    checks = [
        {"id": i.id, "passed": r.passed, "log": log.id}
        for i, r, log in zip(todo, runs, logs, strict=True)
    ]
    passed = sum(c["passed"] for c in checks)
    ref = ctx.store(
        json.dumps(checks, indent=1),
        kind=CHECKS,
        title=f"{passed} of {len(checks)} items pass",
        trust=Trust.TRUSTED,
    )
    ctx.keep(ref, name=CHECKS)
    still_open = len(items.items) - len(todo)
    failing = [c["id"] for c in checks if not c["passed"]]
    shown = ", ".join(failing[:20]) + (" …" if len(failing) > 20 else "")
    summary = (
        f"$ {command}\n{passed} of {len(checks)} items pass; {still_open} not done"
        + (f"; failing: {shown}" if failing else "")
        + f"\nitem checks: {ref.handle()}\n"
    )
    ok = passed == len(checks) and still_open == 0
    seconds = sum(r.seconds for r in runs)
    return CheckRun(command, 0 if ok else 1, False, summary, len(summary), seconds)
