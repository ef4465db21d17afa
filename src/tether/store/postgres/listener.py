"""LISTEN for enqueues, on a connection of its own: the push channel that
wakes idle workers (``PostgresStore.listen``).

A LISTEN belongs to a server session, so it needs a connection that is one:
the database URL itself, or, behind a transaction pooler, a direct URL to the
server (``listen_url=``). The NOTIFY side needs no session: the enqueue
trigger and the ``notify`` query send theirs inside the statement's own
transaction, through the pooler like any other.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable

import psycopg
from psycopg.rows import TupleRow

from ...config import redact_text
from ..base import Listener
from .connect import net_defaults, quote

__all__ = ["NotifyListener"]

log = logging.getLogger("tether.store.postgres")

#: how often the listening thread looks up when nothing arrives (``close()``
#: wakes it at once; this only bounds a wake-up lost to an error)
IDLE_CHECK = 5.0


class NotifyListener(Listener):
    """LISTEN on a dedicated connection in a thread; reconnects when it drops.

    The thread waits on the connection's socket and on a wake-up socket of its
    own, so ``close()`` ends it at once. (psycopg's ``notifies(timeout=...)``
    cannot be interrupted: a worker's every stop, and an app's close after a
    wait, took up to its timeout, a second, doing nothing.)"""

    def __init__(self, url: str, channel: str, on_enqueue: Callable[[str], None]) -> None:
        self._url = url
        self._channel = channel
        self._on_enqueue = on_enqueue
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._healthy = False
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._thread = threading.Thread(target=self._run, name="tether-listen", daemon=True)
        self._thread.start()

    @property
    def healthy(self) -> bool:
        return self._healthy

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, **net_defaults(self._url)) as conn:
                    self._conn = conn
                    conn.execute(f"LISTEN {quote(self._channel)}")
                    self._healthy = True
                    # An enqueue may have landed while we were (re)connecting.
                    self._on_enqueue("*")
                    self._receive(conn)
            except Exception as exc:  # the connection dropped: poll until it is back
                if not self._stop.is_set():
                    log.warning("LISTEN connection lost (%s); polling until it is back", redact_text(str(exc), self._url))
            finally:
                self._healthy = False
                self._conn = None
            self._stop.wait(1.0)
        self._wake_r.close()

    def _receive(self, conn: psycopg.Connection[TupleRow]) -> None:
        """Hand on each notification's payload until ``close()``: libpq's own
        loop (wait for the socket, consume input, drain the notifications),
        which raises when the connection drops."""
        pgconn, encoding = conn.pgconn, conn.info.encoding
        sock = conn.fileno()
        while not self._stop.is_set():
            ready, _, _ = select.select([sock, self._wake_r.fileno()], [], [], IDLE_CHECK)
            if sock in ready:
                pgconn.consume_input()
                while (note := pgconn.notifies()) is not None:
                    self._on_enqueue(note.extra.decode(encoding))

    def close(self) -> None:
        self._stop.set()
        try:
            # The thread may have ended already (it was between reconnects when
            # the stop flag came) and closed its end: the write then fails.
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        finally:
            self._wake_w.close()  # closing twice is harmless
        self._thread.join(timeout=1)  # a daemon; it may be blocked on a dead socket
