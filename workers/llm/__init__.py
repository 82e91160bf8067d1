"""Model providers behind one small interface (see ``base``)."""

from shared_state.lazy import exports

_WHERE = {
    ".anthropic": ("AnthropicProvider",),
    ".base": ("HttpJson", "ModelResponse", "Provider", "RetryPolicy", "TokenUsage"),
    ".choice": ("ProviderChoice", "ProviderName"),
    ".openai": ("OpenAIProvider",),
    ".scripted": (
        "Scenario",
        "ScriptedCall",
        "ScriptedProvider",
        "ScriptedStep",
        "ScriptedSummaryModel",
        "load_scenario",
    ),
    ".summarizer": ("ModelSummarizer",),
}
__getattr__ = exports(__name__, _WHERE)
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
