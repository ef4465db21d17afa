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
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

__all__ = ["CLOSE_WAIT", "ThreadConnections"]

#: how long ``close()`` waits for a statement in flight on another thread
CLOSE_WAIT = 5.0


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

    def _slot(self) -> _Slot:
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None:
            slot = _Slot(self._open())
            self._local.slot = slot
            with self._lock:
                self._slots.append(slot)
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
