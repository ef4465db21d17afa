"""The HTTP store's transport: a request built from ``wire.OPS``, sent, and
its answer read back as JSON or as the exception a local store would raise.

From a thread, ``http.client``: one keep-alive connection per thread, like the
database backends' connection per thread, so the heartbeat thread never
queues behind a claim. From an event loop (a worker's rounds), ``aio``: the
loop's own connections, no thread hop (plain http only).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from ...config import DatabaseURL
from ...errors import (
    AccessDenied,
    ConfigError,
    NotYourWorker,
    PayloadError,
    ServerUnavailable,
    StaleAttempt,
    TetherError,
)
from ..flows import FlowsEnded
from ..idle import ready_to_read
from . import wire
from .aio import LoopHttp
from .wire_flows import FLOW_REPORTS, decode_flows

__all__ = ["DEFAULT_CLAIM_WAIT", "DEFAULT_TIMEOUT", "REUSE_IDLE", "HttpClient", "UnknownOperation", "done_rows",
           "tasks_field"]

log = logging.getLogger("tether.store.http")

DEFAULT_TIMEOUT = 10.0
#: how long a claim may wait on the server for jobs (capped at a quarter of the lease TTL)
DEFAULT_CLAIM_WAIT = 1.0
#: reuse a keep-alive connection only while it has been idle for less than this
#: (the server closes idle ones after 5 s; a request must not race that close)
REUSE_IDLE = 2.0


class _Conn:
    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn
        self.last_used = time.monotonic()


class HttpClient:
    #: ``Workflows.flows_ended`` (an annotation: ``HttpStore``'s own method)
    flows_ended: Callable[[FlowsEnded | None], None]

    def __init__(self, dsn: DatabaseURL, *, token: str | None = None) -> None:
        token = token or os.environ.get("TETHER_TOKEN")
        if not token:
            raise ConfigError(f"the tether server at {dsn.url} needs a token: set TETHER_TOKEN (every command), "
                              "pass token=... (Python) or --token (tether worker)")
        parts = urlsplit(dsn.url)
        self.url = dsn.url
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._auth = f"Bearer {token}"
        self.timeout = float(dsn.options.get("timeout", DEFAULT_TIMEOUT))
        self.claim_wait = float(dsn.options.get("wait", DEFAULT_CLAIM_WAIT))
        self._local = threading.local()
        self._all: list[_Conn] = []
        self._lock = threading.Lock()
        #: requests from event loops (None over https: those go through threads)
        self._aio = None if self._https else LoopHttp(self._host, self._port, parts.netloc, reuse_idle=REUSE_IDLE)

    def __repr__(self) -> str:
        return f"<HttpStore {self.url}>"

    # -- from a thread -----------------------------------------------------------------
    def _connection(self) -> _Conn:
        c: _Conn | None = getattr(self._local, "conn", None)
        if (c is not None and time.monotonic() - c.last_used < REUSE_IDLE
                and (c.conn.sock is None or not ready_to_read(c.conn.sock))):  # (idle.py)
            return c
        if c is not None:
            self._drop(c)
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        c = _Conn(cls(self._host, self._port, timeout=self.timeout))
        self._local.conn = c
        with self._lock:
            self._all.append(c)
        return c

    def _drop(self, c: _Conn) -> None:
        c.conn.close()
        with self._lock:
            if c in self._all:
                self._all.remove(c)
        if getattr(self._local, "conn", None) is c:
            self._local.conn = None

    def _request(self, name: str, body: dict[str, Any] | None, path: dict[str, Any] | None,
                 query: dict[str, Any] | None, now: datetime | None) -> tuple[wire.Op, str, dict[str, str],
                                                                             bytes | None]:
        """An operation's request: (op, target, headers, body)."""
        op = wire.OPS_BY_NAME[name]
        target = self._prefix + op.path.format(**{k: quote(str(v)) for k, v in (path or {}).items()})
        if query:
            target += "?" + urlencode({k: (str(v).lower() if isinstance(v, bool) else v)
                                       for k, v in query.items() if v is not None})
        headers = {"Authorization": self._auth, "Accept": "application/json"}
        if name in wire.CLAIMING:
            headers[wire.ROWS_HEADER] = "rows"
        payload: bytes | None = None
        if op.body is not None:
            data = dict(body or {})
            if now is not None:
                data["now"] = now.isoformat()
            payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        return op, target, headers, payload

    def _call(self, name: str, body: dict[str, Any] | None = None, *, path: dict[str, Any] | None = None,
              query: dict[str, Any] | None = None, timeout: float | None = None,
              now: datetime | None = None) -> dict[str, Any]:
        op, target, headers, payload = self._request(name, body, path, query, now)
        c = self._connection()
        try:
            if c.conn.sock is not None:
                c.conn.sock.settimeout(timeout or self.timeout)
            else:
                c.conn.timeout = timeout or self.timeout
            c.conn.request(op.method, target, body=payload, headers=headers)
            resp = c.conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop(c)
            raise self._unreachable(name, exc) from None
        c.last_used = time.monotonic()
        if resp.will_close:
            self._drop(c)
        return self._answer(name, resp.status, raw)

    # -- from an event loop -------------------------------------------------------------
    async def _call_async(self, name: str, body: dict[str, Any], *, timeout: float,
                          now: datetime | None) -> dict[str, Any]:
        """``_call`` on the running loop's own connection (only with ``_aio``)."""
        assert self._aio is not None
        op, target, headers, payload = self._request(name, body, None, None, now)
        try:
            status, raw = await self._aio.request(op.method, target, headers, payload, timeout)
        except (OSError, ValueError) as exc:
            raise self._unreachable(name, exc) from None
        return self._answer(name, status, raw)

    # -- answers ------------------------------------------------------------------------
    def _unreachable(self, name: str, exc: Exception) -> ServerUnavailable:
        return ServerUnavailable(f"tether server {self.url} unreachable during {name}: "
                                 f"{type(exc).__name__}: {exc or 'no answer'}")

    def _answer(self, name: str, status: int, raw: bytes) -> dict[str, Any]:
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ServerUnavailable(f"tether server {self.url} answered {name} with HTTP {status} "
                                    "and no JSON: is this a tether server?")
        if status == 200:
            if name in FLOW_REPORTS:  # an ending that finished a run or a batch: emitted here, once
                self.flows_ended(decode_flows(answer))
            return answer
        raise _error(status, answer, name, self.url)

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.conn.close()
        if self._aio is not None:
            self._aio.close()


class UnknownOperation(PayloadError):
    """The server has no route for this operation (an older server): 404 ``not_found``."""


def done_rows(done: Sequence[tuple[int, int, str | None]]) -> list[dict[str, Any]]:
    return [{"id": i, "attempt": a, **({} if r is None else {"result": json.loads(r)})} for i, a, r in done]


def tasks_field(tasks: Sequence[str] | None) -> dict[str, Any]:
    """A body's tasks field: left out for None (any task), so an older server still takes the request."""
    return {} if tasks is None else {"tasks": sorted(tasks)}


def _error(status: int, answer: dict[str, Any], op: str, url: str) -> TetherError:
    code, message = str(answer.get("error", "")), str(answer.get("message", f"HTTP {status}"))
    if code == "stale_attempt":
        return StaleAttempt(int(answer["job_id"]), int(answer["attempt"]), str(answer["worker"]), str(answer["op"]))
    if code == "not_your_worker":
        workers = answer.get("workers")
        return NotYourWorker(f"tether server {url} refused {op}: {message}",
                             [str(w) for w in workers] if isinstance(workers, list) else [])
    if code in wire.ERRORS:
        return wire.ERRORS[code][1](message)
    if status in (401, 403, 429):  # 429: this address failed too many tokens; wait Retry-After
        return AccessDenied(f"tether server {url} refused {op}: {message}")
    if status >= 500:
        return ServerUnavailable(f"tether server {url} failed {op} (HTTP {status}): {message}")
    if status == 404 and code == "not_found":
        return UnknownOperation(f"tether server {url} has no route for {op} (HTTP 404): {message}; is the URL's "
                                "path right, and is the server as new as this client?")
    if code == "client_clock_refused":
        return ConfigError(message)
    return PayloadError(f"tether server {url} refused {op} (HTTP {status} {code}): {message}")
