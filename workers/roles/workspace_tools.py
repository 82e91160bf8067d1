"""Tools over the job's workspace: the tree, find, grep and read for every role; edit,
delete and rename for coders.

The workspace is the base the job was submitted with overlaid with what its
coders changed (``shared_state.workspace``). Reading tools show narrow parts
(numbered lines, capped matches), files labelled as data: a repository's
text is not instructions. Changing tools are journaled like ``write_file``:
each records the file's version before and after, so a resumed task never
applies an edit twice, and refuses when the file changed in between.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pathspec
from pydantic import BaseModel, Field

from shared_state import EffectStatus, JournalEntry, RecordChanged, Trust
from shared_state.workspace import DELETED, FileEntry, Workspace, WorkspaceError

from ..context import ROLE_BUDGETS, Slot
from ..errors import ToolRefused
from ..run_context import RunContext
from ..sandbox import workspace_path
from ..tools import Tool, ToolResult, as_data, lines_budget
from ..tools.readers import MAX_MATCHES

if TYPE_CHECKING:
    from .task import AgentTask

MAX_FOUND = 200
MAX_GREP_CHARS = 8_000
TREE_TOKENS = 1_500  # the tree's share of the reference: paths first, outlines if they fit


class FindArgs(BaseModel):
    pattern: str = Field(
        default="**", min_length=1, description="a glob on the path: 'src/**/*.py', '*.md'"
    )


class GrepArgs(BaseModel):
    pattern: str = Field(min_length=1, description="a Python regular expression")
    paths: str = Field(default="", description="only files matching this glob ('' all)")


class ReadFileArgs(BaseModel):
    path: str = Field(min_length=1, max_length=300)
    start: int = Field(default=1, ge=1)
    end: int = Field(default=400, ge=1)


class EditArgs(BaseModel):
    path: str = Field(min_length=1, max_length=300)
    old: str = Field(min_length=1, description="the exact text to replace: it must occur once")
    new: str = Field(description="what replaces it")


class PathArgs(BaseModel):
    path: str = Field(min_length=1, max_length=300)


class RenameArgs(BaseModel):
    path: str = Field(min_length=1, max_length=300)
    to: str = Field(min_length=1, max_length=300)


def change_plan(
    ws: Workspace, changed: dict[str, str], paths: dict[str, str], summary: str
) -> dict[str, Any]:
    """A file change's journal detail: each path's version before, its workspace entry as
    read (the write happens only if that entry still is: a file two tasks change is never
    overwritten with a stale copy), and its entry after (an artifact id, or DELETED)."""
    base = ws.base()
    return {
        "changes": {
            p: {"before": _version(p, changed, base), "read": changed.get(p), "after": after}
            for p, after in paths.items()
        },
        "summary": summary,
    }


def version(workspace: Workspace, path: str) -> str:
    """What a path holds now: the job's artifact id, ``base:<sha256>``, or '' (no file)."""
    return _version(path, workspace.changed(), workspace.base())


def _version(path: str, changed: dict[str, str], base: dict[str, FileEntry]) -> str:
    if path in changed:
        return changed[path]  # an artifact id, or DELETED ('', as for no file)
    return f"base:{base[path].sha256}" if path in base else ""


class ChangeFiles:
    """The journaled effect of append_file, edit_file, delete_file and rename_file.

    Its detail maps each path to its version before and the workspace value
    after (an artifact id, or ``DELETED``). Made again only where every path is
    still at its version before; taken as done where every path is at its
    after; anything else was changed by someone else since, and cannot be told.
    """

    idempotent, records_itself = False, False

    def __init__(self, agent: AgentTask, name: str) -> None:
        self.agent = agent
        self.name = name

    def apply(self, entry: JournalEntry) -> str:
        changes = entry.detail["changes"]
        try:
            self.agent.write_files(
                {p: c["after"] for p, c in changes.items()},
                guards={p: c["read"] for p, c in changes.items()},
            )
        except RecordChanged as exc:
            # Another coder wrote the file since this one read it: nothing was written,
            # and the journal says so (a resumed attempt does not take it for unsettled).
            self.agent.records.write(
                self.agent.run.claim, journal=[entry.to(EffectStatus.NOT_DONE, str(exc))]
            )
            raise ToolRefused(
                f"{exc.field} changed since you read it (another task wrote "
                "it): read it again and redo the change"
            ) from exc
        return entry.detail["summary"]

    def check(self, entry: JournalEntry) -> bool | None:
        now = {p: version(self.agent.workspace, p) for p in entry.detail["changes"]}
        after = {p: c["after"] for p, c in entry.detail["changes"].items()}
        if now == after:
            return True
        if now == {p: c["before"] for p, c in entry.detail["changes"].items()}:
            return False
        return None


def workspace_readers(task: AgentTask, phases: Sequence[str]) -> list[Tool]:
    """find_files, grep_workspace and read_file, for every role."""
    ws = task.workspace
    most = lines_budget(ROLE_BUDGETS[task.role_name].tokens(Slot.RESULTS))

    def find_files(_ctx: RunContext, a: FindArgs) -> ToolResult:
        spec = pathspec.GitIgnoreSpec.from_lines([a.pattern])
        found = [e for e in ws.files().values() if spec.match_file(e.path)]
        lines = [_describe(e) for e in found[:MAX_FOUND]]
        if len(found) > MAX_FOUND:
            lines.append(f"[{len(found) - MAX_FOUND} more: narrow the pattern]")
        return ToolResult(content="\n".join(lines) or f"no file matches {a.pattern!r}")

    def grep_workspace(_ctx: RunContext, a: GrepArgs) -> ToolResult:
        try:
            regex = re.compile(a.pattern)
        except re.error as exc:
            raise ToolRefused(f"pattern {a.pattern!r} is not a regular expression: {exc}") from exc
        spec = pathspec.GitIgnoreSpec.from_lines([a.paths]) if a.paths else None
        searched = [
            e for e in ws.files().values()
            if not e.binary and (spec is None or spec.match_file(e.path))
        ]  # fmt: skip
        texts = ws.data_of(searched)  # one round trip, not one a file
        found, size = [], 0
        for entry in searched:
            for n, line in enumerate(texts[entry.path].decode().split("\n"), start=1):
                if regex.search(line):
                    found.append(f"{entry.path}:{n}: {line[:300]}")
                    size += len(found[-1])
            if len(found) > MAX_MATCHES or size > MAX_GREP_CHARS:
                break
        if not found:
            return ToolResult(content="(no match)")
        shown = found[:MAX_MATCHES]
        more = "" if len(shown) == len(found) else "\n[more matches: narrow the pattern or paths]"
        body = "\n".join(shown)[:MAX_GREP_CHARS] + more
        return ToolResult(content=as_data("workspace", Trust.UNTRUSTED, body))

    def read_file(_ctx: RunContext, a: ReadFileArgs) -> ToolResult:
        path = str(workspace_path(a.path))
        try:
            lines = ws.text(path).split("\n")  # as git and edit_file count lines
            if lines and lines[-1] == "":
                lines.pop()
        except WorkspaceError as exc:
            raise ToolRefused(str(exc)) from exc
        if a.end < a.start:
            raise ToolRefused(f"lines must satisfy 1 <= start <= end, got {a.start}:{a.end}")
        shown, used = [], 0
        end = last = min(a.end, len(lines))
        rest = ""
        for n in range(a.start, end + 1):
            line = f"{n}: {lines[n - 1]}"
            used += task.tok.count(line) + 1
            if used > most and shown:
                last = n - 1
                rest = (
                    f"\n[lines {n}-{end} not shown: over {most} tokens; "
                    f'read_file(path="{path}", start={n}, end={end})]'
                )
                break
            shown.append(line)
        # The header names the lines shown (and the file's length): what a reader can rely on.
        head = f"{path}: lines {a.start}-{last} of {len(lines)}"
        if a.start > len(lines):
            head = f"{path}: has {len(lines)} lines, none from {a.start}"
        body = head + "\n" + "\n".join(shown) + rest
        return ToolResult(content=as_data(path, Trust.UNTRUSTED, body))

    return [
        Tool(
            "find_files",
            "Paths, sizes and kinds of the workspace's files matching a glob.",
            FindArgs,
            find_files,
            phases=phases,
            keeps_arguments=False,
        ),
        Tool(
            "grep_workspace",
            "Lines of the workspace's text files matching a regular expression: path:line.",
            GrepArgs,
            grep_workspace,
            phases=phases,
            keeps_arguments=False,
        ),
        Tool(
            "read_file",
            "Numbered lines start..end (1-based, inclusive) of a workspace file.",
            ReadFileArgs,
            read_file,
            phases=phases,
            keeps_arguments=False,
        ),
    ]


def workspace_editors(task: AgentTask, phases: Sequence[str]) -> list[Tool]:
    """edit_file, delete_file and rename_file, for coders: journaled like write_file."""
    ws = task.workspace

    def current(path: str) -> tuple[FileEntry, dict[str, FileEntry], dict[str, str]]:
        """The file, the tree and the job's changes, from one read of the changes."""
        changed = ws.changed()
        tree = ws.files(changed)
        if path not in tree:
            raise ToolRefused(f"no file {path!r} in the workspace (find_files lists them)")
        return tree[path], tree, changed

    def change(
        ctx: RunContext,
        tool: str,
        target: str,
        args: BaseModel,
        paths: dict[str, str],
        changed: dict[str, str],
        summary: str,
    ) -> ToolResult:
        plan = change_plan(ws, changed, paths, summary)
        done = ctx.perform(tool, target, args.model_dump(), lambda: plan)
        return ToolResult(content=done)

    def edit_file(ctx: RunContext, a: EditArgs) -> ToolResult:
        path = str(workspace_path(a.path))
        entry, _, changed = current(path)
        try:
            text = ws.text_of(entry)
        except WorkspaceError as exc:
            raise ToolRefused(str(exc)) from exc
        count = text.count(a.old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ToolRefused(
                f"{path}: the text to replace {where}; it must occur exactly once "
                "(quote more of the surrounding lines)"
            )
        ref = ctx.store(text.replace(a.old, a.new, 1), kind="file", title=path)
        line = text[: text.index(a.old)].count("\n") + 1
        summary = f"edited {path} at line {line}; it is now {ref.id}"
        return change(ctx, "edit_file", path, a, {path: ref.id}, changed, summary)

    def delete_file(ctx: RunContext, a: PathArgs) -> ToolResult:
        path = str(workspace_path(a.path))
        _, _, changed = current(path)
        return change(ctx, "delete_file", path, a, {path: DELETED}, changed, f"deleted {path}")

    def rename_file(ctx: RunContext, a: RenameArgs) -> ToolResult:
        path, to = str(workspace_path(a.path)), str(workspace_path(a.to))
        entry, tree, changed = current(path)
        if to in tree:
            raise ToolRefused(f"{to!r} exists already (delete it first)")
        try:
            ref = ctx.store(ws.text_of(entry), kind="file", title=to)
        except WorkspaceError as exc:
            raise ToolRefused(str(exc)) from exc
        paths = {path: DELETED, to: ref.id}
        summary = f"renamed {path} to {to}"
        return change(ctx, "rename_file", f"{path}>{to}", a, paths, changed, summary)

    return [
        Tool(
            "edit_file",
            "Replace one exact occurrence of `old` with `new` in a workspace file.",
            EditArgs,
            edit_file,
            phases=phases,
        ),
        Tool("delete_file", "Delete a workspace file.", PathArgs, delete_file, phases=phases),
        Tool(
            "rename_file",
            "Rename (move) a workspace text file.",
            RenameArgs,
            rename_file,
            phases=phases,
        ),
    ]


def _describe(entry: FileEntry) -> str:
    kind = "binary" if entry.binary else "text"
    origin = ", changed by this job" if entry.artifact else ""
    return f"{entry.path} ({entry.size} bytes, {kind}{origin})"


def tree_listing(task: AgentTask, budget: int = TREE_TOKENS) -> str:
    """The workspace's tree for the reference: paths and sizes within ``budget`` tokens,
    with an outline of each Python file's classes and functions when all of them fit."""
    files = list(task.workspace.files().values())
    if not files:
        return ""
    head = f"WORKSPACE ({len(files)} files; read them with find_files, grep_workspace, read_file)"
    lines = [_describe(e) for e in files]
    if task.tok.count("\n".join(lines)) * 2 <= budget:
        lines = [line + _outline(task.workspace, e) for line, e in zip(lines, files, strict=True)]
    shown, used = [], task.tok.count(head)
    for n, line in enumerate(lines):
        used += task.tok.count(line) + 1
        if used > budget:
            shown.append(f"[{len(lines) - n} more files: find_files lists them]")
            break
        shown.append(line)
    return "\n".join([head, *shown])


def _outline(ws: Workspace, entry: FileEntry) -> str:
    if entry.binary or not entry.path.endswith(".py"):
        return ""
    try:
        tree = ast.parse(ws.text_of(entry))
    except (SyntaxError, ValueError, WorkspaceError):
        return ""
    names = [
        ("class " if isinstance(n, ast.ClassDef) else "def ") + n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    return f": {', '.join(names[:12])}{' …' if len(names) > 12 else ''}" if names else ""
