"""SQLite in a transaction that is not tether's own: a caller's (enqueue on
their ``sqlite3.Connection``) and a handler's (``ctx.transaction()``).

The statements are the store's own; ``SQLiteStore`` passes each operation in
as a function of the connection, so this module needs nothing from
``store.py``.

On the caller's connection nothing is committed here. Python's sqlite3 (in
its default, legacy transaction control) opens a transaction before an
INSERT, as it would before the caller's own; a connection in autocommit mode
(``isolation_level=None``) outside a ``BEGIN`` commits the enqueue at once,
again as it would the caller's own statement.

A handler's transaction starts with ``BEGIN IMMEDIATE``: it takes the write
lock up front, because a deferred transaction that only read in its block
could not upgrade to write the completion once another connection had
written (SQLITE_BUSY, at once, with no wait). SQLite has one writer at a time
anyway; a handler should keep its block short.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
    suppress,
)
from datetime import datetime
from functools import cached_property, partial
from typing import Any, TypeVar

from ...errors import ConfigError, SchemaMissing, StaleAttempt
from ...model import MAX_ATTEMPTS_SHOWN, Job, JobId, NewJob
from ..flows import FlowsEnded
from ..rows import epoch_to_dt, job_with_newest, json_text
from .ending import forget_ended, take_ended

__all__ = ["SqliteTransactions", "TransactionsMixin"]

T = TypeVar("T")

_ENDED = ("the block ended ctx.transaction()'s transaction itself (commit, rollback or BEGIN/END): "
          "ctx.transaction() commits it, together with the job's success; nothing was completed")


class SqliteTransactions:
    """The caller-connection and handler-transaction paths of one store."""

    def __init__(self, path: str, open_conn: Callable[[], sqlite3.Connection],
                 said: Callable[[FlowsEnded | None], object] = lambda done: done) -> None:
        self.path = path
        #: the store's flows_ended: a handler transaction's success, once committed,
        #: says what its ending finished and released (ending.py)
        self.said = said
        self._open = open_conn
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- the caller's connection --------------------------------------------------------
    def check(self, conn: object) -> sqlite3.Connection:
        """The caller's connection, refused with a message that says what to do
        unless it is an open sqlite3 connection to this store's file."""
        if not isinstance(conn, sqlite3.Connection):
            raise ConfigError(
                f"connection= got {type(conn).__module__}.{type(conn).__name__}, but this app's jobs live in "
                f"the SQLite file {self.path!r}: pass a sqlite3.Connection to that file (or a SQLAlchemy "
                "Connection or Session on it)")
        try:
            cur = conn.cursor()
            cur.row_factory = None  # plain tuples: the caller's row factory is theirs
            files = cur.execute("PRAGMA database_list").fetchall()
            cur.close()
        except sqlite3.ProgrammingError:
            raise ConfigError("connection= is closed: pass an open connection "
                              "(the enqueue joins its transaction)") from None
        main = next((str(r[2]) for r in files if r[1] == "main"), "")
        if not _same_file(main, self.path):
            raise ConfigError(
                f"connection= is connected to {main or 'an in-memory database'!r}, but this app's jobs live "
                f"in the SQLite file {self.path!r}: a job enqueued there would never reach this app's "
                "workers. Connect to that file (and run `tether migrate` on it first)")
        return conn

    def run(self, conn: sqlite3.Connection, op: Callable[[sqlite3.Cursor], T]) -> T:
        """``op`` on a cursor of the caller's connection with plain tuple rows
        (their row factory is theirs), nothing committed."""
        cur = conn.cursor()
        cur.row_factory = None
        try:
            return op(cur)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise SchemaMissing(
                    f"tether's tables are missing from {self.path} (the connection you passed): run "
                    "`tether migrate` on it") from None
            raise
        finally:
            cur.close()

    # -- a handler's transaction ------------------------------------------------------------
    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._open()

    def _give_back(self, conn: sqlite3.Connection) -> None:
        if not conn.in_transaction:
            with self._lock:
                if not self._closed:
                    self._idle.append(conn)
                    return
        with suppress(sqlite3.Error):
            conn.close()

    @staticmethod
    def _finish(conn: sqlite3.Connection, complete: Callable[[sqlite3.Connection | sqlite3.Cursor], bool],
                ids: tuple[int, int, str]) -> FlowsEnded | None:
        """After the block: the fenced success, then COMMIT; raising leaves the
        transaction open for the caller's rollback. What the success's ending
        finished and released (noted on this thread: ending.py)."""
        if not conn.in_transaction:
            raise ConfigError(_ENDED)
        forget_ended()
        if not complete(conn):
            raise StaleAttempt(*ids, "transaction")
        conn.execute("COMMIT")
        return take_ended()

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    @contextmanager
    def transaction(self, complete: Callable[[sqlite3.Connection | sqlite3.Cursor], bool],
                    ids: tuple[int, int, str]) -> Iterator[sqlite3.Connection]:
        conn = self._take()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                done = self._finish(conn, complete, ids)
            except BaseException:
                self._rollback(conn)
                raise
        finally:
            self._give_back(conn)
        self.said(done)  # committed

    @contextmanager
    def transaction_on(self, conn: sqlite3.Connection, complete: Callable[[sqlite3.Connection | sqlite3.Cursor], bool],
                       ids: tuple[int, int, str]) -> Iterator[sqlite3.Connection]:
        """The caller's transaction: the block, then the fenced ``complete`` on
        their connection, uncommitted; they commit (a refusal: roll back)."""
        if not conn.in_transaction:
            raise ConfigError("ctx.transaction_on() needs a connection in a transaction of yours (begin it "
                              "first): its commit is the job's success")
        yield conn
        if not self.run(conn, complete):  # on a cursor of ours: the caller's row factory is theirs
            raise StaleAttempt(*ids, "transaction")

    @asynccontextmanager
    async def transaction_async(self, complete: Callable[[sqlite3.Connection | sqlite3.Cursor], bool],
                                ids: tuple[int, int, str]) -> AsyncIterator[sqlite3.Connection]:
        """As ``transaction``; BEGIN IMMEDIATE may wait for the write lock and
        COMMIT for the disk, so both run off the event loop. The block's own
        statements run where the handler runs them."""
        conn = self._take()
        try:
            await _off_loop(conn.execute, "BEGIN IMMEDIATE")
            try:
                yield conn
                done = await _off_loop(self._finish, conn, complete, ids)
            except BaseException:
                self._rollback(conn)
                raise
        finally:
            self._give_back(conn)
        self.said(done)  # committed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            with suppress(sqlite3.Error):
                conn.close()


async def _off_loop(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on a thread; if the caller is cancelled meanwhile, wait
    for the thread to finish before going on, so that what follows (the
    rollback) never runs beside it on the same connection."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with suppress(BaseException):
            await task
        raise


def _same_file(a: str, b: str) -> bool:
    if not a or not b:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


class TransactionsMixin:
    """The ``Store`` methods of this module, for ``SQLiteStore`` (kept here so
    that the store's own module stays about tether's own transactions); the
    store supplies the hooks below."""

    path: str
    q: dict[str, str]  # the store's named queries
    #: ``Workflows.flows_ended`` (store/flows.py; an annotation: the store's own method)
    flows_ended: Callable[[FlowsEnded | None], None]

    def _open(self) -> sqlite3.Connection:
        raise NotImplementedError

    def _enqueue_in(self, conn: sqlite3.Connection | sqlite3.Cursor, jobs: Sequence[NewJob],
                    now: datetime | None) -> list[JobId]:
        raise NotImplementedError

    def _complete_in(self, conn: sqlite3.Connection | sqlite3.Cursor, worker: str,
                     done: Sequence[tuple[int, int, str | None]],
                     now: datetime | None) -> set[int]:
        raise NotImplementedError

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        raise NotImplementedError

    @cached_property
    def _tx(self) -> SqliteTransactions:
        return SqliteTransactions(self.path, self._open, self.flows_ended)

    def _close_tx(self) -> None:
        if "_tx" in self.__dict__:
            self._tx.close()

    def enqueue_on(self, conn: object, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        mine = self._tx.check(conn)
        if not jobs:
            return []
        # Inside the caller's transaction (the insert holds the write lock until
        # their commit) no key's holder can finish between insert and lookup.
        return self._tx.run(mine, partial(self._enqueue_in, jobs=jobs, now=now))

    def get_job_on(self, conn: object, job_id: int) -> Job | None:
        def read(cur: sqlite3.Cursor) -> tuple[list[Any], list[Any]]:
            rows = cur.execute(self.q["get_job"], {"id": job_id}).fetchall()
            newest = {"id": job_id, "limit": MAX_ATTEMPTS_SHOWN}
            return rows, cur.execute(self.q["get_attempts_newest"], newest).fetchall() if rows else []

        rows, history = self._tx.run(self._tx.check(conn), read)
        return job_with_newest(rows[0], history, epoch_to_dt, json_text) if rows else None

    async def enqueue_on_async(
        self, conn: object, jobs: Sequence[NewJob], *, now: datetime | None = None
    ) -> list[JobId]:
        # sqlite3 has no async driver: the caller's connection is used where
        # the caller uses it (it may refuse other threads).
        return self.enqueue_on(conn, jobs, now=now)

    def _complete_one(self, worker: str, job_id: int, attempt: int, conn: sqlite3.Connection | sqlite3.Cursor) -> bool:
        return bool(self._complete_in(conn, worker, [(job_id, attempt, None)], None))

    def transaction(self, worker: str, job_id: int, attempt: int) -> AbstractContextManager[object]:
        return self._tx.transaction(partial(self._complete_one, worker, job_id, attempt), (job_id, attempt, worker))

    def transaction_on(self, conn: object, worker: str, job_id: int, attempt: int) -> AbstractContextManager[object]:
        return self._tx.transaction_on(self._tx.check(conn), partial(self._complete_one, worker, job_id, attempt),
                                       (job_id, attempt, worker))

    def transaction_async(self, worker: str, job_id: int, attempt: int) -> AbstractAsyncContextManager[object]:
        return self._tx.transaction_async(partial(self._complete_one, worker, job_id, attempt),
                                          (job_id, attempt, worker))

    def set_result(self, worker: str, job_id: int, attempt: int, result_json: str) -> bool:
        return bool(self._all("set_result", {"id": job_id, "attempt": attempt, "worker": worker,
                                             "result": result_json}))
