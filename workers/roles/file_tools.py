"""``write_file`` and ``append_file``: the job's workspace, written through the journal.

Each writes the file's content as an artifact, then the workspace entry
(path -> artifact id) as a journaled effect, so a replay after a crash does
not write twice. ``append_file`` appends to the file as the job's tree has it
(the submitted file, or the job's own version) and writes only if that is
still what the entry holds (``workspace_tools.ChangeFiles``). The file's
artifact comes back as the result's ref, for the working state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shared_state.workspace import WorkspaceError

from ..errors import ToolRefused
from ..run_context import RunContext
from ..sandbox import workspace_path
from ..tools import Tool, ToolResult
from .arguments import AppendArgs, WriteArgs
from .workspace_tools import change_plan

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
        ws = task.workspace

        def prepare() -> dict[str, Any]:
            # The file as the job's tree has it now: the submitted one, or the job's own.
            changed = ws.changed()
            entry = ws.files(changed).get(path)
            try:
                text = (ws.text_of(entry) if entry else "") + a.text
            except WorkspaceError as exc:
                raise ToolRefused(str(exc)) from exc
            ref = ctx.store(text, kind="file", title=path)
            summary = f"appended {len(a.text.encode())} bytes to {path}; it is now {ref.id}"
            return change_plan(ws, changed, {path: ref.id}, summary)

        done = ctx.perform("append_file", path, a.model_dump(), prepare)
        now = ws.changed().get(path)
        refs = (task.artifacts.get(now),) if now else ()
        return ToolResult(content=done, refs=refs)

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
