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

A commit that takes the WAL past its autocheckpoint size runs the checkpoint
here too (a few milliseconds, once every few thousand jobs). With
``synchronous=full`` or ``extra`` every commit waits for the disk, so such a
store keeps its rounds on the threads.

Should ``SQLITE_BUSY`` come later in the transaction (a ``COMMIT`` that
cannot get the WAL), the transaction is rolled back here, so the round runs
again from the start on a thread: its statements are fenced, and nothing of
the first try was committed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from ...model import ClaimedJob
from .conns import ThreadConnections

__all__ = ["InlineRounds"]

T = TypeVar("T")

#: the result codes that mean another connection holds the lock (SQLITE_BUSY, SQLITE_LOCKED)
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_BUSY: Any = object()


class _Mode(threading.local):
    #: set while this thread runs a round inline: ``_use`` hands it the no-wait connection
    nowait = False


class InlineRounds:
    """The round methods' async forms for the SQLite store (a mixin)."""

    path: str
    _nowait_conns: ThreadConnections
    _mode: _Mode
    #: whether rounds are tried on the loop (not when every commit waits for the disk)
    _inline: bool

    if TYPE_CHECKING:  # the store's own methods, which the rounds run
        def claim(self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *,
                  now: datetime | None = None, tasks: Sequence[str] | None = None) -> list[ClaimedJob]:
            ...

        def claim_ids(self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
                      now: datetime | None = None, tasks: Sequence[str] | None = None) -> list[ClaimedJob]:
            ...

        def complete(self, worker: str, done: Sequence[tuple[int, int, str | None]], *,
                     now: datetime | None = None) -> set[int]:
            ...

        def complete_and_claim(
            self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
            lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
        ) -> tuple[set[int], list[ClaimedJob]]:
            ...

        def complete_and_claim_ids(
            self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
            lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
        ) -> tuple[set[int], list[ClaimedJob]]:
            ...

    def _init_rounds(self, open_nowait: Callable[[], sqlite3.Connection], *, inline: bool) -> None:
        self._nowait_conns = ThreadConnections(open_nowait)
        self._mode = _Mode()
        self._inline = inline

    def _now_or_busy(self, call: Callable[[], T]) -> T:
        """``call()`` on this thread's no-wait connection; ``_BUSY`` if another
        connection holds the lock (with nothing of the call left behind)."""
        mode = self._mode
        mode.nowait = True
        try:
            return call()
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) not in _BUSY_CODES:
                raise
            with self._nowait_conns.use() as conn:
                if conn.in_transaction:  # (a COMMIT that failed busy leaves it open)
                    conn.execute("ROLLBACK")
            return _BUSY  # type: ignore[no-any-return]
        finally:
            mode.nowait = False

    async def _round(self, call: Callable[[], T], executor: Executor | None) -> T:
        if self._inline:
            got = self._now_or_busy(call)
            if got is not _BUSY:
                return got
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    async def claim_async(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return await self._round(partial(self.claim, worker, queues, limit, lease_ttl, now=now, tasks=tasks),
                                 executor)

    async def claim_ids_async(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return await self._round(partial(self.claim_ids, worker, ids, queues, lease_ttl, now=now, tasks=tasks),
                                 executor)

    async def complete_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *,
        executor: Executor | None = None, now: datetime | None = None,
    ) -> set[int]:
        return await self._round(partial(self.complete, worker, done, now=now), executor)

    async def complete_and_claim_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return await self._round(
            partial(self.complete_and_claim, worker, done, queues, limit, lease_ttl, now=now, tasks=tasks), executor)

    async def complete_and_claim_ids_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return await self._round(
            partial(self.complete_and_claim_ids, worker, done, ids, queues, lease_ttl, now=now, tasks=tasks),
            executor)
