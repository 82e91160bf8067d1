"""The quotes of forgotten text: what a forget looks for in records, and how it redacts them.

A forgotten item's text is looked for whole, as written and as JSON escapes
it, and cut as recall (600 characters) and episodes (300) quote a long one;
so are its identifiers on their own, since the context engine pins
identifiers apart from their sentence. A match is whole: never inside a
longer word or identifier, so forgetting ``eu-west-1`` leaves ``eu-west-10``
(``_`` and an escape like ``\n`` before it do not make it part of a word).

A quote is found in any case and with its spaces and line breaks changed
(``The Vault Code`` for ``the vault  code``): a copy an agent lower-cased or
re-wrapped quotes it all the same.

A text shorter than ``MIN_QUOTE_CHARS`` is not looked for whole (its
identifiers still are): "y" or "is" cannot be told from the same letters in
other text, and looking for them would rewrite every record of the tenant.
Such an item is still removed with all derived from it by provenance; the
forget report lists it as ``unsearched``, so that the limit is never silent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence

import redis

from ..scripts import run_plain

REDACTED = "[forgotten]"
MIN_QUOTE_CHARS = 12

# Tokens redacted on their own: 6+ characters with digits and letters or separators
# (ACCT-7Q2X9, 123-45-6789), but not an id of redfleet's own, which records use to
# point at each other.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]{4,}[A-Za-z0-9]")
# redfleet's own ids: artifacts a-, jobs j-, items m-, tasks p-/c-/r-/s-, episodes, workers.
_OWN_ID = re.compile(
    r"^(?:[a-z]-[0-9a-f]{5,}|m-ep-j-[0-9a-f]+-\d+|(?:planner|coder|reviewer|subagent)-[\w.-]+)$"
)


# A match stands on its own: no letter or digit runs on at either end ("_" does not
# count: ACCT-7Q2X9_invoice.pdf holds the identifier). In JSON text a quote may also
# follow an escape (\n, \u201c) whose last character is a letter or digit.
_ALNUM = re.compile(r"[^\W_]")
_ESCAPE_BEFORE = re.compile(r"(?:\\[nrtbf]|\\u[0-9a-fA-F]{4})$")
# What Lua's %s trims too (the forget script counts a text's length the same way).
_ASCII_SPACE = " \t\n\v\f\r"


_SPACES = re.compile(r"\s+")


def _loose(needle: str) -> str:
    """A needle's pattern: its text literal, each run of whitespace any run of whitespace."""
    return r"\s+".join(re.escape(part) for part in _SPACES.split(needle))


def _whole(match: re.Match[str]) -> bool:
    """Whether ``match`` stands on its own in its text (see above)."""
    text, start, end = match.string, match.start(), match.end()
    runs_on = start > 0 and _ALNUM.match(text, start) and _ALNUM.match(text, start - 1)
    if runs_on and not _ESCAPE_BEFORE.search(text, max(0, start - 6), start):
        return False
    return not (end < len(text) and _ALNUM.match(text, end - 1) and _ALNUM.match(text, end))


class Quotes:
    """The needles of some forgotten texts, matched whole; ``unsearched``: texts too short."""

    def __init__(self, texts: Iterable[str]) -> None:
        found: dict[str, None] = {}
        self.unsearched: list[str] = []
        for text in texts:
            if len(text.strip(_ASCII_SPACE)) >= MIN_QUOTE_CHARS:
                for quoted in {text, text[:600], text[:300]}:
                    found[quoted] = None
                    found[json.dumps(quoted)[1:-1]] = None  # json.dumps, pydantic: escaped
                    found[json.dumps(quoted, ensure_ascii=False)[1:-1]] = None
            else:
                self.unsearched.append(text)
            for token in _IDENTIFIER.findall(text):
                mixed = any(c.isalpha() for c in token) or any(not c.isalnum() for c in token)
                if any(c.isdigit() for c in token) and mixed and not _OWN_ID.match(token):
                    found[token] = None
        # Plain literals, longest first, so that at any place the longest needle wins (a
        # whole text over its 600-character cut, over an identifier in it); a match
        # that does not stand on its own is left (``_whole``).
        needles = sorted(found, key=len, reverse=True)
        self._pattern = (
            re.compile("|".join(map(_loose, needles)), re.IGNORECASE) if needles else None
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    def found_in(self, text: str) -> bool:
        return self._pattern is not None and any(map(_whole, self._pattern.finditer(text)))

    def scrub(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: REDACTED if _whole(m) else m.group(0), text)


# A field its owner keeps rewriting (a live task's checkpoint) is read again this often
# before the forget reports it as not reached.
_RETRIES = 5


def scrub_hash(
    client: redis.Redis,
    key: bytes,
    quotes: Quotes,
    fields: Sequence[str] | None,
    *,
    apply: bool = True,
    digest_field: str = "",
) -> tuple[bool, list[str]]:
    """Redact the values (never the field names) of a hash, or only of ``fields``.

    Written by ``redactRecord`` only where a value is still the one read: a
    field its owner changed meanwhile is read and redacted again, so an older
    checkpoint never goes back over a newer one. ``digest_field``: a field
    holding the sha256 of the one field redacted (a memory file's), written
    with it. Whether any value quoted a
    needle, and the fields still changing after ``_RETRIES`` reads (not
    reached); with ``apply`` false nothing is written.
    """
    found, wanted = False, None if fields is None else set(fields)
    for _ in range(_RETRIES):
        values = client.hgetall(key)
        triples: list[bytes | str] = []
        for name, value in values.items():
            if wanted is not None and name.decode() not in wanted:
                continue
            text = value.decode(errors="replace")
            clean = quotes.scrub(text)
            if clean != text:
                triples += [name, value, clean]
                if digest_field and digest_field.encode() in values:
                    # The digest of the field follows it, in the same write.
                    digest = hashlib.sha256(clean.encode()).hexdigest()
                    triples += [digest_field, values[digest_field.encode()], digest]
        found = found or bool(triples)
        if not triples or not apply:
            return found, []
        res = run_plain(client, "redactRecord", [key], ["hash", *triples])
        moved = res.data["moved"].split()
        if not moved:
            return found, []
        wanted = set(moved)
    return found, [f"{key.decode()} {name}" for name in sorted(wanted or ())]


def scrub_list(client: redis.Redis, key: bytes, quotes: Quotes, *, apply: bool = True) -> bool:
    """Redact the elements of a list that quote a needle, where they are when written
    (``redactRecord``); whether any did."""
    pairs: list[bytes | str] = []
    for value in dict.fromkeys(client.lrange(key, 0, -1)):
        text = value.decode(errors="replace")
        clean = quotes.scrub(text)
        if clean != text:
            pairs += [value, clean]
    if pairs and apply:
        run_plain(client, "redactRecord", [key], ["list", *pairs])
    return bool(pairs)


def drop_entries(
    client: redis.Redis,
    key: bytes | str,
    quotes: Quotes,
    *,
    jobs: set[str] | None = None,
    apply: bool = True,
) -> bool:
    """Remove the stream entries quoting a needle (of ``jobs`` only, in the global stream).

    The stream is rebuilt without them (``redactRecord``): none of their bytes
    stay, as they would after an XDEL.
    """
    hits = [
        entry_id
        for entry_id, fields in client.xrange(key)
        if (jobs is None or fields.get(b"job_id", b"").decode() in jobs)
        and any(quotes.found_in(v.decode(errors="replace")) for v in fields.values())
    ]
    if hits and apply:
        name = key.decode() if isinstance(key, bytes) else key
        run_plain(client, "redactRecord", [name, f"{name}:rewrite"], ["stream", *hits])
    return bool(hits)
