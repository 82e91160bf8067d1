"""Token counting works offline and caches by text."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from workers.context import Message, ToolCall, tokenizer_for
from workers.context.tokens import MESSAGE_OVERHEAD


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


def test_a_text_counted_by_pieces_counts_as_the_whole_text() -> None:
    """On source nobody here wrote (RQ's and click's, blank lines, indents, CRLF too) and
    on random runs of letters, digits, marks, emoji and every kind of space and newline."""
    import random
    from pathlib import Path

    import click
    import rq

    tok = tokenizer_for()
    sources = [*Path(rq.__file__).parent.rglob("*.py"), *Path(click.__file__).parent.glob("*.py")]
    texts = [p.read_text(encoding="utf-8") for p in sources]
    texts += [t.replace("\n", "\r\n") for t in texts]
    rng = random.Random(7)
    marks = ["a", "B", "é", "中", "😀", "1", "22", "'s", ".", "-", "(", "#", " ", "  ", "\t",
             "\n", "\n\n", "\r\n", "\u00a0", "\u2028", "\x85", "\x0b", "\x1c"]  # fmt: skip
    texts += ["".join(rng.choice(marks) for _ in range(rng.randint(1, 40))) for _ in range(5000)]
    wrong = [t[:60] for t in texts if tok.count_lines(t) != _whole(t)]
    assert not wrong, f"{len(wrong)} of {len(texts)} texts miscounted, first {wrong[0]!r}"


def test_the_pieces_a_text_shares_with_one_counted_before_are_not_encoded_again(
    monkeypatch,
) -> None:
    tok = tokenizer_for()
    shared = "".join(f"recalled item {n}: the port is {8000 + n}\n" for n in range(40))
    tok.count_lines("TASK\nname: first\n" + shared)
    second = "TASK\nname: second\n" + shared
    whole = _whole(second)
    encoded: list[str] = []
    encode = tok.encoding.encode
    monkeypatch.setattr(
        tok.encoding, "encode", lambda text, **kw: encoded.append(text) or encode(text, **kw)
    )
    assert tok.count_lines(second) == whole
    assert encoded == ["name: second\n"]
