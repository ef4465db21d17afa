"""A worker's rounds on SQLite, run on its event loop when the write lock is free.

A round (``claim``, ``complete``, ``complete_and_claim`` and their ``_ids``
forms) is one short write transaction: about 0.016 ms of SQLite per job. Sent
to a database thread, each round also cost a ``concurrent.futures`` future, an
asyncio future chained to it, a wake-up of that thread and one of the loop to
hear the answer: two cross-thread hand-offs a round, which cost more than the
statements (one worker x 10 draining no-op jobs: 0.087 ms of CPU per job that
way, 0.053 inline).

So a round is first tried right here, on the loop's thread, on a connection
of its own that never waits for the lock (``busy_timeout`` 0): ``BEGIN
IMMEDIATE`` takes the write lock at once or fails with ``SQLITE_BUSY`` before
anything is read or written. Only then does the round go to the worker's
database threads, whose connections wait their turn as before. The loop is
held for the statements only (a round of 10 jobs: a fraction of a
millisecond), never for another process's transaction; a lease is renewed by
the heartbeat thread meanwhile, whatever the loop does.

Nor for a checkpoint: a commit that takes the WAL past its autocheckpoint
size runs the checkpoint (copying pages to the database file, with its
fsyncs), which held the loop for up to 10 ms once every few thousand jobs. So
the loop's connection does not checkpoint (``wal_autocheckpoint`` 0); after
about ``CHECKPOINT_CHANGES`` rows changed on it, a passive checkpoint runs on a
database thread instead, one at a time. With ``synchronous=full`` or
``extra`` every commit waits for the disk, so such a store keeps its rounds
on the threads.

Should ``SQLITE_BUSY`` come later in the transaction (a ``COMMIT`` that
cannot get the WAL), the transaction is rolled back here, so the round runs
again from the start on a thread: its statements are fenced, and nothing of
the first try was committed.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from .conns import ThreadConnections

__all__ = ["CHECKPOINT_CHANGES", "CHECKPOINT_STALE", "InlineRounds"]

T = TypeVar("T")

log = logging.getLogger("tether.store.sqlite")

#: the result codes that mean another connection holds the lock (SQLITE_BUSY, SQLITE_LOCKED)
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_BUSY: Any = object()
#: rows changed by a loop's rounds between two checkpoints on a database
#: thread: about 1,500 jobs' worth, some 500 pages of WAL (SQLite's own
#: autocheckpoint, which the loop's connection turns off, is at 1,000 pages)
CHECKPOINT_CHANGES = 4000
#: a checkpoint sent this long ago (seconds) and not finished is taken for lost
CHECKPOINT_STALE = 30.0


class _Mode(threading.local):
    #: set while this thread runs a round inline: ``_use`` hands it the no-wait connection
    nowait = False


class InlineRounds:
    """The SQLite store's ``_round``, which ``Store``'s async round methods
    (``claim_async``, ``complete_and_claim_async``, ...) run their call
    through (a mixin)."""

    _nowait_conns: ThreadConnections
    _mode: _Mode
    #: whether rounds are tried on the loop (not when every commit waits for the disk)
    _inline: bool
    #: the loop connection's ``total_changes`` at the last checkpoint sent to a thread
    _changes_at: int
    #: when the checkpoint now on a thread was sent (monotonic), None when none is
    _checkpoint_sent: float | None

    if TYPE_CHECKING:  # the store's own
        def _use(self) -> AbstractContextManager[sqlite3.Connection]:
            ...

        def progress(self, worker: str, job_id: int, attempt: int, fraction: float | None, message: str | None,
                     lease_ttl: float) -> bool:
            ...

    def _init_rounds(self, open_nowait: Callable[[], sqlite3.Connection], *, inline: bool) -> None:
        self._nowait_conns = ThreadConnections(open_nowait)
        self._mode = _Mode()
        self._inline = inline
        self._changes_at = 0
        self._checkpoint_sent = None

    def _now_or_busy(self, call: Callable[[], T], executor: Executor | None) -> T:
        """``call()`` on this thread's no-wait connection; ``_BUSY`` if another
        connection holds the lock (with nothing of the call left behind)."""
        mode = self._mode
        mode.nowait = True
        try:
            got = call()
            with self._nowait_conns.use() as conn:
                changes = conn.total_changes
            if changes - self._changes_at >= CHECKPOINT_CHANGES:
                self._changes_at = changes
                self._checkpoint_soon(executor)
            return got
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) not in _BUSY_CODES:
                raise
            with self._nowait_conns.use() as conn:
                if conn.in_transaction:  # (a COMMIT that failed busy leaves it open)
                    conn.execute("ROLLBACK")
            return _BUSY  # type: ignore[no-any-return]
        finally:
            mode.nowait = False

    def _checkpoint_soon(self, executor: Executor | None) -> None:
        """On the loop: a passive checkpoint on a database thread (``executor``,
        the round's), unless one sent lately has not finished. (One an executor
        dropped at its shutdown never finishes: after ``CHECKPOINT_STALE`` the
        next is sent anyway, for a store that outlives its worker.)"""
        now = time.monotonic()
        sent = self._checkpoint_sent
        if sent is not None and now - sent < CHECKPOINT_STALE:
            return
        self._checkpoint_sent = now
        try:
            asyncio.get_running_loop().run_in_executor(executor, self._checkpoint)
        except RuntimeError:  # the executor is shut down (the worker is stopping): a later round asks again
            self._checkpoint_sent = None
            self._changes_at -= CHECKPOINT_CHANGES

    def _checkpoint(self) -> None:
        """A database thread: copy what the WAL holds into the database file,
        as far as readers allow, without waiting for anyone (PASSIVE)."""
        try:
            with self._use() as conn:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.debug("SQLite: a checkpoint failed (%s); the next one retries", exc)
        finally:
            self._checkpoint_sent = None

    async def _round(self, executor: Executor | None, call: Callable[[], T]) -> T:
        """``Store._round``: here at once when the lock is free, else on ``executor``."""
        if self._inline:
            got = self._now_or_busy(call, executor)
            if got is not _BUSY:
                return got
        # in the caller's context (a tether server's request collects what its endings said: server/flows.py)
        return await asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, call)

    def progress_nowait(self, worker: str, job_id: int, attempt: int, fraction: float | None,
                        message: str | None, lease_ttl: float) -> bool | None:
        """``progress`` from an event loop, on its no-wait connection; None
        when another connection holds the write lock. Waiting would block the
        loop, and the holder may be an ``async def`` handler's
        ``ctx.transaction()`` block on this very loop, which cannot finish
        while it is blocked: both stood until ``busy_timeout`` (30 s), and
        every worker on the file with them (a new user's walkthrough)."""
        got = self._now_or_busy(lambda: self.progress(worker, job_id, attempt, fraction, message, lease_ttl), None)
        return None if got is _BUSY else bool(got)
