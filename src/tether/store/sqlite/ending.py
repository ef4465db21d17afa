"""The one way a job ends on SQLite (issue 48; DESIGN.md section 2).

Every statement of queries.sql that can set a terminal state (``ENDINGS``)
runs through ``end``, inside the caller's write transaction, and ``end`` does
what every ending must: the attempt's row in the attempts table, for an
attempt that ended otherwise than in success. SQLite has no data-modifying
CTEs, so this is the second statement of the same transaction that
PostgreSQL's ``_ending`` CTE is of its one statement. Waiters on SQLite poll
(store/waiting.py): there is no wake-up to send. Issue 42's release of the
jobs that wait for these goes here too, as a third statement over the ended
rows' ids, in the same transaction, so a dependency is released exactly once.

Each ending's RETURNING starts with the same nine columns, the row ``audit``
inserts as it is: id, state (the new one), outcome (None: no attempts row,
for a success, whose row is its own audit, or a queued job cancelled or
buried, which ran no attempt), attempt, worker, claimed_at, finished_at,
error, traceback. Any columns after those are the statement's own.
tests/test_ending.py fails if a statement that sets a terminal state is
missing from ``ENDINGS`` or is run other than through ``end``.
"""

from __future__ import annotations

import sqlite3
from typing import Any

__all__ = ["ENDINGS", "end"]

#: the named queries that can end a job
ENDINGS = frozenset({"complete", "fail", "release", "reap_one", "cancel", "bury_unknown", "cancel_many", "expire"})


def end(conn: sqlite3.Connection | sqlite3.Cursor, q: dict[str, str], name: str,
        params: dict[str, Any]) -> list[Any]:
    """Run the ending ``name``, then what every ending does; its rows."""
    rows = conn.execute(q[name], params).fetchall()
    # audit's columns: job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
    audits = [(r[0], r[3], r[4], r[5], r[6], r[2], r[7], r[8]) for r in rows if r[2] is not None]
    if audits:
        conn.executemany(q["audit"], audits)
    return rows
