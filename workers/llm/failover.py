"""Fallback routes: the next model, when a route is cooling down or overloaded past a bound.

``Failover`` asks its providers in order. Each but the last waits for its
route at most ``after_s`` (``HttpJson.max_wait_s``): a route the fleet has
cooling for longer — its provider answered 429 or 529, or stopped answering
— is passed over at once, and one that fails within the bound is given up
once the bound is reached; the last waits as long as any call does. The
response names the route and the model that answered (``ModelResponse.route``,
``served_by``), so every call records where it went and is priced as that
model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..context.engine import ToolSpec
from ..context.messages import Message
from ..errors import ProviderUnavailable
from .base import HttpProvider, ModelResponse, Provider
from .choice import FALLBACK_AFTER_S


def models_of(provider: Provider) -> tuple[str, ...]:
    """The models that may answer ``provider``'s calls (a budget reserves at the dearest)."""
    if isinstance(provider, Failover):
        return provider.models
    return (provider.model,)


class Failover:
    """A provider made of an ordered list of them: the first that answers within its bound."""

    def __init__(self, providers: Sequence[HttpProvider], *, after_s: float = FALLBACK_AFTER_S):
        if not providers:
            raise ValueError("Failover needs at least one provider")
        self.providers = list(providers)
        for provider in self.providers[:-1]:
            provider.http = replace(provider.http, max_wait_s=after_s)
        self.name = self.providers[0].name
        self.model = self.providers[0].model
        self.models = tuple(p.model for p in self.providers)  # any may answer a call

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, max_tokens: int
    ) -> ModelResponse:
        for provider in self.providers[:-1]:
            try:
                return provider.complete(messages, tools, max_tokens=max_tokens)
            except ProviderUnavailable:
                continue  # its route cools or fails past the bound: the next one
        return self.providers[-1].complete(messages, tools, max_tokens=max_tokens)
