"""What a memory item is: scope, provenance, lifecycle; and who is asking.

An item belongs to one tenant and one scope:

    app:             every job of the tenant
    user:<id>:       one user's jobs
    job:<id>:        one job (expires with it unless promoted)
    temp:<task>:     one task's scratch (dies with the task)

Every write carries provenance — where the claim came from (``SourceKind``),
the message, artifact or journal entry it rests on, and the job, task and
actor that wrote it — and the Redis time it was observed at. Its authority
follows from the source: a check that passed outranks the user's word, which
outranks the system, an agent's conclusion and, last, tool or web content
(untrusted). A caller may lower an item's authority, never raise it.

``MemoryContext`` is who is asking. A worker builds it from the task's job
record (``for_task``), never from arguments a model supplied, so a model
cannot name another tenant or user.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import NoTenant
from ..names import check_name

MAX_TEXT = 4000


class SourceKind(StrEnum):
    USER = "user"
    TOOL = "tool"
    AGENT = "agent"
    VERIFIER = "verifier"
    SYSTEM = "system"


# Highest authority each source may claim; conflicts are settled by it first.
AUTHORITY = {
    SourceKind.VERIFIER: 4,
    SourceKind.USER: 3,
    SourceKind.SYSTEM: 2,
    SourceKind.AGENT: 1,
    SourceKind.TOOL: 0,
}


class ScopeKind(StrEnum):
    APP = "app"
    USER = "user"
    JOB = "job"
    TEMP = "temp"


class Scope(BaseModel):
    """``app:``, ``user:<id>:``, ``job:<id>:`` or ``temp:<task>:``."""

    model_config = ConfigDict(frozen=True)

    kind: ScopeKind
    id: str = ""

    @model_validator(mode="after")
    def _id_matches_kind(self) -> Self:
        if self.kind is ScopeKind.APP and self.id:
            raise ValueError("scope app: takes no id")
        if self.kind is not ScopeKind.APP:
            check_name(self.id, f"scope {self.kind.value}: id")
        return self

    @classmethod
    def parse(cls, text: str) -> Scope:
        """``app:``, ``user:alice:``, ``job:j-1`` … (the trailing colon is optional)."""
        kind, _, rest = text.strip().partition(":")
        if kind not in ScopeKind.__members__.values():
            raise ValueError(
                f"scope {text!r}: expected app:, user:<id>:, job:<id>: or temp:<task>:"
            )
        return cls(kind=ScopeKind(kind), id=rest.removesuffix(":"))

    def __str__(self) -> str:
        return self.named(self.kind, self.id)

    @staticmethod
    def named(kind: ScopeKind, id: str = "") -> str:
        """How the scope of ``kind`` and ``id`` is written (``job:j-1:``, ``app:``)."""
        return f"{kind.value}:{id}:" if id else f"{kind.value}:"

    @property
    def wide(self) -> bool:
        """Outlives the job that wrote it (``app:`` and ``user:``)."""
        return self.kind in (ScopeKind.APP, ScopeKind.USER)


class MemoryContext(BaseModel):
    """Who reads or writes: a tenant always, and the user, job, task and actor if any.

    An operator at the CLI has a tenant (and maybe a user) but no job; a
    worker has all of them, taken from the task's job record.
    """

    model_config = ConfigDict(frozen=True)

    tenant: str
    user: str = ""
    job: str = ""
    task: str = ""
    actor: str = ""

    @field_validator("tenant", mode="before")
    @classmethod
    def _tenant_given(cls, tenant: object) -> object:
        if not tenant:
            raise NoTenant()
        return tenant

    @field_validator("tenant")
    @classmethod
    def _tenant_name(cls, tenant: str) -> str:
        return check_name(tenant, "tenant")

    @field_validator("user")
    @classmethod
    def _user_name(cls, user: str) -> str:
        return check_name(user, "user") if user else user

    def sees(self, scope: Scope, *, operator: bool = False) -> bool:
        """Whether an item of ``scope`` is visible here (an operator sees the whole tenant)."""
        return operator or str(scope) in self.visible()

    def visible(self) -> tuple[str, ...]:
        """The scopes this context sees (an operator sees every scope of the tenant): the
        tenant's, and the user's, job's and task's own when it has them."""
        own = ((ScopeKind.USER, self.user), (ScopeKind.JOB, self.job), (ScopeKind.TEMP, self.task))
        return ("app:", *(Scope.named(kind, name) for kind, name in own if name))


class Provenance(BaseModel):
    """Where a claim came from; a write without it is refused."""

    model_config = ConfigDict(frozen=True)

    source_kind: SourceKind
    source_ref: str = Field(min_length=1, max_length=200, description="message, artifact or entry")
    job: str = ""
    task: str = ""
    actor: str = Field(min_length=1, max_length=200)
    observed_at: int = 0  # ms, Redis time, set by the write script
    authority: int = Field(ge=0, le=4)
    derived_from: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _authority_within_source(self) -> Self:
        ceiling = AUTHORITY[self.source_kind]
        if self.authority > ceiling:
            raise ValueError(
                f"authority {self.authority} is above what a {self.source_kind.value} "
                f"source may claim ({ceiling})"
            )
        return self


ItemKind = Literal["fact", "decision", "preference", "episode", "note"]
ItemStatus = Literal["current", "superseded", "contested"]


class Claim(BaseModel):
    """What a caller asks to remember (the store adds tenant, ids, time and lifecycle)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: Scope
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    key: str = Field(
        default="",
        max_length=200,
        description="what the claim is about; claims of one key and scope form a version chain",
    )
    kind: ItemKind = "fact"
    source_kind: SourceKind
    source_ref: str = Field(min_length=1, max_length=200)
    authority: int | None = Field(default=None, ge=0, le=4)
    derived_from: tuple[str, ...] = ()
    valid_for_s: int = Field(default=0, ge=0, description="0: no expiry")
    reverify_after_s: int = Field(default=0, ge=0, description="0: never stale")

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text must not be blank")
        return text.strip()

    @property
    def claim_key(self) -> str:
        """The chain this claim joins: its key, or (without one) its own text."""
        return self.key.strip().lower() or f"#{digest(self.text)[:16]}"


class MemoryItem(BaseModel):
    """One stored version of a claim."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    scope: Scope
    key: str
    text: str
    kind: ItemKind
    user: str = ""
    provenance: Provenance
    status: ItemStatus
    version: int
    supersedes: str = ""
    promoted_from: str = ""
    valid_until: int = 0
    reverify_after: int = 0
    shadowed_until: int = 0  # a temporary value holds instead until then (ms)

    def expired(self, now_ms: int) -> bool:
        return bool(self.valid_until) and now_ms >= self.valid_until

    def holds(self, now_ms: int) -> bool:
        """The version of its claim that holds at ``now_ms``: current, unexpired and not
        shadowed by a temporary value."""
        return (
            self.status == "current"
            and not self.expired(now_ms)
            and not (self.shadowed_until and now_ms < self.shadowed_until)
        )

    def stale(self, now_ms: int) -> bool:
        return bool(self.reverify_after) and now_ms >= self.reverify_after

    @classmethod
    def from_hash(cls, raw: dict[str, str]) -> MemoryItem:
        return cls(
            id=raw["id"],
            tenant=raw["tenant"],
            scope=Scope.parse(raw["scope"]),
            key=raw["key"],
            text=raw["text"],
            kind=raw["kind"],  # type: ignore[arg-type]
            user=raw.get("user", ""),
            provenance=Provenance(
                source_kind=SourceKind(raw["source_kind"]),
                source_ref=raw["source_ref"],
                job=raw.get("job", ""),
                task=raw.get("task", ""),
                actor=raw["actor"],
                observed_at=int(raw["observed_at"]),
                authority=int(raw["authority"]),
                derived_from=tuple(d for d in raw.get("derived_from", "").split() if d),
            ),
            status=raw["status"],  # type: ignore[arg-type]
            version=int(raw["version"]),
            supersedes=raw.get("supersedes", ""),
            promoted_from=raw.get("promoted_from", ""),
            valid_until=int(raw.get("valid_until") or 0),
            reverify_after=int(raw.get("reverify_after") or 0),
            shadowed_until=int(raw.get("shadowed_until") or 0),
        )


def age_text(ms: int) -> str:
    """A duration as its largest unit: 12s, 5m, 3h, 2d (how old an item is)."""
    seconds = max(0, ms) // 1000
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


def digest(text: str) -> str:
    return hashlib.sha256(normalized(text).encode()).hexdigest()
