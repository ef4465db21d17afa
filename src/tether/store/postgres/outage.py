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
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from ...config import redact_text, redact_url
from ...errors import DatabaseUnavailable

__all__ = ["TetherPool", "lost"]


def lost(exc: BaseException, conninfo: str) -> DatabaseUnavailable:
    """The outage ``exc`` (raise it ``from exc``)."""
    reason = redact_text(str(exc).strip(), conninfo) or type(exc).__name__
    return DatabaseUnavailable(f"lost PostgreSQL at {redact_url(conninfo)}: {reason}")


class TetherPool(ConnectionPool[psycopg.Connection[TupleRow]]):
    """psycopg_pool's pool, whose outages are ``DatabaseUnavailable``."""

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[TupleRow]]:
        conninfo = self.conninfo if isinstance(self.conninfo, str) else ""
        try:
            with super().connection(timeout) as conn:
                try:
                    yield conn
                except psycopg.OperationalError as exc:
                    if conn.broken or conn.closed:  # (the pool drops it on the way out)
                        raise lost(exc, conninfo) from exc
                    raise
        except PoolTimeout as exc:
            raise lost(exc, conninfo) from exc
