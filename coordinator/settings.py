"""Settings from the environment (``REDIS_URL``, ``REDFLEET_*``), with defaults."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from workers.llm import ProviderChoice, ProviderName


class Settings(BaseSettings):
    """How redfleet connects and the defaults of its fleet.

    Every field can be set as ``REDFLEET_<FIELD>``; the Redis URL also as
    ``REDIS_URL``.
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
    provider: ProviderName = Field(
        default=ProviderName.SCRIPTED, description="the model provider workers call"
    )
    model: str = Field(default="", description="the provider's model name")
    base_url: str | None = Field(default=None, description="the provider's endpoint")
    script: str = Field(default="demo", description="the scripted provider's scenario")

    def provider_choice(self) -> ProviderChoice:
        return ProviderChoice(
            provider=self.provider, model=self.model, base_url=self.base_url, script=self.script
        )
