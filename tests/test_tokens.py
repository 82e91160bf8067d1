"""Token counting works offline and caches by text."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

from workers.context import Message, ToolCall, tokenizer_for
from workers.context.tokens import MESSAGE_OVERHEAD, Tokenizer


def test_the_tokenizer_loads_and_counts_with_networking_blocked(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import socket

        def blocked(*args, **kwargs):
            raise OSError("network blocked in this test")

        socket.socket.connect = blocked
        socket.create_connection = blocked
        socket.getaddrinfo = blocked

        from workers.context import tokenizer_for
        print(tokenizer_for().count("hello world, ACCT-88412"))
        """
    )
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path)}  # no earlier download to reuse
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == tokenizer_for().count("hello world, ACCT-88412") > 0


def test_message_counts_include_framing_and_tool_calls() -> None:
    tok = tokenizer_for()
    call = ToolCall(id="c1", name="fetch_page", arguments={"url": "https://x"})
    plain = Message(role="assistant", content="fetching")
    with_call = Message(role="assistant", content="fetching", tool_calls=(call,))
    assert tok.count_message(plain) == MESSAGE_OVERHEAD + tok.count("fetching")
    assert tok.count_message(with_call) > tok.count_message(plain)


def test_truncate_keeps_the_longest_prefix_that_fits() -> None:
    tok = tokenizer_for()
    text = " ".join(f"word{i}" for i in range(500))
    head = tok.truncate(text, 50)
    assert text.startswith(head) and tok.count(head) <= 50 < tok.count(text)


def _whole(text: str) -> int:
    return len(tokenizer_for().encoding.encode(text, disallowed_special=()))


class _Recording:
    """An encoding that records what it is asked to encode (for one ``Tokenizer``)."""

    def __init__(self, encoding: Any) -> None:
        self.name, self._encoding, self.encoded = encoding.name, encoding, []

    def encode(self, text: str, **kw: Any) -> list[int]:
        self.encoded.append(text)
        return self._encoding.encode(text, **kw)


def test_a_text_counted_by_pieces_counts_as_the_whole_text() -> None:
    """On source nobody here wrote (RQ's and the standard library's email package, blank
    lines, indents, CRLF too) and on random runs of letters, digits, marks, emoji and
    every kind of space, newline and invisible character."""
    import email
    import random
    from pathlib import Path

    import rq

    tok = tokenizer_for()
    sources = [*Path(rq.__file__).parent.rglob("*.py"), *Path(email.__file__).parent.glob("*.py")]
    texts = [p.read_text(encoding="utf-8") for p in sources]
    texts += [t.replace("\n", "\r\n") for t in texts]
    rng = random.Random(7)
    marks = ["a", "B", "é", "中", "😀", "1", "22", "'s", ".", "-", "/", "(", "#", " ", "  ", "\t",
             "\n", "\n\n", "\r\n", "\u00a0", "\u2028", "\x85", "\x0b", "\x1c", "\u180e",
             "\u200b", "\ufeff", "\u3000"]  # fmt: skip
    texts += ["".join(rng.choice(marks) for _ in range(rng.randint(1, 40))) for _ in range(5000)]
    wrong = [t[:60] for t in texts if tok.count_pieces(t) != _whole(t)]
    assert not wrong, f"{len(wrong)} of {len(texts)} texts miscounted, first {wrong[0]!r}"


def test_only_the_pieces_a_text_has_not_shared_are_encoded_and_then_it_is_known_whole() -> None:
    tok = Tokenizer()
    recording = tok.encoding = _Recording(tok.encoding)
    shared = "".join(f"recalled item {n}:\n\n  the port is {8000 + n}\n" for n in range(40))
    tok.count_pieces("TASK\nname: first\n" + shared)
    recording.encoded.clear()
    second = "TASK\nname: second\n" + shared
    assert tok.count_pieces(second) == _whole(second)
    assert recording.encoded == ["name: second\n"]
    assert tok.count_pieces(second) == tok.count(second) == _whole(second)
    assert recording.encoded == ["name: second\n"]  # the whole text was kept: no new encoding


def test_an_encoding_no_cut_is_known_safe_for_is_counted_whole() -> None:
    tok = Tokenizer()
    recording = tok.encoding = _Recording(tok.encoding)
    recording.name = "o200k_base"  # a newline may join the word after it there (".\n/x")
    text = "a.\n/x\nb\n"
    assert tok.count_pieces(text) == _whole(text)
    assert recording.encoded == [text]
