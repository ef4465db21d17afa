"""One SQLite connection per thread, and a close that is safe while they run.

A store is shared by threads: a worker's database threads, the app's callers.
Each thread gets its own connection (``sqlite3`` objects are not to be used by
two threads at once). ``close()`` comes from yet another thread (an app shut
down, a test's teardown), possibly while a worker's reaper is still in the
middle of a statement on its connection: closing a connection under a running
statement crashes the interpreter (a NULL database handle inside ``sqlite3``,
SIGSEGV). So each connection is used under its own lock, taken uncontended by
its thread, and ``close()`` closes a connection only while holding that lock:
a statement in flight finishes first. One still running after ``CLOSE_WAIT``
is left to its thread: dropped from the store, it closes when that thread lets
go of it.

The same locks make ``os.fork()`` safe for SQLite (a handler's child process,
isolation="process"). SQLite keeps process-wide mutexes (its file-locking
table, its allocator) that a thread holds while inside a statement or an
open; a fork at that moment copies them held, and the child hangs at its first
open or statement, forever (found as a child that never returned from its
first enqueue, about one run in fifteen). So a fork first takes every
connection's lock, and the lock around opening one (at most ``FORK_WAIT`` in
all: a transaction block held open longer is forked over, as before), and
lets go of them on both sides after: no thread of ours is inside SQLite while
the process is copied.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

__all__ = ["CLOSE_WAIT", "FORK_WAIT", "ThreadConnections"]

#: how long ``close()`` waits for a statement in flight on another thread
CLOSE_WAIT = 5.0
#: how long, in all, a fork waits for statements in flight (the module docstring)
FORK_WAIT = 1.0


class _Slot:
    __slots__ = ("conn", "lock")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # re-entrant: a read inside a write transaction uses the same connection
        self.lock = threading.RLock()


class ThreadConnections:
    """The store's per-thread connections (see the module docstring)."""

    def __init__(self, open_conn: Callable[[], sqlite3.Connection]) -> None:
        self._open = open_conn
        self._local = threading.local()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        _LIVE.add(self)

    def _slot(self) -> _Slot:
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None:
            with self._lock:  # opened under it: a fork waits for the open (module docstring)
                slot = _Slot(self._open())
                self._slots.append(slot)
            self._local.slot = slot
        return slot

    @contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, which ``close()`` leaves alone meanwhile."""
        slot = self._slot()
        with slot.lock:
            yield slot.conn

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Close every thread's connection; the next use opens a new one."""
        with self._lock:
            slots, self._slots = self._slots, []
            self._local = threading.local()
        for slot in slots:
            if slot.lock.acquire(timeout=wait):
                try:
                    with suppress(sqlite3.Error):
                        slot.conn.close()
                finally:
                    slot.lock.release()


#: every live set of connections, for the fork guard (the module docstring)
_LIVE: weakref.WeakSet[ThreadConnections] = weakref.WeakSet()
#: the locks the fork in progress took, released on both sides after it
_HELD: list[threading.Lock | threading.RLock] = []


def _before_fork() -> None:
    deadline = time.monotonic() + FORK_WAIT
    for conns in list(_LIVE):
        if not conns._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            continue
        _HELD.append(conns._lock)
        for slot in list(conns._slots):
            if slot.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                _HELD.append(slot.lock)


def _after_fork() -> None:
    while _HELD:
        _HELD.pop().release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
