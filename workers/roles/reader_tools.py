"""The readers a role offers over artifacts, and ``list_workspace``.

Each reader shows a narrow part of an artifact (``tools.readers``), untrusted
text labelled as data; one ``read_lines`` shows as much as the role's results
slot can, so the rest of a large result is one call away.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..context import ROLE_BUDGETS, Slot
from ..errors import ToolRefused
from ..run_context import RunContext
from ..tools import Tool, ToolResult, as_data, extract_fields, grep_artifact, lines_budget
from ..tools import read_lines as read_numbered
from ..tools import slim as slim_json
from .arguments import Fields, Grep, NoArgs, ReadLines, Slim

if TYPE_CHECKING:
    from .task import AgentTask

Read = Callable[[RunContext, Any], str]


def reader_tools(task: AgentTask, phases_of: Mapping[str, Sequence[str]]) -> list[Tool]:
    """The named readers (and ``list_workspace``), each offered in the phases given for it."""
    most = lines_budget(ROLE_BUDGETS[task.role_name].tokens(Slot.RESULTS))
    readers: dict[str, tuple[str, type[BaseModel], Read]] = {
        "read_lines": (
            "Read numbered lines start..end (1-based, inclusive) of an artifact.",
            ReadLines,
            lambda ctx, a: read_numbered(ctx.artifacts, a.id, a.start, a.end, max_tokens=most),
        ),
        "grep_artifact": (
            "Lines of an artifact matching a regular expression, numbered.",
            Grep,
            lambda ctx, a: grep_artifact(ctx.artifacts, a.id, a.pattern),
        ),
        "extract_fields": (
            "Fields of a JSON artifact by dotted path (features.0.id).",
            Fields,
            lambda ctx, a: extract_fields(ctx.artifacts, a.id, a.fields),
        ),
        "slim": (
            "A JSON artifact with only the given keys kept, at every depth.",
            Slim,
            lambda ctx, a: slim_json(ctx.artifacts, a.id, a.keep),
        ),
    }
    tools = []
    for name, phases in phases_of.items():
        if name == "list_workspace":
            description = "The files the job's coders wrote: path and artifact handle."
            tools.append(
                Tool(
                    name,
                    description,
                    NoArgs,
                    _workspace(task),
                    phases=phases,
                    keeps_arguments=False,
                )
            )
            continue
        description, arguments, read = readers[name]
        reader = _reader(task, read)
        tools.append(
            Tool(name, description, arguments, reader, phases=phases, keeps_arguments=False)
        )
    return tools


def _reader(task: AgentTask, read: Read) -> Callable[[RunContext, Any], ToolResult]:
    """A reader as a tool: untrusted text labelled as data, bad input told to the model."""

    def run(ctx: RunContext, a: Any) -> ToolResult:
        ref = task.artifacts.get(a.id)  # ArtifactNotFound goes back to the model
        try:
            return ToolResult(content=as_data(a.id, ref.trust, read(ctx, a)))
        except ValueError as exc:
            raise ToolRefused(str(exc)) from exc

    return run


def _workspace(task: AgentTask) -> Callable[[RunContext, NoArgs], ToolResult]:
    def run(_ctx: RunContext, _: NoArgs) -> ToolResult:
        files = {p: a for p, a in task.records.files().items() if a}  # not the deleted
        if not files:
            return ToolResult(content="the workspace is empty")
        listing = [f"{p}: {task.artifacts.get(a).handle()}" for p, a in files.items()]
        return ToolResult(content="\n".join(listing))

    return run
