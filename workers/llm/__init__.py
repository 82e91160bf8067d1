"""Model providers behind one small interface (see ``base``)."""

from .anthropic import AnthropicProvider
from .base import HttpJson, ModelResponse, Provider, RetryPolicy, TokenUsage
from .choice import ProviderChoice, ProviderName
from .openai import OpenAIProvider
from .scripted import Scenario, ScriptedCall, ScriptedProvider, ScriptedStep, load_scenario

__all__ = [
    "AnthropicProvider",
    "HttpJson",
    "ModelResponse",
    "OpenAIProvider",
    "Provider",
    "ProviderChoice",
    "ProviderName",
    "RetryPolicy",
    "Scenario",
    "ScriptedCall",
    "ScriptedProvider",
    "ScriptedStep",
    "TokenUsage",
    "load_scenario",
]
