"""Secrets out of every message: a URL's credentials, API keys and bearer tokens.

Errors and log lines quote URLs and provider replies; ``redact`` is applied
where such text enters the system (a provider's error, a task's failure
reason or question, a model's note, a memory write) and again where it is
printed or logged, so a ``redis://:s3cret@host`` or an ``sk-…`` key never
reaches Redis, a terminal or a log file.
"""

from __future__ import annotations

import re

MASK = "***"

# A URL's credentials, up to the last '@' before the host (a password may hold '@' or '/'):
# scheme://user:password@host -> scheme://user:***@host, scheme://:password@host ->
# scheme://:***@host, and scheme://secret@host (a token as the user) -> scheme://***@host.
_URL_PASSWORD = re.compile(
    r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*)(?P<password>:[^\s]*)?@(?=[^@/\s]*(?:[/\s]|$))",
    re.IGNORECASE,
)
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
# Not a value but code that names one (token=self.token, password=None, key=os.environ[...],
# secret=${SECRET}, a template's {{ token }}): left as it is, so a note quoting code stays
# verbatim.
_CODE = (
    r"(?!(?:None|True|False|null|nil|undefined)\b|(?:self|cls|os|env|config|settings|args)\."
    r"|getenv\b|\$|\{\{|<)"
)
_ASSIGNED = re.compile(
    rf"(?P<head>(?<![A-Za-z0-9]){_NAME}\s*=\s*[\"']?{_CODE}"
    rf"|(?<![A-Za-z0-9/])(?<!--){_NAME}\s*:\s*[\"']?{_CODE}"
    rf"(?={_VALUE}{{6,}}|{_VALUE}*[0-9!@#$%^*_+/~-]))(?P<secret>{_VALUE}+)",
    re.IGNORECASE,
)


# For refusing a write: any value assigned with '=' (password=hunter2, API_KEY=abcd);
# after a colon, where prose goes on too, 8+ characters with a digit or a symbol
# ("password: must be long" is a rule about passwords, not one).
_ASSIGNED_SECRET = re.compile(
    rf"(?<![A-Za-z0-9]){_NAME}\s*(?:=\s*[\"']?{_VALUE}{{4,}}"
    rf"|:\s*[\"']?(?={_VALUE}{{8,}})(?={_VALUE}*[0-9!@#$%^*_+/~-]))",
    re.IGNORECASE,
)


def looks_secret(text: str) -> bool:
    """Whether ``text`` holds URL credentials, a key-shaped token or an assigned secret
    value: what a memory write refuses."""
    return bool(
        any(_url_secret(m) for m in _URL_PASSWORD.finditer(text))
        or _TOKENS.search(text)
        or _ASSIGNED_SECRET.search(text)
    )


def _url_secret(m: re.Match[str]) -> bool:
    """A password, or a user part shaped like a token (``https://<token>@host``), not a
    name (``ssh://git@host``)."""
    user = m.group("user")
    return m.group("password") is not None or (
        len(user) >= 20 or (len(user) >= 8 and any(c.isdigit() for c in user))
    )


def _url_credentials(m: re.Match[str]) -> str:
    if not _url_secret(m):
        return m.group(0)
    if m.group("password") is not None:  # user:password@ keeps the user, masks the rest
        return f"{m.group('scheme')}{m.group('user')}:{MASK}@"
    return f"{m.group('scheme')}{MASK}@"


def redact(text: str, *, known: tuple[str, ...] = ()) -> str:
    """``text`` with URL credentials, key-shaped tokens and ``password=…`` values masked.

    ``known``: secrets the caller holds (the API key it sent), masked wherever they
    appear, whatever their shape — a proxy may echo a key no pattern recognises.
    """
    for secret in known:
        if len(secret) >= 4:  # an empty or one-letter key would mask every letter
            text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(_url_credentials, text)
    text = _TOKENS.sub(MASK, text)
    return _ASSIGNED.sub(lambda m: m.group("head") + MASK, text)
