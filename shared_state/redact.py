"""Secrets out of every message: a Redis URL's password, API keys and bearer tokens.

Errors and log lines quote URLs and provider replies; ``redact`` is applied
where they are printed or logged, so a ``redis://:s3cret@host`` or an
``sk-…`` key never reaches a terminal or a log file.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://user:password@host -> scheme://user:***@host (and scheme://:password@host).
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^@\s/]+)(?=@)")
# Key-shaped tokens: OpenAI/Anthropic keys, GitHub and Slack tokens, AWS key ids, bearer values.
_TOKENS = re.compile(
    r"\b(?:sk-(?:ant-)?[A-Za-z0-9_-]{12,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16})\b"
    r"|(?<=[Bb]earer )[A-Za-z0-9._~+/=-]{12,}"
)
# password=..., api_key: ..., token=... in query strings, configs, headers, command lines
# and environment or JSON dumps (REDIS_PASSWORD=, AWS_SECRET_ACCESS_KEY=, --password=,
# X-Api-Key:, "password":).
# After a colon, where sentences go on too ("token: the ..."), only a value of 6+
# characters or one with a digit or a symbol, and not after a path or an option
# ending in a name (/etc/passwd:, --token:).
_NAME = (
    r"(?:password|passwd|api[_-]?key|secret|token|auth"
    # the compound names of keys and tokens: AWS_SECRET_ACCESS_KEY, CLIENT_SECRET, ...
    r"|(?:secret[_-]?)?access[_-]?key|(?:secret|private|signing)[_-]?key|client[_-]?secret"
    r"|(?:access|refresh|auth|api|bearer)[_-]?token)\b[\"']?"
)
_VALUE = r"[^\s&,;'\"]"
_ASSIGNED = re.compile(
    rf"(?P<head>(?<![A-Za-z0-9]){_NAME}\s*=\s*[\"']?"
    rf"|(?<![A-Za-z0-9/])(?<!--){_NAME}\s*:\s*[\"']?"
    rf"(?={_VALUE}{{6,}}|{_VALUE}*[0-9!@#$%^*_+/~-]))(?P<secret>{_VALUE}+)",
    re.IGNORECASE,
)


# For refusing a write, a value must also look like a secret: 8+ characters with a digit
# or a symbol ("password: must be long" is a rule about passwords, not one).
_ASSIGNED_SECRET = re.compile(
    r"\b(?:password|passwd|api[_-]?key|secret|token|auth)\b\s*[=:]\s*"
    r"(?=[^\s&,;'\"]{8,})(?=[^\s&,;'\"]*[0-9!@#$%^*_+/~-])[^\s&,;'\"]+",
    re.IGNORECASE,
)


def looks_secret(text: str) -> bool:
    """Whether ``text`` holds a URL password, a key-shaped token or an assigned secret value."""
    return bool(_URL_PASSWORD.search(text) or _TOKENS.search(text) or _ASSIGNED_SECRET.search(text))


def redact(text: str) -> str:
    """``text`` with URL passwords, key-shaped tokens and ``password=…`` values masked."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    text = _TOKENS.sub(MASK, text)
    return _ASSIGNED.sub(lambda m: m.group("head") + MASK, text)
