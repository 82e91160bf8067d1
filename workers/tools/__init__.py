"""Tools the roles offer to the model."""

from .readers import (
    READER_TOOLS,
    as_data,
    extract_fields,
    grep_artifact,
    lines_budget,
    read_lines,
    slim,
)

__all__ = [
    "READER_TOOLS",
    "as_data",
    "extract_fields",
    "grep_artifact",
    "lines_budget",
    "read_lines",
    "slim",
]
