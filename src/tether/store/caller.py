"""The driver connection behind what a caller passes as ``connection=``.

A psycopg 3 connection or a ``sqlite3.Connection`` is used as it is. A
SQLAlchemy ``Connection`` or ``Session`` (sync), or ``AsyncConnection`` or
``AsyncSession``, stands for the driver connection of its current transaction,
which it begins if none is open, exactly as its own next statement would.
SQLAlchemy is recognised by its module name and never imported here: an app
that does not use it does not load it.

The store (``Store.enqueue_on``) then says whether that driver connection is
one it can use (the right driver, open, to its database).

``after_commit`` runs a callback once the caller's transaction has committed,
where the connection offers a hook for it: a SQLAlchemy ``Session`` (or
``AsyncSession``) has ``after_commit`` and ``after_rollback`` events. psycopg,
sqlite3 and a SQLAlchemy ``Connection`` have none (its ``commit`` event comes
before the commit); the caller then learns False and leaves it to the sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

__all__ = ["after_commit", "driver_connection", "driver_connection_async"]

log = logging.getLogger("tether")

#: where a Session keeps the callbacks waiting for its commit (``Session.info``)
_PENDING = "tether.after_commit"


def _is_sqlalchemy(conn: object) -> bool:
    return type(conn).__module__.startswith("sqlalchemy.")


def _closed(what: str) -> ConfigError:
    return ConfigError(f"connection= is a closed SQLAlchemy {what}: pass an open one (the enqueue joins its "
                       "transaction)")


def _of_fairy(conn: Any) -> Any:
    """The driver connection under a sync SQLAlchemy Connection."""
    if getattr(conn, "closed", False) or getattr(conn, "invalidated", False):
        raise _closed("Connection")
    if not conn.in_transaction():
        # Begin SQLAlchemy's transaction, as its own next statement would
        # (autobegin): else its commit() would find none and do nothing, and
        # the driver's implicit one, holding the job, would end in a rollback.
        conn.begin()
    fairy = conn.connection  # the pooled DBAPI connection of its transaction (begun if none was)
    driver = getattr(fairy, "driver_connection", None)
    if driver is None:
        raise _closed("Connection")
    return driver


def driver_connection(conn: object) -> Any:
    """The driver connection to enqueue on, for the sync calls."""
    if conn is None:
        raise ConfigError("connection= is None: pass the connection whose transaction the enqueue joins")
    if not _is_sqlalchemy(conn):
        return conn
    kind = type(conn).__name__
    if kind in ("AsyncConnection", "AsyncSession"):
        raise ConfigError(f"connection= is a SQLAlchemy {kind}: use enqueue_async / enqueue_many_async with it")
    if hasattr(conn, "get_bind"):  # a Session: the Connection of its current transaction
        return _of_fairy(conn.connection())  # type: ignore[attr-defined]
    return _of_fairy(conn)


async def driver_connection_async(conn: object) -> Any:
    """The driver connection to enqueue on, for the async calls (an async
    SQLAlchemy connection hands over its psycopg ``AsyncConnection``)."""
    if not _is_sqlalchemy(conn):
        return driver_connection(conn)
    kind = type(conn).__name__
    if kind == "AsyncSession":
        conn = await conn.connection()  # type: ignore[attr-defined]
        kind = type(conn).__name__
    if kind == "AsyncConnection":
        if getattr(conn, "closed", False):
            raise _closed("AsyncConnection")
        if not conn.in_transaction():  # type: ignore[attr-defined]
            await conn.begin()  # type: ignore[attr-defined]  # as its autobegin would (see _of_fairy)
        raw = await conn.get_raw_connection()  # type: ignore[attr-defined]
        driver = getattr(raw, "driver_connection", None)
        if driver is None:
            raise _closed("AsyncConnection")
        return driver
    return driver_connection(conn)


def after_commit(conn: object, callback: Callable[[], object]) -> bool:
    """Run ``callback`` once ``conn``'s current transaction commits, and never
    if it rolls back; False (nothing registered) where ``conn`` has no such
    hook. The callback must not raise (it runs inside the caller's commit)."""
    if not _is_sqlalchemy(conn):
        return False
    session: Any = conn.sync_session if type(conn).__name__ == "AsyncSession" else conn  # type: ignore[attr-defined]
    if not hasattr(session, "get_bind") or not hasattr(session, "info"):
        return False  # a Connection: its commit event fires before the commit
    pending: list[Callable[[], object]] | None = session.info.get(_PENDING)
    if pending is None:
        from sqlalchemy import event  # the caller's own SQLAlchemy: it passed a Session

        pending = session.info[_PENDING] = []

        def committed(s: Any) -> None:
            done, s.info[_PENDING] = list(s.info.get(_PENDING, ())), []
            for fn in done:
                try:
                    fn()
                except Exception as exc:  # pragma: no cover - callbacks promise not to raise
                    log.warning("an after-commit callback failed: %s", exc)

        def rolled_back(s: Any) -> None:
            s.info[_PENDING] = []

        event.listen(session, "after_commit", committed)
        event.listen(session, "after_rollback", rolled_back)
    pending.append(callback)
    return True
