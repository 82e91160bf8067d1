"""The argument models of the tools every role can offer (the model writes these)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from ..summary import DEFAULT_CAP

NAME = r"^[a-z0-9][a-z0-9-]{0,39}$"

ArtifactId = Annotated[str, Field(pattern=r"^a-[0-9a-f]{16}$", description="artifact id a-...")]


class Brief(BaseModel):
    """A task to dispatch, as the model writes it."""

    name: str = Field(pattern=NAME, description="short label, lowercase with hyphens")
    brief: str = Field(min_length=1, max_length=4_000, description="what to do and why")
    inputs: list[ArtifactId] = Field(default_factory=list, description="artifacts to read")


class NoArgs(BaseModel):
    pass


class ReadLines(BaseModel):
    id: ArtifactId
    start: int = Field(ge=1)
    end: int = Field(ge=1)


class Grep(BaseModel):
    id: ArtifactId
    pattern: str = Field(min_length=1)


class Fields(BaseModel):
    id: ArtifactId
    fields: list[str] = Field(min_length=1)


class Slim(BaseModel):
    id: ArtifactId
    keep: list[str] = Field(min_length=1)


class WriteArgs(BaseModel):
    path: str = Field(min_length=1, max_length=200)
    content: str


class AppendArgs(BaseModel):
    path: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1)


class SpawnArgs(BaseModel):
    agents: list[Brief] = Field(min_length=1, max_length=6)
    summary_cap: int = Field(default=DEFAULT_CAP, ge=200, le=20_000)
