"""The SQLite lock probe the chaos driver runs after each SIGSTOP."""

from __future__ import annotations

import sqlite3

__all__ = ["LOCK_PROBE", "holds_write_lock"]

#: how long the SQLite lock probe after a SIGSTOP waits for the write lock
LOCK_PROBE = 1.0


def holds_write_lock(path: str) -> bool:
    """SQLite, right after a SIGSTOP: whether the stopped process holds the
    one write lock, i.e. a write transaction cannot begin within
    LOCK_PROBE seconds (a running worker's own write transactions take
    milliseconds). The checker counts only such stops as leaving no
    worker able to write."""
    conn = sqlite3.connect(path, timeout=LOCK_PROBE, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:  # "database is locked"
        return True
    finally:
        conn.close()
