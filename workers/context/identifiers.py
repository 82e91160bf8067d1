"""Identifiers that must survive compaction: ids, hashes, paths, URLs, dates, amounts.

Free-text summaries lose most of them (a path, an account id, a commit hash
named once and needed thirty steps later). The shapes below are broad on
purpose — any token that mixes letters and digits around a separator, any
UUID, hash, path, URL, e-mail, version, timestamp or amount — because an
extractor written for one id format silently misses the next one. It is
only the first line of defence: a reduced tool result also keeps the handle
of its full text, so what no pattern knew is still one reader call away.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Order matters: at one position the first shape that matches wins, so the
# longer, more specific shapes (a UUID, a timestamp) come before the generic ones.
_PATTERNS = [
    r"\bhttps?://[^\s<>\"'`)\]]+",  # URLs
    r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+",  # e-mail addresses
    r"\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b",  # UUIDs, whole
    # ISO dates and timestamps: 2026-03-07, 2026-03-07T14:05Z, 2026-03-07 14:05:09+02:00
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?",
    r"[€$£¥]\s?\d[\d.,]*\d|\b\d[\d.,]*\d\s?(?:EUR|USD|GBP|€)",  # amounts: €1.234,56
    r"\bv?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?",  # versions: 1.2.3, v2.14.0-rc.3
    r"(?<![\w/])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b",  # src/app/main.py
    r"(?<![\w/:])/(?:[\w.-]+/)+[\w.-]+",  # /var/lib/redis
    r"\b[0-9a-fA-F]{7,64}\b",  # hashes (short ones are checked below)
    r"\b[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)+\b",  # ACCT-7Q2X9, inv_2f9c1e (checked below)
    r"\b[A-Z0-9]{6,}\b",  # codes: SKU7Q2X9A (checked below)
    r"\b\d{1,3}(?:[,.]\d{3})+(?:[.,]\d+)?\b",  # grouped numbers: 4,750 or 1.234.567
    r"\b\d{5,}\b",  # long numbers (order ids, amounts in cents)
]
_ID = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))
_TRAILING = ".,;:!?"


def _plausible(token: str) -> bool:
    """Generic shapes need evidence they are ids, not words: digits and letters mixed."""
    if token.isdigit():
        return len(token) >= 5  # a long number, whichever shape matched it first
    digits = sum(c.isdigit() for c in token)
    letters = sum(c.isalpha() for c in token)
    if re.fullmatch(r"[0-9a-fA-F]{7,11}", token):
        return digits > 0 and letters > 0  # a short hash, not a word or a plain number
    if re.fullmatch(r"[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)+", token):
        # ACCT-88412 and ACCT-7Q2X9 yes; utf-8, step_2, x1_10 and snake_case names no.
        return len(token) >= 6 and digits >= 2 and letters >= 2
    if re.fullmatch(r"[A-Z0-9]{6,}", token):
        return digits > 0 and letters > 0
    return True


def extract(text: str, *, exclude: Iterable[str] = ()) -> list[str]:
    """The identifiers named in ``text``, in order of first appearance.

    ``exclude`` lists identifiers the caller already shows elsewhere (the
    path a tool was called with, the handle of the artifact itself).
    """
    skip = set(exclude)
    found: dict[str, None] = {}
    for match in _ID.finditer(text):
        token = match.group(0).rstrip(_TRAILING)
        if token and token not in skip and _plausible(token):
            found.setdefault(token, None)
    return list(found)
