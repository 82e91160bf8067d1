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
