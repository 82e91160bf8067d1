"""Tools the roles offer to the model: one object each, typed results (``tool``)."""

from .notes import ARTIFACT_ID, MAX_NOTE_CHARS, USER, Note, verbatim_in
from .notes import DESCRIPTION as NOTE_DESCRIPTION
from .notes import write as write_note
from .readers import (
    READER_TOOLS,
    as_data,
    extract_fields,
    grep_artifact,
    lines_budget,
    read_lines,
    slim,
)
from .tool import Tool, ToolBox, ToolResult

__all__ = [
    "ARTIFACT_ID",
    "MAX_NOTE_CHARS",
    "NOTE_DESCRIPTION",
    "READER_TOOLS",
    "USER",
    "Note",
    "Tool",
    "ToolBox",
    "ToolResult",
    "as_data",
    "extract_fields",
    "grep_artifact",
    "lines_budget",
    "read_lines",
    "slim",
    "verbatim_in",
    "write_note",
]
