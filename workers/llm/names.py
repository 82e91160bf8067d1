"""The providers a fleet's workers can call, by name.

A plain enum apart from ``choice``'s pydantic models, so the command line can
name it in its options without loading pydantic.
"""

from __future__ import annotations

from enum import StrEnum


class ProviderName(StrEnum):
    SCRIPTED = "scripted"
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
