"""HTTP/1.1 requests from an event loop, for a worker's rounds (``HttpStore.claim_async`` and the rest).

The store's other methods use ``http.client`` on the calling thread. A worker
awaits its rounds (claim, complete, complete_and_claim) on its event loop,
every round: through a thread they paid a hop to the thread and back, the
wait for the thread to get the GIL from a loop busy starting the last claim's
jobs, and ``http.client``'s header parsing (the email package). Here the loop
sends the request and reads the answer itself, as the PostgreSQL store's
``LoopConnections`` do for its statements.

Each event loop has keep-alive connections of its own: plain non-blocking
sockets driven by the loop's ``sock_*`` calls, with no transports and no tasks,
so that, as there, a loop may end at any time and ``close()`` works from any
thread (an idle socket is in no one's hands; one in use is closed when handed
back). Only ``http://``: over https the rounds go through the threads.

The answers are a tether server's, or a proxy's in front of it: a length,
chunks, or a body that ends with the connection. Anything else unexpected
(a malformed head, a closed connection, the timeout) is an ``OSError`` or
``ValueError`` for the caller to turn into ``ServerUnavailable``; the socket
is then closed, never reused.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from ..idle import ready_to_read
from ..per_loop import PerLoop

__all__ = ["LoopHttp"]

#: the most a response's status line and headers may take
MAX_HEAD = 64 * 1024
#: idle connections kept per loop (a worker's rounds use one or two at once)
MAX_IDLE = 4
_RECV = 256 * 1024


class _Conn:
    __slots__ = ("buf", "last_used", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.last_used = time.monotonic()


class _Loop:
    """One event loop's idle connections."""

    __slots__ = ("closed", "idle", "lock")

    def __init__(self) -> None:
        self.idle: list[_Conn] = []
        self.lock = threading.Lock()  # close() may come from another thread
        self.closed = False

    def take(self, reuse_idle: float) -> _Conn | None:
        """The most recently used idle connection, if it has been idle for
        less than ``reuse_idle`` (the server closes idle ones); older ones close."""
        stale: list[_Conn] = []
        found = None
        now = time.monotonic()
        with self.lock:
            while self.idle:
                c = self.idle.pop()
                if now - c.last_used < reuse_idle and not ready_to_read(c.sock):  # (idle.py)
                    found = c
                    break
                stale.append(c)
        for c in stale:
            c.sock.close()
        return found

    def give_back(self, conn: _Conn) -> None:
        conn.last_used = time.monotonic()
        with self.lock:
            if not self.closed and len(self.idle) < MAX_IDLE:
                self.idle.append(conn)
                return
        conn.sock.close()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for c in idle:
            c.sock.close()


class LoopHttp:
    """Requests to one ``host:port`` over plain HTTP/1.1, from any event loop."""

    def __init__(self, host: str, port: int, netloc: str, *, reuse_idle: float) -> None:
        self.host, self.port, self.netloc = host, port, netloc
        self.reuse_idle = reuse_idle
        self._loops = PerLoop(_Loop, _Loop.close, closed=lambda: ConnectionError("the store is closed"))

    async def request(self, method: str, target: str, headers: dict[str, str], body: bytes | None,
                      timeout: float) -> tuple[int, bytes]:
        """Send one request and read its answer, within ``timeout`` seconds in
        all: (status, body). Raises OSError (TimeoutError included) or ValueError."""
        loop = asyncio.get_running_loop()
        mine = self._loops.mine(loop)
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.netloc}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None:
            head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        conn: _Conn | None = None
        reusable = False
        try:
            async with asyncio.timeout(timeout):
                conn = mine.take(self.reuse_idle)
                if conn is None:
                    conn = _Conn(await self._connect(loop))
                await loop.sock_sendall(conn.sock, data)
                status, reusable, answer = await _read_response(loop, conn)
            return status, answer
        finally:
            # Cut short (a timeout, a cancellation, an error): the socket may hold
            # half an answer, so it is never reused.
            if conn is not None:
                if reusable and not conn.buf:
                    mine.give_back(conn)
                else:
                    conn.sock.close()

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        last: OSError = OSError(f"no address for {self.host}")
        for family, type_, proto, _, addr in infos:
            sock = socket.socket(family, type_, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise last

    def close(self) -> None:
        """Close every loop's idle connections now, and the busy ones as they
        come back; no new ones after this."""
        self._loops.close()


async def _read_response(loop: asyncio.AbstractEventLoop, conn: _Conn) -> tuple[int, bool, bytes]:
    """(status, whether the connection may be reused, body)."""
    buf = conn.buf
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > MAX_HEAD:
            raise ValueError(f"the response's head is over {MAX_HEAD} bytes")
        await _more(loop, conn)
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    del buf[:end + 4]
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
    status = int(code)
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"a malformed header line: {line[:100]!r}")
        fields[name.strip().lower()] = value.strip()
    if 100 <= status < 200:
        raise ValueError(f"an unexpected interim response (HTTP {status})")
    reusable = version == "HTTP/1.1" and "close" not in fields.get("connection", "").lower()
    if status in (204, 304):
        return status, reusable, b""
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return status, reusable, await _chunked(loop, conn)
    length = fields.get("content-length")
    if length is None:  # the body ends with the connection
        while await _more(loop, conn, eof_ok=True):
            pass
        body = bytes(buf)
        buf.clear()
        return status, False, body
    if not length.isdigit():
        raise ValueError(f"a malformed Content-Length: {length[:50]!r}")
    n = int(length)
    while len(buf) < n:
        await _more(loop, conn)
    body = bytes(buf[:n])
    del buf[:n]
    return status, reusable, body


async def _chunked(loop: asyncio.AbstractEventLoop, conn: _Conn) -> bytes:
    buf, out = conn.buf, bytearray()
    while True:
        while (eol := buf.find(b"\r\n")) < 0:
            if len(buf) > MAX_HEAD:
                raise ValueError("a malformed chunk size line")
            await _more(loop, conn)
        size_text = bytes(buf[:eol]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError(f"a malformed chunk size: {size_text[:20]!r}") from None
        del buf[:eol + 2]
        if size == 0:  # the last chunk, then trailers up to an empty line
            while True:
                while (eol := buf.find(b"\r\n")) < 0:
                    if len(buf) > MAX_HEAD:
                        raise ValueError("malformed trailers")
                    await _more(loop, conn)
                line = bytes(buf[:eol])
                del buf[:eol + 2]
                if not line:
                    return bytes(out)
        while len(buf) < size + 2:
            await _more(loop, conn)
        out += buf[:size]
        del buf[:size + 2]


async def _more(loop: asyncio.AbstractEventLoop, conn: _Conn, *, eof_ok: bool = False) -> bool:
    """Read what the socket has into the connection's buffer; False at the end
    of the stream when ``eof_ok``, else that end is an error."""
    chunk = await loop.sock_recv(conn.sock, _RECV)
    if not chunk:
        if eof_ok:
            return False
        raise ConnectionError("the server closed the connection before the end of its answer")
    conn.buf += chunk
    return True
