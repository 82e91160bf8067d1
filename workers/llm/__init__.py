"""Model providers behind one small interface (see ``base``)."""

from shared_state.lazy import exports

_WHERE = {
    ".anthropic": ("AnthropicProvider",),
    ".base": ("HttpJson", "ModelResponse", "Provider", "RetryPolicy", "TokenUsage"),
    ".choice": ("ProviderChoice",),
    ".names": ("ProviderName",),
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
__all__ = [*sorted(name for names in _WHERE.values() for name in names)]
