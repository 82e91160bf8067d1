"""When a write is done, as the fleet's settings and options name it.

A plain enum apart from ``settings`` (pydantic-settings), so the command line
can name it in its options without loading pydantic.
"""

from __future__ import annotations

from enum import StrEnum


class Durability(StrEnum):
    """When a write is done: once the primary has it (default), or once a replica has it
    too (replicated: a failover cannot lose it; see the README's durability table)."""

    DEFAULT = "default"
    REPLICATED = "replicated"
