"""An outage met mid-life is ``DatabaseUnavailable``, as one met at connect is.

The README tells callers to catch ``ConnectionError`` to retry an outage, and
opening an app raises ``DatabaseUnavailable`` (one) when the server does not
answer. Later, a statement on a connection the server or the network dropped
raised psycopg's ``OperationalError``, and a pool that could not hand out a
connection in time psycopg_pool's ``PoolTimeout``: neither is a
``ConnectionError``, so the advice caught nothing. Both pools (``TetherPool``
for sync calls, ``LoopConnections`` for async ones) translate them here, with
the driver's error as the cause. An ``OperationalError`` on a connection that
is still good (a statement timeout, a lock timeout) is the statement's and
stays as it is.

Before that, a pooled connection the outage ended while it sat idle is
dropped before use (``ended``, ``../idle.py``), so the first call after the
database comes back gets a good one rather than that error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic

import psycopg
from psycopg.pq import ConnStatus
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from ...config import redact_text, redact_url
from ...errors import DatabaseUnavailable
from ..idle import ready_to_read

__all__ = ["TetherPool", "ended", "lost"]

#: how long a caller waits for a pooled connection before asking again (a new
#: request is what makes the pool open a connection after it gave one up)
WAIT_SLICE = 1.0


def ended(conn: psycopg.Connection[TupleRow] | psycopg.AsyncConnection[TupleRow]) -> bool:
    """Whether the server or the network ended this idle connection: its
    socket reads as ready and what came (an EOF, a reset, a FATAL) leaves it
    bad. (A notice that came meanwhile is read and the connection kept.)"""
    if conn.closed or conn.broken:
        return True
    try:
        if not ready_to_read(conn.pgconn.socket):
            return False
        conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return True
    return conn.pgconn.status != ConnStatus.OK


def lost(exc: BaseException, conninfo: str) -> DatabaseUnavailable:
    """The outage ``exc`` (raise it ``from exc``)."""
    reason = redact_text(str(exc).strip(), conninfo) or type(exc).__name__
    return DatabaseUnavailable(f"lost PostgreSQL at {redact_url(conninfo)}: {reason}")


class TetherPool(ConnectionPool[psycopg.Connection[TupleRow]]):
    """psycopg_pool's pool, whose outages are ``DatabaseUnavailable``, and
    which drops a connection ended while idle before handing it out. (Not
    psycopg_pool's ``check``: from the second connection that fails it on,
    that sleeps a backoff of 1 s, then 2 s, ..., so the first call after a
    blip that ended several pooled connections would wait seconds.)"""

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[TupleRow]]:
        # psycopg_pool's connection(), written out (getconn, ``with conn``,
        # putconn, the usage stat) rather than wrapped: every single enqueue
        # passes here, and a context manager inside another cost it a second
        # generator and frame per call
        conn = self._usable(timeout)
        t0 = monotonic()
        try:
            with conn:
                yield conn
        except psycopg.OperationalError as exc:
            if conn.broken or conn.closed:  # (putconn drops it)
                raise lost(exc, self._conninfo_text()) from exc
            raise
        finally:
            self.putconn(conn)
            self._stats[self._USAGE_MS] += int(1000.0 * (monotonic() - t0))

    def _usable(self, timeout: float | None) -> psycopg.Connection[TupleRow]:
        """A pooled connection that has not ended while idle; each ended one
        is closed and given back, so the pool drops it and opens another."""
        deadline = monotonic() + (self.timeout if timeout is None else timeout)
        for _ in range(self.max_size + 1):
            conn = self._wait_for_one(deadline)
            if not ended(conn):
                return conn
            conn.close()
            self.putconn(conn)
        raise DatabaseUnavailable(
            f"lost PostgreSQL at {redact_url(self._conninfo_text())}: every pooled connection had ended")

    def _wait_for_one(self, deadline: float) -> psycopg.Connection[TupleRow]:
        """``getconn`` until ``deadline``, asked again every ``WAIT_SLICE``: when
        an outage outlasts the reconnect timeout, the pool gives up re-opening
        the connections it lost and only a new request makes it open one, so a
        caller waiting all along was never served once the server answered (it
        failed at its full timeout; found by a failover slower than 2 s)."""
        while True:
            try:
                return self.getconn(min(WAIT_SLICE, max(deadline - monotonic(), 0.0)))
            except PoolTimeout as exc:
                if monotonic() >= deadline:
                    raise lost(exc, self._conninfo_text()) from exc

    def _conninfo_text(self) -> str:
        return self.conninfo if isinstance(self.conninfo, str) else ""
