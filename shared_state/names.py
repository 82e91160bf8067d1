"""Names that become part of Redis keys: tenants, users, scope ids."""

from __future__ import annotations

import re

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NAME_RULE = "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"


def check_name(value: str, what: str) -> str:
    """``value`` if it can be part of a key (no ``{``, ``}``, ``:`` or spaces), else ValueError."""
    if not NAME.match(value):
        raise ValueError(f"{what} {value!r} is not a valid name: {NAME_RULE}")
    return value
