"""``write_file`` and ``append_file``: the job's workspace, written through the journal.

Each writes the file's content as an artifact, then the workspace entry
(path -> artifact id) as a journaled effect (``effects``), so a replay after
a crash does not write twice. The file's artifact comes back as the result's
ref, for the working state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..run_context import RunContext
from ..sandbox import workspace_path
from ..tools import Tool, ToolResult
from .arguments import AppendArgs, WriteArgs

if TYPE_CHECKING:
    from .task import AgentTask


def file_tools(task: AgentTask, phases: Sequence[str]) -> list[Tool]:
    def write_file(ctx: RunContext, a: WriteArgs) -> ToolResult:
        path = str(workspace_path(a.path))
        ref = ctx.store(a.content, kind="file", title=path)
        detail = {"path": path, "artifact": ref.id, "bytes": ref.bytes}
        done = ctx.perform("write_file", path, a.model_dump(), lambda: detail)
        # The ref also when the journal says it was written before a crash.
        return ToolResult(content=done, refs=(ref,))

    def append_file(ctx: RunContext, a: AppendArgs) -> ToolResult:
        path = str(workspace_path(a.path))

        def prepare() -> dict[str, Any]:
            before = task.records.files().get(path, "")
            text = (ctx.artifacts.text(before) if before else "") + a.text
            ref = ctx.store(text, kind="file", title=path)
            return {"path": path, "before": before, "after": ref.id, "bytes": len(a.text.encode())}

        done = ctx.perform("append_file", path, a.model_dump(), prepare)
        now = task.artifacts.get(task.records.files()[path])
        return ToolResult(content=done, refs=(now,))

    return [
        Tool(
            "write_file",
            "Write a whole file into the job's workspace (replaces it).",
            WriteArgs,
            write_file,
            phases=phases,
        ),
        Tool(
            "append_file",
            "Append text to a file of the workspace (creates it if missing); the same "
            "text appended twice in one stage is appended once.",
            AppendArgs,
            append_file,
            phases=phases,
        ),
    ]
