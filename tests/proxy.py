"""A loopback TCP proxy in front of a Redis server that loses replies and stalls.

Faults as a network makes them, between a client and a real server:

- ``drop_reply(needle)``: the next command whose bytes contain ``needle``
  reaches the server and runs, but its reply never reaches the client, whose
  connection is then cut (a reply lost on the wire);
- ``stall()`` / ``resume()``: a silent partition — connections stay open but
  no byte moves either way until resumed;
- ``sever()``: every open connection is cut at once.

Used by the tests and by ``benchmarks/soak.py``; it only ever listens on
127.0.0.1 and connects to the upstream port given.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

_CHUNK = 65536


class _Pair:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.doomed = False  # the next reply is lost and the connection cut
        self.closed = threading.Event()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                # SO_LINGER 0: a reset, as a dropped connection looks to the client.
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            with contextlib.suppress(OSError):
                sock.close()


class FaultProxy:
    def __init__(self, upstream_port: int, *, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._pairs: set[_Pair] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopped = threading.Event()
        self._needles: list[bytes] = []
        self.dropped = 0  # replies lost so far
        self.requests = 0  # reads of client bytes passed on: a round trip is one or more
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # -- faults ------------------------------------------------------------------

    def drop_reply(self, needle: bytes, times: int = 1) -> None:
        """Lose the reply to the next ``times`` commands containing ``needle``."""
        with self._lock:
            self._needles.extend([needle] * times)

    def armed(self) -> int:
        """Drops still waiting for their command."""
        with self._lock:
            return len(self._needles)

    def stall(self) -> None:
        """Stop moving bytes in both directions; connections stay open."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def sever(self) -> None:
        """Cut every open connection."""
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.close()

    # -- running -----------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.sever()
        self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        self._listener.settimeout(0.05)  # so that stop() is noticed: close() wakes no accept()
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.add(pair)
            for src, dst, requests in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(pair, src, dst, requests), daemon=True
                ).start()

    def _take_needle(self, data: bytes) -> bool:
        with self._lock:
            for i, needle in enumerate(self._needles):
                if needle in data:
                    del self._needles[i]
                    return True
        return False

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        tail = b""  # the end of the last chunk, so a needle split across two still matches
        try:
            while not pair.closed.is_set():
                self._flowing.wait()
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready or not self._flowing.is_set():
                    continue
                data = src.recv(_CHUNK)
                if not data:
                    break
                if requests:
                    with self._lock:
                        self.requests += 1
                    if self._take_needle(tail + data):
                        pair.doomed = True
                    tail = data[-256:]
                elif pair.doomed:
                    with self._lock:
                        self.dropped += 1
                    break  # the reply is lost; the connection goes with it
                dst.sendall(data)
        except (OSError, ValueError):
            pass  # ValueError: select() on a socket the other direction just closed
        finally:
            pair.close()
            with self._lock:
                self._pairs.discard(pair)
