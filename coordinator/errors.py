"""Errors of the control plane.

    CoordinatorError      root: anything the CLI reports as a one-line error

State-layer errors (``shared_state.StateError``) are reported the same way.
"""

from __future__ import annotations


class CoordinatorError(Exception):
    """Root of the coordinator's errors."""
