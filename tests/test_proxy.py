"""The chaos proxy's blackhole behaves as a network partition does: nothing
gets through while it lasts, and nothing the sender's TCP acknowledged is lost
when it heals (real sockets, a real echo server)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from tether.chaos.proxy import TCPProxy


@pytest.fixture
def echo() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                while not stop.is_set() and (data := conn.recv(65536)):
                    conn.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()


def test_a_request_sent_into_a_blackhole_is_answered_after_the_heal(echo: int) -> None:
    proxy = TCPProxy("127.0.0.1", echo)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as c:
            c.sendall(b"before")
            assert c.recv(64) == b"before"
            proxy.blackhole()
            c.sendall(b"during")
            c.settimeout(0.5)
            with pytest.raises(TimeoutError):
                c.recv(64)  # cut off: no answer
            proxy.heal()
            c.settimeout(5)
            assert c.recv(64) == b"during"  # held, not lost: the request arrives late
            c.sendall(b"after")
            assert c.recv(64) == b"after"
    finally:
        proxy.close()

