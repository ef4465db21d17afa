"""PostgreSQL in a transaction that is not tether's own: a caller's (enqueue on
their connection) and a handler's (``ctx.transaction()``).

The statements are the store's own (``queries.sql``); what differs is whose
connection runs them and who commits. ``PostgresStore`` builds each
operation's statements (its ``Steps``) and hands them here, so this module
needs nothing from ``store.py`` and ``store.py`` only calls in.

On the caller's connection nothing is committed here: the jobs become visible
when the caller commits, and the enqueue trigger's NOTIFY, being
transactional, is delivered at that commit too (and never after a rollback).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from datetime import datetime
from functools import cached_property
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow, tuple_row
from psycopg.types.json import JsonbLoader, JsonLoader
from psycopg_pool import ConnectionPool

from ...config import DatabaseURL
from ...errors import ConfigError, SchemaMissing, StaleAttempt
from ...model import MAX_ATTEMPTS_SHOWN, Job, JobId, NewJob
from ..rows import job_with_newest
from .loop_connections import LoopConnections

__all__ = ["PgTransactions", "TransactionsMixin"]

#: most handler transactions open at once per store (and per event loop for
#: async handlers); a pool of their own, so that handlers holding a
#: transaction for their block never take the connections the heartbeat and
#: the reports need
TX_CONNECTIONS = 32
#: how long a handler waits for one of those connections
TX_POOL_TIMEOUT = 10.0

Rows = list[tuple[Any, ...]]
Steps = Generator[tuple[str, dict[str, Any]], Rows, Any]


class PgTransactions:
    """The caller-connection and handler-transaction paths of one store."""

    def __init__(self, url: str, schema: str, queries: dict[str, str], conn_kwargs: dict[str, Any],
                 dbname: str, said: Callable[[list[Any]], object] = lambda rows: rows) -> None:
        self.url = url
        #: the store's flow_answer: a handler transaction's success, once committed,
        #: says what its ending finished and released (the answer's last column)
        self.said = said
        self.schema = schema
        self.q = queries
        self.kwargs = conn_kwargs
        #: the database the store's own connections reach (libpq's answer)
        self.dbname = dbname
        self._lock = threading.Lock()
        self._pool: ConnectionPool[psycopg.Connection[TupleRow]] | None = None
        self._async = LoopConnections(url, size=TX_CONNECTIONS, **conn_kwargs)

    # -- the caller's connection --------------------------------------------------------
    def check(self, conn: object, *, want_async: bool) -> None:
        """Refuse, with a message that says what to do, a connection this store
        cannot enqueue on: not psycopg, closed, in a failed transaction, or to
        another database. (Tables missing show up as the statement's error.)"""
        if not isinstance(conn, (psycopg.Connection, psycopg.AsyncConnection)):
            kind = ("a sqlite3 connection" if type(conn).__module__ == "sqlite3"
                    else f"{type(conn).__module__}.{type(conn).__name__}")
            raise ConfigError(
                f"connection= got {kind}, but this app's jobs live in PostgreSQL (database {self.dbname!r}): "
                "pass a psycopg 3 Connection (AsyncConnection for the async calls), or a SQLAlchemy "
                "Connection or Session using the psycopg driver")
        if isinstance(conn, psycopg.AsyncConnection) and not want_async:
            raise ConfigError("connection= is a psycopg AsyncConnection: use enqueue_async / enqueue_many_async "
                              "with it (enqueue and enqueue_many take a sync Connection)")
        if conn.closed:
            raise ConfigError("connection= is closed: pass an open connection (the enqueue joins its transaction)")
        if conn.info.transaction_status is TransactionStatus.INERROR:
            raise ConfigError("connection= is in a failed transaction (an earlier statement raised): roll it "
                              "back before enqueueing")
        theirs = conn.info.dbname
        if theirs != self.dbname:
            raise ConfigError(
                f"connection= is connected to database {theirs!r}, but this app's jobs live in database "
                f"{self.dbname!r} (schema {self.schema!r}): a job enqueued there would never reach this "
                "app's workers. Connect to that database (and run `tether migrate` there first)")

    def _missing(self, conn: object) -> SchemaMissing:
        dbname = getattr(getattr(conn, "info", None), "dbname", self.dbname)
        return SchemaMissing(
            f"tether's tables are missing from schema {self.schema!r} of database {dbname!r} (the connection "
            "you passed): run `tether migrate` against it. Your transaction is now aborted: roll it back")

    def enqueue_on(self, conn: psycopg.Connection[Any], steps: Steps) -> list[JobId]:
        """Drive an enqueue's statements on the caller's connection, no commit.
        A cursor of our own: the caller's row factory (dict_row, say) is theirs."""
        cur = conn.cursor(row_factory=tuple_row)
        try:
            step = next(steps)
            while True:
                try:
                    cur.execute(self.q[step[0]], step[1])
                except pg_errors.UndefinedTable:
                    raise self._missing(conn) from None
                step = steps.send(cur.fetchall())
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            cur.close()

    def read_on(self, conn: psycopg.Connection[Any], names: Sequence[str], params: dict[str, Any]) -> list[list[Any]]:
        """The named read statements' rows on the caller's connection, in its
        transaction; a cursor of our own, as for an enqueue, which reads json
        and jsonb as psycopg does by default (Django's connections, say,
        load them as text)."""
        cur = conn.cursor(row_factory=tuple_row)
        cur.adapters.register_loader("json", JsonLoader)
        cur.adapters.register_loader("jsonb", JsonbLoader)
        try:
            out = []
            for name in names:
                try:
                    out.append(cur.execute(self.q[name], params).fetchall())
                except pg_errors.UndefinedTable:
                    raise self._missing(conn) from None
            return out
        finally:
            cur.close()

    async def enqueue_on_async(self, conn: psycopg.AsyncConnection[Any], steps: Steps) -> list[JobId]:
        cur = conn.cursor(row_factory=tuple_row)
        try:
            step = next(steps)
            while True:
                try:
                    await cur.execute(self.q[step[0]], step[1])
                except pg_errors.UndefinedTable:
                    raise self._missing(conn) from None
                step = steps.send(await cur.fetchall())
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            await cur.close()

    # -- a handler's transaction ------------------------------------------------------------
    def _sync_pool(self) -> ConnectionPool[psycopg.Connection[TupleRow]]:
        with self._lock:
            if self._pool is None:
                self._pool = ConnectionPool(self.url, min_size=0, max_size=TX_CONNECTIONS, timeout=TX_POOL_TIMEOUT,
                                            kwargs=self.kwargs, open=True, name=f"tether-{self.schema}-tx")
            return self._pool

    @contextmanager
    def transaction(self, fence: dict[str, Any], ids: tuple[int, int, str]) -> Iterator[psycopg.Connection[Any]]:
        """BEGIN; the block; the fenced ``complete`` (``fence``: its params);
        COMMIT. A refused fence raises inside ``conn.transaction()``, which
        rolls the block's writes back with it."""
        with self._sync_pool().connection() as conn:
            with conn.transaction():
                yield conn
                rows = conn.execute(self.q["complete"], fence).fetchall()
                if not rows:
                    raise StaleAttempt(*ids, "transaction")
            self.said(rows)  # committed

    @contextmanager
    def transaction_on(self, conn: psycopg.Connection[Any], fence: dict[str, Any],
                       ids: tuple[int, int, str]) -> Iterator[psycopg.Connection[Any]]:
        """The caller's transaction: the block, then the fenced ``complete`` on
        their connection, uncommitted; they commit (a refusal: roll back)."""
        # autocommit with no transaction open would commit the success alone, at
        # once; inside `with conn.transaction():` (a BEGIN, autocommit or not) it
        # waits for the caller's commit, as it should
        if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
            raise ConfigError("ctx.transaction_on() needs a connection in a transaction of yours (autocommit is "
                              "on and no transaction is open): its commit is the job's success")
        yield conn
        cur = conn.cursor(row_factory=tuple_row)
        try:
            if not cur.execute(self.q["complete"], fence).fetchall():
                raise StaleAttempt(*ids, "transaction")
        finally:
            cur.close()

    @asynccontextmanager
    async def transaction_async(
        self, fence: dict[str, Any], ids: tuple[int, int, str]
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._async.connection() as conn:
            async with conn.transaction():
                yield conn
                cur = await conn.execute(self.q["complete"], fence)
                rows = await cur.fetchall()
                if not rows:
                    raise StaleAttempt(*ids, "transaction")
            self.said(rows)  # committed

    def close(self) -> None:
        self._async.close()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


class TransactionsMixin:
    """The ``Store`` methods of this module, for ``PostgresStore`` (kept here
    so that the store's own module stays about tether's own transactions);
    the store supplies the hooks below."""

    dsn: DatabaseURL
    schema: str
    q: dict[str, str]
    pool: ConnectionPool[psycopg.Connection[TupleRow]]
    #: ``Workflows.flow_answer`` (store/flows.py; an annotation: the store's own method)
    flow_answer: Callable[[list[Any]], list[Any]]

    def _enqueue_plan(self, jobs: Sequence[NewJob], now: datetime | None) -> Steps:
        """The store's enqueue, as statements (its ``_enqueue_steps``)."""
        raise NotImplementedError

    def _fence(self, worker: str, job_id: int, attempt: int) -> dict[str, Any]:
        """The params of ``complete`` for this one attempt, without a result."""
        raise NotImplementedError

    def _conn_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    @cached_property
    def _tx(self) -> PgTransactions:
        with self.pool.connection() as conn:  # the database libpq reached, as the caller's will name it
            dbname = conn.info.dbname
        return PgTransactions(self.dsn.url, self.schema, self.q, self._conn_kwargs(), dbname, self.flow_answer)

    def _close_tx(self) -> None:
        if "_tx" in self.__dict__:
            self._tx.close()

    def enqueue_on(self, conn: object, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        self._tx.check(conn, want_async=False)
        assert isinstance(conn, psycopg.Connection)
        return self._tx.enqueue_on(conn, self._enqueue_plan(jobs, now)) if jobs else []

    def get_job_on(self, conn: object, job_id: int) -> Job | None:
        self._tx.check(conn, want_async=False)
        assert isinstance(conn, psycopg.Connection)
        rows, history = self._tx.read_on(conn, ("get_job", "get_attempts_newest"),
                                         {"id": job_id, "limit": MAX_ATTEMPTS_SHOWN})
        return job_with_newest(rows[0], history) if rows else None

    async def enqueue_on_async(
        self, conn: object, jobs: Sequence[NewJob], *, now: datetime | None = None
    ) -> list[JobId]:
        self._tx.check(conn, want_async=True)
        if not jobs:
            return []
        if isinstance(conn, psycopg.AsyncConnection):
            return await self._tx.enqueue_on_async(conn, self._enqueue_plan(jobs, now))
        assert isinstance(conn, psycopg.Connection)
        return self._tx.enqueue_on(conn, self._enqueue_plan(jobs, now))

    def transaction(self, worker: str, job_id: int, attempt: int) -> AbstractContextManager[object]:
        return self._tx.transaction(self._fence(worker, job_id, attempt), (job_id, attempt, worker))

    def transaction_on(self, conn: object, worker: str, job_id: int, attempt: int) -> AbstractContextManager[object]:
        self._tx.check(conn, want_async=False)
        assert isinstance(conn, psycopg.Connection)
        return self._tx.transaction_on(conn, self._fence(worker, job_id, attempt), (job_id, attempt, worker))

    def transaction_async(self, worker: str, job_id: int, attempt: int) -> AbstractAsyncContextManager[object]:
        return self._tx.transaction_async(self._fence(worker, job_id, attempt), (job_id, attempt, worker))

    def set_result(self, worker: str, job_id: int, attempt: int, result_json: str) -> bool:
        return bool(self._all("set_result", {"id": job_id, "attempt": attempt, "worker": worker,
                                             "result": result_json}))
