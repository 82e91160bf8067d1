"""Settings from the environment (``REDIS_URL``, ``REDFLEET_*``), with defaults."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared_state.client import SENTINEL_SCHEME, SENTINEL_URL, SentinelTarget
from shared_state.names import check_name
from shared_state.redact import redact
from workers.lease import DEFAULT_STUCK_AFTER_S
from workers.llm.names import ProviderName

from .durability import Durability
from .importer import MAX_FILE_BYTES, MAX_TOTAL_BYTES, ImportLimits

if TYPE_CHECKING:  # imported when a fleet reads its choice: `status` and `claims` need none
    from workers.llm.choice import ProviderChoice

_REDIS_URL_FORMS = (
    f"redis://HOST[:PORT][/DB], rediss://HOST[:PORT][/DB], unix://PATH[?db=DB] or {SENTINEL_URL}"
)


class Settings(BaseSettings):
    """How redfleet connects and the defaults of its fleet.

    Every field can be set as ``REDFLEET_<FIELD>``; the Redis URL also as
    ``REDIS_URL`` (empty: not set). A bad value raises ValidationError;
    ``env_var`` names the variable behind each error's ``loc``.
    """

    model_config = SettingsConfigDict(env_prefix="REDFLEET_", frozen=True)

    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "REDFLEET_REDIS_URL")
    )
    home: Path = Field(
        default=Path.home() / ".local" / "state" / "redfleet",
        description="where the embedded Redis keeps its data",
    )
    lease_ms: int = Field(default=10_000, ge=200, description="claim lease length")
    max_attempts: int = Field(default=3, ge=1, description="attempts before a task is dead")
    retention_s: int = Field(default=7 * 24 * 3600, ge=60, description="finished jobs kept")
    job_stream_maxlen: int = Field(default=10_000, ge=100)
    events_maxlen: int = Field(default=100_000, ge=100)
    reap_interval_ms: int = Field(default=500, ge=50)
    redeliver_after_ms: int = Field(
        default=5_000,
        ge=100,
        description="a queued task with no live envelope this long is re-sent",
    )
    drain_timeout_s: float = Field(default=30.0, ge=0)
    concurrency: int = Field(
        default=4, ge=1, le=1000, description="tasks each worker process runs at once"
    )
    slot_stuck_s: float = Field(
        default=DEFAULT_STUCK_AFTER_S,
        ge=1,
        description="a slot whose task makes no progress this long gives its lease up",
    )
    provider: ProviderName = Field(
        default=ProviderName.SCRIPTED, description="the model provider workers call"
    )
    model: str = Field(default="", description="the provider's model name")
    base_url: str | None = Field(default=None, description="the provider's endpoint")
    script: str = Field(default="demo", description="the scripted provider's scenario")
    summary_model: str = Field(
        default="",
        description="a cheaper model of the provider for summaries (empty: none is called)",
    )
    fallback: str = Field(
        default="",
        description="routes to fall back to, in order, comma separated: "
        "[role=]provider:model[@base_url]",
    )
    fallback_after_s: float = Field(
        default=20.0, gt=0, description="how long a call waits on a cooling route before the next"
    )
    durability: Durability = Field(
        default=Durability.DEFAULT,
        description="replicated: every claim, completion, spawn and journal entry waits "
        "for a replica's acknowledgement (WAIT), so a failover cannot lose it",
    )
    provider_wait_s: float = Field(
        default=900.0,
        gt=0,
        description="how long a model call waits out its routes' limits and outages before "
        "its attempt fails (then retried after the provider backoff)",
    )
    tenant: str | None = Field(
        default=None,
        description="the one tenant the CLI reads and acts for (unset: every tenant); "
        "a fleet serves every tenant whatever this says",
    )
    dashboard_token: SecretStr | None = Field(
        default=None,
        description="the token `redfleet dashboard` asks for (required off loopback): "
        "it reads every tenant",
    )
    dashboard_tenant_tokens: SecretStr | None = Field(
        default=None,
        description="TENANT=TOKEN pairs, comma-separated: a token that reads one tenant's jobs",
    )
    workspace_max_file_bytes: int = Field(
        default=MAX_FILE_BYTES, ge=1, description="the largest file `submit --workspace` imports"
    )
    workspace_max_bytes: int = Field(
        default=MAX_TOTAL_BYTES, ge=1, description="the most bytes one workspace may hold"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="the lowest level logged (any case)"
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_url_shape(cls, url: str | None) -> str | None:
        """redis-py takes ``/x`` as database 0 and no host as localhost: refuse both."""
        if not url:
            return None
        problem = _redis_url_problem(url)
        if problem:
            raise ValueError(
                f"not a Redis URL ({problem}; expected {_REDIS_URL_FORMS}): {redact(url)!r}"
            )
        return url

    @field_validator("tenant")
    @classmethod
    def _tenant_name(cls, tenant: str | None) -> str | None:
        return check_name(tenant, "tenant") if tenant else None

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_case(cls, level: object) -> object:
        return level.lower() if isinstance(level, str) else level

    @classmethod
    def env_var(cls, loc: str) -> str:
        """The variable behind an error's ``loc``: a field's ``REDFLEET_<FIELD>``, or the alias."""
        if loc in cls.model_fields:
            return f"{cls.model_config['env_prefix']}{loc}".upper()
        return loc

    def import_limits(self) -> ImportLimits:
        return ImportLimits(
            max_file_bytes=self.workspace_max_file_bytes,
            max_total_bytes=self.workspace_max_bytes,
        )

    def provider_choice(self) -> ProviderChoice:
        from workers.llm.choice import Fallback, ProviderChoice

        return ProviderChoice(
            provider=self.provider,
            model=self.model,
            base_url=self.base_url,
            script=self.script,
            summary_model=self.summary_model,
            fallbacks=tuple(Fallback.parse(f) for f in self.fallback.split(",") if f.strip()),
            fallback_after_s=self.fallback_after_s,
            wait_s=self.provider_wait_s,
        )


def _redis_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a Redis URL, or None (the password never appears)."""
    if url.startswith(f"{SENTINEL_SCHEME}://"):
        try:
            SentinelTarget.parse(url)
        except ValueError as exc:
            return str(exc)
        return None
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("redis", "rediss", "unix"):
        return f"unknown scheme {parts.scheme!r}"
    if parts.scheme == "unix" and not parts.path:
        return "no socket path"
    if parts.scheme != "unix" and not parts.hostname:
        return "no host"
    path_db = parts.path.removeprefix("/") if parts.scheme != "unix" else ""
    db = parse_qs(parts.query).get("db", [path_db])[-1]
    if db and not re.fullmatch(r"[0-9]+", db):
        return f"database {db!r} is not a number"
    return None
