"""Identifiers that must survive compaction: ids, paths, hashes, long numbers.

Free-text summaries lose most of them (a path, an account id, a commit hash
named once and needed thirty steps later). Compaction extracts them from the
turns it rolls up and checks each is still present afterwards.
"""

from __future__ import annotations

import re

_PATTERNS = [
    r"\b[A-Z][A-Z0-9]+-\d{2,}\b",  # ACCT-88412, JIRA-123
    r"\b[a-z]{1,8}-[0-9a-f]{6,}\b",  # j-1a2b3c4d, a-0123abcd (redfleet-style ids)
    r"(?<![\w/])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b",  # src/app/main.py, /etc/x.conf
    r"\b[0-9a-f]{12,64}\b",  # hashes
    r"\b\d{5,}\b",  # long numbers (order ids, amounts in cents)
]
_ID = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))


def extract(text: str) -> list[str]:
    """The identifiers named in ``text``, in order of first appearance."""
    return list(dict.fromkeys(m.group(0) for m in _ID.finditer(text)))
