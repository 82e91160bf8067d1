"""Model providers behind one small interface (see ``base``)."""

from .anthropic import AnthropicProvider
from .base import HttpJson, ModelResponse, Provider, RetryPolicy, TokenUsage
from .choice import ProviderChoice, ProviderName
from .openai import OpenAIProvider
from .scripted import (
    Scenario,
    ScriptedCall,
    ScriptedProvider,
    ScriptedStep,
    ScriptedSummaryModel,
    load_scenario,
)
from .summarizer import ModelSummarizer

__all__ = [
    "AnthropicProvider",
    "HttpJson",
    "ModelResponse",
    "ModelSummarizer",
    "OpenAIProvider",
    "Provider",
    "ProviderChoice",
    "ProviderName",
    "RetryPolicy",
    "Scenario",
    "ScriptedCall",
    "ScriptedProvider",
    "ScriptedStep",
    "ScriptedSummaryModel",
    "TokenUsage",
    "load_scenario",
]
