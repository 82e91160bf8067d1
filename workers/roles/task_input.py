"""What a spawned task is given: its input, stored as an artifact (the task hash holds its id)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..summary import DEFAULT_CAP
from .arguments import NAME


class TaskInput(BaseModel):
    """A spawned task's input: its name, brief, input artifacts and summary cap."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["task", "subagent"] = "task"
    name: str = Field(pattern=NAME)
    brief: str = Field(min_length=1, max_length=4_000)
    inputs: tuple[str, ...] = ()  # artifact ids
    summary_cap: int = Field(default=DEFAULT_CAP, ge=200, le=20_000)
