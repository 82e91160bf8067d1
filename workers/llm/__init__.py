"""Model providers behind one small interface (see ``base``)."""

from .anthropic import AnthropicProvider
from .base import HttpJson, ModelResponse, Provider, RetryPolicy, TokenUsage
from .openai import OpenAIProvider
from .scripted import Scenario, ScriptedCall, ScriptedProvider, ScriptedStep

__all__ = [
    "AnthropicProvider",
    "HttpJson",
    "ModelResponse",
    "OpenAIProvider",
    "Provider",
    "RetryPolicy",
    "Scenario",
    "ScriptedCall",
    "ScriptedProvider",
    "ScriptedStep",
    "TokenUsage",
]
