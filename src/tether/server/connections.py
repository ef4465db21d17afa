"""What one client can make a served face hold (``tether server`` and
``tether dashboard``, both on uvicorn): its connections, its header block,
and how long a request may take to arrive.

uvicorn parses HTTP with httptools when it is installed (the ``server``
extra installs it) and with h11 otherwise (the ``dashboard`` extra). h11
refuses a header block over ``h11_max_incomplete_event_size``; httptools
(llhttp) has no limit at all, and neither closes a connection whose request
never completes (uvicorn's keep-alive timer runs only between requests). So
the protocol is uvicorn's own with a guard on top (``guarded_protocol``):

- a header block (request line and headers) over ``max_header_bytes`` or
  with more than ``max_headers`` lines is answered 431 and the connection
  closed, as it arrives (h11 answers an unfinished one 400, at the same
  size; ``HeaderLimits`` checks a finished one before the app sees it);
- a request that has not arrived whole (line, headers and body)
  ``request_timeout`` seconds after it began (or after the connection
  opened) is answered 408 and its connection closed: a silent or trickling
  client holds a connection that long at most;
- past ``max_connections`` open connections, or ``max_connections_per_client``
  from one address, a new connection is answered 503 and closed at once,
  before it is read, so a flood of idle sockets exhausts neither file
  descriptors nor the other clients' share.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    DEFAULT_REQUEST_TIMEOUT,
)
from ..errors import ConfigError

if TYPE_CHECKING:  # importable without the extras: the CLI reads the defaults from here
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Limits", "guarded_protocol"]

log = logging.getLogger("tether.connections")

#: seconds an idle keep-alive connection stays open between requests; clients
#: reuse a connection only while it has been idle for well under it
DEFAULT_KEEP_ALIVE = 5.0


@dataclass(frozen=True, slots=True)
class Limits:
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_headers: int = DEFAULT_MAX_HEADERS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    keep_alive: float = DEFAULT_KEEP_ALIVE
    #: addresses (comma-separated, or "*") of reverse proxies whose
    #: X-Forwarded-For names the client; none by default, so a client's address
    #: (the throttle's key) is its connection's and no header can change it
    forwarded_allow_ips: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_header_bytes", "max_headers", "max_connections", "max_connections_per_client"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        if self.max_header_bytes < 1024:
            raise ConfigError(f"max_header_bytes must be at least 1024, got {self.max_header_bytes}")
        for name in ("request_timeout", "keep_alive"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
                raise ConfigError(f"{name} must be seconds in (0, 86400], got {value!r}")
        if self.forwarded_allow_ips is not None and not self.forwarded_allow_ips.strip():
            raise ConfigError("forwarded_allow_ips must name at least one address (or '*'), or be None")


def _answer(status: int, reason: str, text: str) -> bytes:
    body = text.encode() + b"\n"
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class HeaderLimits:
    """ASGI middleware: a request with more than ``max_headers`` header lines,
    or more than ``max_header_bytes`` of them, gets 431. The httptools guard
    refuses them while parsing; h11 bounds only what it buffers incomplete,
    so a whole header block over the limit in one read reaches this."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            why = None
            if len(headers) > self.limits.max_headers:
                why = f"more than {self.limits.max_headers} header lines"
            elif sum(len(k) + len(v) + 4 for k, v in headers) > self.limits.max_header_bytes:
                why = f"the request line and headers are over {self.limits.max_header_bytes} bytes"
            if why is not None:
                body = f"refused: {why}\n".encode()
                await send({"type": "http.response.start", "status": 431,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def guarded_protocol(limits: Limits, http: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (``http``: auto, httptools or h11) with
    ``limits`` enforced; a class per server (it counts that server's connections)."""
    if http == "auto":
        try:
            import httptools  # noqa: F401
            http = "httptools"
        except ImportError:
            http = "h11"
    per_client: Counter[str] = Counter()
    #: h11's states of a client whose request has arrived whole
    whole: tuple[Any, ...] | None = None
    h11_idle = h11_responding = None
    #: uvicorn's protocol (typed loosely: one class body extends either)
    Base: type[Any]
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        Base = HttpToolsProtocol
    elif http == "h11":
        import h11
        from uvicorn.protocols.http.h11_impl import H11Protocol

        Base, whole = H11Protocol, (h11.DONE, h11.MUST_CLOSE)
        h11_idle, h11_responding = h11.IDLE, h11.SEND_RESPONSE
    else:
        raise ConfigError(f"http must be auto, httptools or h11, got {http!r}")

    class Guarded(Base):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None
        _address = ""
        #: httptools: the bytes and lines of a header block not yet complete
        _in_head = True
        #: a header block or a message ended in the bytes just parsed (they are not all a head's)
        _head_ended = False
        _head_bytes = 0
        _head_lines = 0
        _refused = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._address = self.client[0] if self.client else "unknown"
            per_client[self._address] += 1
            if len(self.connections) > limits.max_connections:
                self._refuse(503, "Service Unavailable", f"over {limits.max_connections} open connections")
            elif per_client[self._address] > limits.max_connections_per_client:
                self._refuse(503, "Service Unavailable",
                             f"over {limits.max_connections_per_client} open connections from {self._address}")
            else:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            per_client[self._address] -= 1
            if per_client[self._address] <= 0:
                del per_client[self._address]
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # the first bytes of a next request on a kept-alive connection
            self._head_ended = False
            super().data_received(data)
            if whole is not None:  # h11: it bounds the header block itself
                if self.conn.their_state in whole:
                    self._disarm()  # the request is whole (httptools says so in on_message_complete)
            elif self._in_head and not self._head_ended and not self._refused:
                # httptools holds a header's text until the header ends, and
                # reports it only then: what it holds is counted here, as it comes
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_header_bytes:
                    self._refuse(431, "Request Header Fields Too Large",
                                 f"the request line and headers are over {limits.max_header_bytes} bytes")

        # -- the request's time ----------------------------------------------------------
        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.request_timeout, self._timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _timed_out(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            log.info("closed a connection from %s: its request did not arrive whole within %gs", self._address,
                     limits.request_timeout)
            if self._unanswered():
                self.transport.write(_answer(408, "Request Timeout",
                                             f"the request did not arrive whole within {limits.request_timeout:g}s"))
            self.transport.close()

        def _unanswered(self) -> bool:
            """Whether no answer to the request under way has begun (else it is only closed)."""
            if whole is not None:  # h11: IDLE until a request's head has come
                state = self.conn.our_state
                return bool(state is h11_idle or (state is h11_responding and not self.cycle.response_started))
            return self._in_head or (self.cycle is not None and not self.cycle.response_started)

        def _refuse(self, status: int, reason: str, why: str) -> None:
            self._refused = True
            self._disarm()
            log.info("refused a request from %s: %s", self._address, why)
            self.transport.write(_answer(status, reason, f"refused: {why}"))
            self.transport.close()

        # -- httptools' callbacks: the header block's lines, counted as they are parsed ------
        def on_message_begin(self) -> None:
            self._head_lines = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            if not self._refused:
                super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if self._refused:
                return
            self._head_lines += 1
            if self._head_lines > limits.max_headers:
                self._refuse(431, "Request Header Fields Too Large", f"more than {limits.max_headers} header lines")
                return
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_head, self._head_bytes, self._head_ended = False, 0, True
            if not self._refused:
                super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            self._in_head, self._head_ended = True, True  # what comes next is the next request's
            if not self._refused:
                self._disarm()  # the request is whole
                super().on_message_complete()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{Base.__name__}"
    return Guarded


def uvicorn_options(limits: Limits, http: str = "auto") -> dict[str, Any]:
    """uvicorn.Config's arguments that enforce ``limits``."""
    # uvicorn trusts X-Forwarded-For from 127.0.0.1 unless told otherwise: any
    # local client could then claim a new address per request and escape the
    # per-address throttle. Only the proxies named are trusted.
    proxied = limits.forwarded_allow_ips is not None
    return {"http": guarded_protocol(limits, http), "h11_max_incomplete_event_size": limits.max_header_bytes,
            "timeout_keep_alive": limits.keep_alive, "proxy_headers": proxied,
            "forwarded_allow_ips": limits.forwarded_allow_ips if proxied else None}
