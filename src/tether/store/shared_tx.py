"""The store's operations inside a caller's or a handler's transaction
(``enqueue(connection=...)``, ``ctx.transaction()``): a part of the store
interface (``Store`` inherits ``SharedTransactions``), in a module of its own.
A backend whose database tether can share a transaction with (PostgreSQL,
SQLite) overrides these; the defaults refuse, as a tether server must: its
database connection is the server's, not the caller's."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime

from ..errors import ConfigError
from ..model import Job, JobId, NewJob

__all__ = ["SharedTransactions"]


_NO_SHARED_TX = (
    "{what} needs a direct connection to tether's database, and this app's store is {backend}: "
    "through a tether server (http://...) the database connection is the server's, so nothing can "
    "join your transaction. Use a postgresql:// or sqlite:/// URL for this"
)


class SharedTransactions:
    """The shared-transaction operations of ``Store``; the defaults refuse."""

    backend: str

    def enqueue_on(self, conn: object, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        """``enqueue`` on the caller's own DBAPI connection (``conn``), inside
        whatever transaction it is in, without committing: the jobs exist once
        the caller commits, and never if it rolls back."""
        raise ConfigError(_NO_SHARED_TX.format(backend=self.backend, what="enqueue(connection=...)"))

    async def enqueue_on_async(
        self, conn: object, jobs: Sequence[NewJob], *, now: datetime | None = None
    ) -> list[JobId]:
        """``enqueue_on`` for a coroutine: an async driver connection is awaited,
        a sync one is used in place (it is the caller's, on the caller's thread)."""
        raise ConfigError(_NO_SHARED_TX.format(backend=self.backend, what="enqueue_async(connection=...)"))

    def get_job_on(self, conn: object, job_id: int) -> Job | None:
        """``get_job`` on the caller's own DBAPI connection, inside whatever transaction
        it is in: it sees the jobs that transaction enqueued and has not committed."""
        raise ConfigError(_NO_SHARED_TX.format(backend=self.backend, what="get_job(connection=...)"))

    def transaction_on(self, conn: object, worker: str, job_id: int, attempt: int) -> AbstractContextManager[object]:
        """``transaction`` inside the caller's own transaction on ``conn``: yields it; after
        the block, the fenced success on it (``StaleAttempt`` if refused). They commit."""
        raise ConfigError(_NO_SHARED_TX.format(backend=self.backend, what="ctx.transaction_on()"))

    def transaction(self, worker: str, job_id: int, attempt: int) -> AbstractContextManager[object]:
        """A transaction on this database for a handler's writes: yields the
        connection; after the block, the attempt's fenced success (as
        ``complete`` fences it, with its audit) in the same transaction,
        then the commit. A refused fence rolls everything back and raises
        ``StaleAttempt``; an exception in the block rolls back and propagates."""
        raise ConfigError(_NO_SHARED_TX.format(backend=self.backend, what="ctx.transaction()"))

    def transaction_async(self, worker: str, job_id: int, attempt: int) -> AbstractAsyncContextManager[object]:
        """``transaction`` for a coroutine (``async with``)."""
        raise ConfigError(_NO_SHARED_TX.format(backend=self.backend, what="ctx.transaction()"))

    def set_result(self, worker: str, job_id: int, attempt: int, result_json: str) -> bool:
        """The result of an attempt whose success ``transaction`` already wrote
        (the handler returns after its block). Only that attempt's success
        matches; True if it did."""
        raise ConfigError(_NO_SHARED_TX.format(backend=self.backend, what="set_result"))
