"""Async connections to PostgreSQL: a few per event loop, and no tasks of their own.

An asyncio connection is driven by the loop it is used in, while a tether
app outlives any one loop (``asyncio.run`` twice, a worker's loop on its
thread, a web server's loop). So each loop that calls gets connections of its
own, which the calling task opens when none is idle; at most ``size`` per
loop, and as many kept idle for the next call.

Not psycopg_pool's ``AsyncConnectionPool``: it runs maintenance tasks on its
loop (to grow, shrink and reconnect) that only an awaited ``close()`` stops,
and its workers carry on through a cancellation. A loop that ends with one
open (``asyncio.run`` returning after a burst of concurrent enqueues had it
grow) then never finishes cancelling them: ``asyncio.run`` hung. tether
cannot know when a caller's loop ends; with no tasks, a loop may end at any
time.

Closing needs no loop either: an idle connection is in no task's hands, so
``close()`` closes it from any thread, as ``AsyncConnection.close()`` does
(it only calls libpq's ``finish``), and one in use is closed when its task
hands it back. A loop that ended leaves its idle connections behind; they are
closed when the next loop opens its own, or by ``close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection, OperationalError
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import PoolClosed

from ..per_loop import PerLoop
from .outage import ended, lost
from .timezones import utc_times

__all__ = ["LoopConnections"]

Conn = AsyncConnection[TupleRow]


class _Loop:
    """One event loop's connections."""

    __slots__ = ("asked", "closed", "idle", "lock", "slots")

    def __init__(self, size: int) -> None:
        self.idle: list[Conn] = []
        self.slots = asyncio.Semaphore(size)  # binds to the loop that first waits on it
        self.lock = threading.Lock()  # close() may come from another thread
        self.closed = False
        #: the largest size asked for this loop (``LoopConnections.limit``), if any
        self.asked = 0

    def take(self) -> Conn | None:
        """The most recently used idle connection still good (one the server
        or the network ended while it waited closes: outage.py)."""
        while True:
            with self.lock:
                conn = self.idle.pop() if self.idle else None
            if conn is None or not ended(conn):
                return conn
            _finish(conn)

    def give_back(self, conn: Conn) -> None:
        # Autocommit, one statement a use: anything but idle means the use was
        # cut short (cancelled mid-statement) or the connection broke.
        if not conn.closed and conn.info.transaction_status is TransactionStatus.IDLE:
            with self.lock:
                if not self.closed:
                    self.idle.append(conn)
                    return
        _finish(conn)

    def close(self) -> list[Conn]:
        """Refuse connections handed back from now on; the idle ones, to close."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        return idle


class LoopConnections:
    """``AsyncConnection.connect(conninfo, **kwargs)``, up to ``size`` per event loop."""

    def __init__(self, conninfo: str, *, size: int, **kwargs: Any) -> None:
        self._conninfo = conninfo
        self._kwargs = kwargs
        self._size = size
        self._loops = PerLoop(lambda: _Loop(size), lambda gone: _finish_all(gone.close()),
                              closed=lambda: PoolClosed("the store is closed: its async connections too"))

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A connection of the running loop's, for one statement."""
        mine = self._loops.mine()
        async with mine.slots:
            try:
                conn = mine.take() or await self._connect()
            except OperationalError as exc:
                raise lost(exc, self._conninfo) from exc
            try:
                yield conn
            except OperationalError as exc:
                if conn.broken or conn.closed:  # an outage (outage.py); give_back drops the connection
                    raise lost(exc, self._conninfo) from exc
                raise
            finally:
                mine.give_back(conn)

    async def warm(self) -> None:
        """Open one of the running loop's connections now, ahead of its first
        use; a failure is left for that use to meet and report."""
        with contextlib.suppress(Exception):
            async with self.connection():
                pass

    async def _connect(self) -> Conn:
        conn = await AsyncConnection.connect(self._conninfo, **self._kwargs)
        utc_times(conn)
        return conn

    def limit(self, size: int) -> None:
        """On a loop: let it use ``size`` connections at most instead of the
        default (the largest size asked on this loop wins: two workers sharing
        a loop get what the greedier needs). Idle connections past it close.
        Uses already under way keep their slots of the old limit."""
        mine = self._loops.mine()
        size = max(size, mine.asked)
        mine.asked = size
        mine.slots = asyncio.Semaphore(size)
        with mine.lock:
            extra = mine.idle[size:]
            del mine.idle[size:]
        _finish_all(extra)

    def close(self) -> None:
        """Close every loop's idle connections now, and the busy ones as they
        come back; no new ones after this."""
        self._loops.close()


def _finish(conn: Conn) -> None:
    """``await conn.close()`` without the await: what it does (for a connection
    of no pool) but note that the close was asked for."""
    conn.pgconn.finish()


def _finish_all(conns: list[Conn]) -> None:
    for conn in conns:
        _finish(conn)
