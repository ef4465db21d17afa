"""LISTEN for enqueues, on a connection of its own: the push channel that
wakes idle workers (``PostgresStore.listen``).

A LISTEN belongs to a server session, so it needs a connection that is one:
the database URL itself, or, behind a transaction pooler, a direct URL to the
server (``listen_url=``). The NOTIFY side needs no session: the enqueue
trigger and the ``notify`` query send theirs inside the statement's own
transaction, through the pooler like any other.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg.rows import TupleRow

from ..base import Listener
from .connect import net_defaults, quote

__all__ = ["NotifyListener"]

log = logging.getLogger("tether.store.postgres")


class NotifyListener(Listener):
    """LISTEN on a dedicated connection in a thread; reconnects when it drops."""

    def __init__(self, url: str, channel: str, on_enqueue: Callable[[str], None]) -> None:
        self._url = url
        self._channel = channel
        self._on_enqueue = on_enqueue
        self._stop = threading.Event()
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
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self._on_enqueue(note.payload)
            except Exception as exc:  # the connection dropped: poll until it is back
                if not self._stop.is_set():
                    log.warning("LISTEN connection lost (%s); polling until it is back", exc)
            finally:
                self._healthy = False
                self._conn = None
            self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)  # a daemon; it may be blocked on a dead socket
