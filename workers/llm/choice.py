"""Which model a fleet's workers call: the provider, its model and endpoint.

Set with ``redfleet up --provider ... --model ... --base-url ...`` (or the
``REDFLEET_PROVIDER``, ``REDFLEET_MODEL``, ``REDFLEET_BASE_URL`` and
``REDFLEET_SCRIPT`` variables); API keys come from ``OPENAI_API_KEY`` and
``ANTHROPIC_API_KEY``. Each task gets its own provider instance; all of a
process's share one HTTP transport (``transport.shared_transport``).

``--fallback [role=]provider:model[@base_url]`` (``REDFLEET_FALLBACK``, comma
separated) names routes to fall back to, in order, when the model's route
cools past ``REDFLEET_FALLBACK_AFTER_S`` (``failover``).

``--summary-model`` (``REDFLEET_SUMMARY_MODEL``) names a second, cheaper model
of the same provider for summaries (compactions); without one, no model is
called for them. With the scripted provider it is ``ScriptedSummaryModel``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared_state.admission import MAX_WAIT_S

from .names import ProviderName

if TYPE_CHECKING:  # the providers are imported when one is opened: the CLI reads a choice
    from shared_state import Job
    from shared_state.admission import Routes

    from .base import HttpProvider, Provider

# A route cooling longer than this hands its calls to the next fallback (``failover``).
FALLBACK_AFTER_S = 20.0


class Fallback(BaseModel):
    """A route to fall back to: ``[role=]provider:model[@base_url]``, for one role or all."""

    model_config = ConfigDict(frozen=True)

    role: str = ""  # "": every role
    provider: ProviderName
    model: str = Field(min_length=1)
    base_url: str | None = None

    @classmethod
    def parse(cls, text: str) -> Fallback:
        role, eq, rest = text.strip().partition("=")
        if not eq:
            role, rest = "", text.strip()
        provider, colon, model_at = rest.partition(":")
        model, _, base_url = model_at.partition("@")
        if not colon or provider not in ("openai", "anthropic") or not model:
            raise ValueError(
                f"fallback {text!r}: expected [role=]provider:model[@base_url], provider "
                "openai or anthropic, e.g. coder=openai:gpt-4.1-mini"
            )
        return cls(role=role, provider=ProviderName(provider), model=model,
                   base_url=base_url or None)  # fmt: skip

    def __str__(self) -> str:
        where = f"@{self.base_url}" if self.base_url else ""
        return f"{self.role + '=' if self.role else ''}{self.provider.value}:{self.model}{where}"


class ProviderChoice(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: ProviderName = ProviderName.SCRIPTED
    model: str = ""
    base_url: str | None = None
    script: str = "demo"  # the scripted provider's scenario: a shipped name or a .json path
    summary_model: str = ""  # the model summaries are asked of ("": none is)
    # Routes to fall back to, in order, when the model's route cools past ``fallback_after_s``.
    fallbacks: tuple[Fallback, ...] = ()
    fallback_after_s: float = Field(default=FALLBACK_AFTER_S, gt=0)
    # How long a call waits out its routes' limits and outages before its attempt fails.
    wait_s: float = Field(default=MAX_WAIT_S, gt=0)

    @model_validator(mode="after")
    def _model_given(self) -> ProviderChoice:
        if self.provider is not ProviderName.SCRIPTED and not self.model:
            raise ValueError(f"model: the {self.provider.value} provider needs a model name")
        return self

    def describe(self) -> str:
        if self.provider is ProviderName.SCRIPTED:
            summaries = self._summaries()
            return f"scripted (replays scenario {self.script!r}; no model is called){summaries}"
        where = f" at {self.base_url}" if self.base_url else ""
        falls = (
            f", falling back to {', '.join(str(f) for f in self.fallbacks)}"
            if self.fallbacks
            else ""
        )
        return f"{self.provider.value} model {self.model}{where}{self._summaries()}{falls}"

    def _summaries(self) -> str:
        return f", summaries by {self.summary_model}" if self.summary_model else ""

    def open(
        self,
        script_key: str,
        *,
        routes: Routes | None = None,
        role: str = "",
        job: Job | None = None,
    ) -> Provider:
        """A provider for one task; ``script_key`` picks the scripted provider's script;
        ``routes``: the fleet's, whose shared limits admit every call (``admission``) as
        ``job``'s tenant's and at its priority, and with them the fallbacks of ``role`` (and
        of every role), in order, after the model."""
        from .failover import Failover
        from .scripted import ScriptedProvider, load_scenario

        if self.provider is ProviderName.SCRIPTED:
            return ScriptedProvider(load_scenario(self.script), script_key)
        primary = _http(self.provider, self.model, self.base_url, routes, job, self.wait_s)
        chain = [f for f in self.fallbacks if f.role in ("", role)]
        if routes is None or not chain:
            return primary
        rest = [_http(f.provider, f.model, f.base_url, routes, job, self.wait_s) for f in chain]
        return Failover([primary, *rest], after_s=self.fallback_after_s)

    def open_summaries(
        self, *, routes: Routes | None = None, job: Job | None = None
    ) -> Provider | None:
        """A provider of the summary model, for one task; None when there is none."""
        if not self.summary_model:
            return None
        from .scripted import ScriptedSummaryModel

        if self.provider is ProviderName.SCRIPTED:
            return ScriptedSummaryModel(self.summary_model)
        return _http(self.provider, self.summary_model, self.base_url, routes, job, self.wait_s)


def _http(
    provider: ProviderName,
    model: str,
    base_url: str | None,
    routes: Routes | None,
    job: Job | None,
    wait_s: float,
) -> HttpProvider:
    from .anthropic import AnthropicProvider
    from .openai import OpenAIProvider

    kind = OpenAIProvider if provider is ProviderName.OPENAI else AnthropicProvider
    who = {"tenant": job.tenant, "priority": job.priority} if job is not None else {}
    return kind(model, base_url=base_url, routes=routes, max_wait_s=wait_s, **who)
