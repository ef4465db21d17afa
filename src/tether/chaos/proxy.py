"""A small TCP proxy for partition tests: pass traffic, or blackhole it (nothing
gets through, sockets stay open and half-alive, as when a network drops
packets), or reset every connection, or refuse new ones. Threads, not asyncio, so it runs beside
any worker.

A blackhole holds bytes back; it does not throw them away. TCP never loses
bytes it has acknowledged: when a real network drops packets, the sender
retransmits, and after the heal its requests arrive, late. A proxy that read
and dropped them acknowledged data that never arrived, which no network does;
the request waited forever for an answer after the heal (a worker's reaper
sat 22 s on one, until a later reset freed it: issue 17.7)."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time


class TCPProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def blackhole(self) -> None:
        self.mode = "blackhole"

    def refuse(self) -> None:
        """New connections are closed as soon as they come (a server down, or
        its address not yet taken over); existing ones are left as they are."""
        self.mode = "refuse"

    def heal(self) -> None:
        self.mode = "pass"

    def reset(self) -> None:
        with self._lock:
            for s in self._conns:
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    s.close()
            self._conns.clear()

    def close(self) -> None:
        self._stop.set()
        self.reset()
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.mode == "refuse":
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            # Each chunk is forwarded as it arrives: with Nagle's algorithm on,
            # a small write waited for the peer's delayed ACK (25-50 ms a query).
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._stop.is_set():
                if self.mode != "pass":
                    # blackhole: read nothing, so bytes wait in the kernel's
                    # buffers, as in a sender's retransmit queue, until the heal
                    time.sleep(0.02)
                    continue
                ready, _, _ = select.select([a, b], [], [], 0.05)
                for s in ready:
                    if self.mode != "pass":
                        break
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
        except (OSError, ValueError):  # ValueError: reset() closed a socket under select()
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()
