"""Errors of the control plane.

    CoordinatorError      root: anything the CLI reports as a one-line error
    └── UsageError        bad input: names the field and what was expected

State-layer errors (``shared_state.StateError``) are reported the same way.
"""

from __future__ import annotations


class CoordinatorError(Exception):
    """Root of the coordinator's errors."""


class UsageError(CoordinatorError):
    """The user's input is wrong; the message says which part and what was expected."""
