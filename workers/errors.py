"""Errors of the worker runtime.

    WorkerError                    root: anything the worker runtime raises itself
    ├── LeaseLost                  this worker no longer owns its task: stop, write nothing
    ├── NotInWorker                execute() was called outside a redfleet worker process
    ├── ToolRefused                a tool refused its input; the model is told why
    ├── Blocked                    a resumed task found an effect it cannot settle alone
    ├── ContextError               a model call's context cannot be built within budget
    │   ├── PromptTooLarge         a slot that may not shrink is over its budget
    │   ├── StateCompactionStuck   compacting the working state did not bring it within budget
    │   └── ContextCeilingExceeded the kill switch: the call would cross the hard ceiling
    └── ProviderError              a model provider refused or failed a call
        ├── AuthError              bad or missing API key
        ├── ModelNotFound          the provider does not know the model
        ├── BadRequest             the provider rejected the request (400)
        ├── ProviderUnavailable    429 / 5xx / connection errors, after bounded retries
        └── ScenarioExhausted      a scripted provider has no step left for the call

State-layer errors (``shared_state.StateError``) pass through unchanged.
"""

from __future__ import annotations

from shared_state import ArtifactRef


class WorkerError(Exception):
    """Root of the worker runtime's errors."""


class LeaseLost(WorkerError):
    """This worker no longer owns its task: a renewal was refused (fenced, job finished),
    the local lease deadline passed without one (Redis unreachable), or the worker gave
    the task up (its supervisor is gone and the drain timeout passed). Nothing more is
    written for the task."""


class NotInWorker(WorkerError):
    """``execute`` runs only inside a process started by ``redfleet worker``."""


class ToolRefused(WorkerError):
    """A tool could not act on its arguments (an unknown feature, a path outside the
    workspace); the message goes back to the model as a tool error."""


class Blocked(WorkerError):
    """A journaled effect has an intent but no result, and neither a check nor
    idempotence makes it safe to settle: the task stops for a person to decide.

    ``approval_for`` is the digest of that effect's journal key (its tool, target and
    arguments): an approval lets this effect through, and no other.
    """

    def __init__(self, question: str, *, approval_for: str) -> None:
        super().__init__(question)
        self.question = question
        self.approval_for = approval_for


class ContextError(WorkerError):
    """A context cannot be built within its budgets; the call is not made."""


class PromptTooLarge(ContextError):
    """A slot is over budget and may not shrink (the system prompt must be refactored)."""

    def __init__(self, slot: str, tokens: int, budget: int) -> None:
        super().__init__(f"slot {slot}: {tokens} tokens over its budget of {budget}")
        self.slot = slot
        self.tokens = tokens
        self.budget = budget


class StateCompactionStuck(ContextError):
    """Compacting the working state did not shrink it within its budget: a bug, never logged away.

    Every part of the state archives into its index, so this means a part that
    cannot shrink (the goal, counters, named refs) outgrew the state's slot.
    """

    def __init__(self, before: int, after: int, budget: int) -> None:
        super().__init__(
            f"working state compaction: {before} -> {after} tokens, budget {budget}; "
            "the parts that cannot be archived (goal, phase, progress, refs) are too large"
        )
        self.before = before
        self.after = after
        self.budget = budget


class ContextCeilingExceeded(ContextError):
    """The kill switch: the context would cross the hard ceiling; a diagnostic was stored."""

    def __init__(self, tokens: int, ceiling: int, diagnostic: ArtifactRef) -> None:
        super().__init__(
            f"context of {tokens} tokens would cross the ceiling of {ceiling}; "
            f"diagnostic artifact {diagnostic.id}"
        )
        self.tokens = tokens
        self.ceiling = ceiling
        self.diagnostic = diagnostic


class ProviderError(WorkerError):
    """A model provider refused or failed a call; the message names the provider."""


class AuthError(ProviderError):
    """The provider rejected the API key (or none was given)."""


class ModelNotFound(ProviderError):
    """The provider does not serve the requested model."""


class BadRequest(ProviderError):
    """The provider rejected the request itself (HTTP 400)."""


class ProviderUnavailable(ProviderError):
    """Rate limits, server errors or connection failures outlasted the retries."""


class ScenarioExhausted(ProviderError):
    """A scripted provider was called more often than its scenario has steps."""
