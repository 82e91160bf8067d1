"""Terminal-safe text: how the CLI prints what users, models and other machines wrote.

Goals, briefs, titles, reasons, errors, artifact content and worker ids are
not ours. Printed as they are, an escape sequence in one recolours, clears or
retitles the terminal (``\\x1b[2J``, ``\\x1b]0;title\\x07``), a newline or
carriage return splits one event line in two or overwrites it, and rich reads
``[/bold]`` as markup and raises. So every such text is passed through here
where it is printed:

- ``one_line`` for a table cell, an event line or an error: escape sequences
  removed, every other control character shown as an escape (``\\n``,
  ``\\x07``), so one record stays one line;
- ``markup_safe`` for what rich prints: ``one_line``, then markup escaped;
- ``multi_line`` for content shown whole (``redfleet show``): the same, but
  newlines and tabs kept.

JSON output needs none of this: ``json.dumps`` escapes control characters.
"""

from __future__ import annotations

import re

from rich.markup import escape

# ECMA-48 sequences, removed whole: they only style or move, and their bytes are noise.
_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erasing
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC, DCS, SOS, PM, APC: titles, links
    r"|\x1b[ -/]*[0-~]"  # the rest: ESC c (reset), ESC 7, character sets
)
# C0, DEL, C1, and the line and paragraph separators str.splitlines() also breaks at.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE_AND_TAB = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def one_line(text: str) -> str:
    """``text`` for one terminal line: no escape sequence, controls shown as ``\\n``, ``\\x07``."""
    return _CONTROL.sub(_visible, _SEQUENCE.sub("", text))


def cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters; a longer one ends in ``…`` (--json keeps it whole)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markup_safe(text: str) -> str:
    """``one_line(text)`` with rich markup escaped: ``[/bold]`` prints as itself."""
    return escape(one_line(text))


def multi_line(text: str) -> str:
    """Like ``one_line`` but newlines and tabs are kept (a CR of a CRLF is dropped)."""
    return _CONTROL_BUT_NEWLINE_AND_TAB.sub(_visible, _SEQUENCE.sub("", text.replace("\r\n", "\n")))
