"""Package exports imported when first used (PEP 562), so that a CLI command loads
only what it runs: ``redfleet --version`` need not import the agent runtime."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def exports(package: str, where: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``where`` (submodule ->
    names) is imported from its submodule when first asked for, then kept."""
    owner = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = owner.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
