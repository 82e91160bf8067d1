"""Which model a fleet's workers call: the provider, its model and endpoint.

Set with ``redfleet up --provider ... --model ... --base-url ...`` (or the
``REDFLEET_PROVIDER``, ``REDFLEET_MODEL``, ``REDFLEET_BASE_URL`` and
``REDFLEET_SCRIPT`` variables); API keys come from ``OPENAI_API_KEY`` and
``ANTHROPIC_API_KEY``. Each task gets its own provider instance; all of a
process's share one HTTP client (``base.shared_client``).

``--summary-model`` (``REDFLEET_SUMMARY_MODEL``) names a second, cheaper model
of the same provider for summaries (compactions); without one, no model is
called for them. With the scripted provider it is ``ScriptedSummaryModel``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, model_validator

from shared_state.admission import Routes

from .anthropic import AnthropicProvider
from .base import Provider
from .openai import OpenAIProvider
from .scripted import ScriptedProvider, ScriptedSummaryModel, load_scenario


class ProviderName(StrEnum):
    SCRIPTED = "scripted"
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class ProviderChoice(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: ProviderName = ProviderName.SCRIPTED
    model: str = ""
    base_url: str | None = None
    script: str = "demo"  # the scripted provider's scenario: a shipped name or a .json path
    summary_model: str = ""  # the model summaries are asked of ("": none is)

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
        return f"{self.provider.value} model {self.model}{where}{self._summaries()}"

    def _summaries(self) -> str:
        return f", summaries by {self.summary_model}" if self.summary_model else ""

    def open(self, script_key: str, *, routes: Routes | None = None) -> Provider:
        """A provider for one task; ``script_key`` picks the scripted provider's script;
        ``routes``: the fleet's, whose shared limits admit every call (``admission``)."""
        if self.provider is ProviderName.OPENAI:
            return OpenAIProvider(self.model, base_url=self.base_url, routes=routes)
        if self.provider is ProviderName.ANTHROPIC:
            return AnthropicProvider(self.model, base_url=self.base_url, routes=routes)
        return ScriptedProvider(load_scenario(self.script), script_key)

    def open_summaries(self, *, routes: Routes | None = None) -> Provider | None:
        """A provider of the summary model, for one task; None when there is none."""
        if not self.summary_model:
            return None
        if self.provider is ProviderName.OPENAI:
            return OpenAIProvider(self.summary_model, base_url=self.base_url, routes=routes)
        if self.provider is ProviderName.ANTHROPIC:
            return AnthropicProvider(self.summary_model, base_url=self.base_url, routes=routes)
        return ScriptedSummaryModel(self.summary_model)
