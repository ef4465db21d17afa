"""The one way a job ends on SQLite (issue 48; DESIGN.md section 2).

Every statement of queries.sql that can set a terminal state (``ENDINGS``)
runs through ``end``, inside the caller's write transaction, and ``end`` does
what every ending must: the attempt's row in the attempts table, for an
attempt that ended otherwise than in success. SQLite has no data-modifying
CTEs, so this is the second statement of the same transaction that
PostgreSQL's ``_ending`` CTE is of its one statement. Waiters on SQLite poll
(store/waiting.py): there is no wake-up to send. Issue 42's release of the
jobs that wait for these (``release``) runs here too, in the same transaction,
for the ended rows that have dependents (the last column of every ending's
RETURNING says so: ``_dependents`` in queries.sql), so a plain job's ending
runs no statement more, and a dependency is released exactly once: by the
ending, which a zombie's late report (fenced out) never is.

Each ending's RETURNING starts with the same nine columns, the row ``audit``
inserts as it is: id, state (the new one), outcome (None: no attempts row,
for a success, whose row is its own audit, or a queued job cancelled or
buried, which ran no attempt), attempt, worker, claimed_at, finished_at,
error, traceback. Any columns after those are the statement's own, and the
last one is ``_dependents``.
tests/test_ending.py fails if a statement that sets a terminal state is
missing from ``ENDINGS`` or is run other than through ``end``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

from ..flows import FlowsEnded

__all__ = ["ENDINGS", "end", "forget_ended", "release", "reopen", "take_ended"]

#: the named queries that can end a job
ENDINGS = frozenset({"complete", "fail", "release", "reap_one", "cancel", "bury_unknown", "cancel_many", "expire",
                     "dep_cut", "batch_release"})
_FINISHED = frozenset({"succeeded", "dead", "cancelled"})

#: what this thread's write transaction finished and released so far (the
#: runs, the batches, the (id, queue) queued): the transaction's COMMIT hands
#: it to the store's flow listeners (take_ended), a ROLLBACK drops it
_said = threading.local()


def _note() -> tuple[list[int], list[int], list[tuple[int, str]]]:
    acc: tuple[list[int], list[int], list[tuple[int, str]]] | None = getattr(_said, "acc", None)
    if acc is None:
        acc = _said.acc = ([], [], [])
    return acc


def forget_ended() -> None:
    """A write transaction begins or rolls back: nothing it noted stands."""
    _said.acc = None


def take_ended() -> FlowsEnded | None:
    """After a COMMIT: what the transaction's endings did (None: nothing)."""
    acc: tuple[list[int], list[int], list[tuple[int, str]]] | None = getattr(_said, "acc", None)
    _said.acc = None
    if acc is None:
        return None
    return FlowsEnded(tuple(acc[0]), tuple(acc[1]), tuple(acc[2])) or None


def end(conn: sqlite3.Connection | sqlite3.Cursor, q: dict[str, str], name: str,
        params: dict[str, Any], *, root: tuple[int, str] | None = None) -> list[Any]:
    """Run the ending ``name``, then what every ending does; its rows.
    ``root``: for a step cut by a failed dependency, that dependency (its id
    and state), which the steps cut after it name too."""
    rows = conn.execute(q[name], params).fetchall()
    # audit's columns: job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
    audits = [(r[0], r[3], r[4], r[5], r[6], r[2], r[7], r[8]) for r in rows if r[2] is not None]
    if audits:
        conn.executemany(q["audit"], audits)
    for r in rows:
        if r[-1] and r[1] in _FINISHED:
            release(conn, q, r[0], r[1], root, params.get("now"))
    return rows


def release(conn: sqlite3.Connection | sqlite3.Cursor, q: dict[str, str], job_id: int, state: str,
            root: tuple[int, str] | None, now: Any) -> None:
    """The ending of ``job_id`` (in ``state``) for the jobs that wait for it
    (as PostgreSQL's jobs_ended, migration 0012): a waiting dependent whose
    policy is on_failure='cancel' ends cancelled when this one failed (an
    ending in turn: ``dep_cut`` through ``end``, so its own dependents follow);
    any other counts this dependency as ended, and is queued once none is
    pending, if none failed or its policy is on_failure='run'."""
    bad = state != "succeeded"
    for (edge,) in conn.execute(q["batch_edges"], {"id": job_id}).fetchall():
        _member_ended(conn, q, edge, bad, now)
    run = conn.execute(q["workflow_counted"], {"id": job_id, "now": now}).fetchone()
    if run is not None and run[1] <= 0:
        _note()[0].append(int(run[0]))
    cause = root if root is not None else (job_id, state)
    for dep, dep_state, policy in conn.execute(q["dependents"], {"id": job_id}).fetchall():
        if bad and policy == "cancel":
            if dep_state == "waiting":
                cut = end(conn, q, "dep_cut", {"id": dep, "root": cause[0], "why": cause[1], "now": now}, root=cause)
                if cut:
                    conn.execute(q["dep_mark"], {"id": dep, "root": cause[0]})
            continue
        pending, failed, policy = conn.execute(q["dep_count"], {"id": dep, "bad": bad}).fetchone()
        if dep_state == "waiting" and pending <= 0 and (failed == 0 or policy == "run"):
            _note()[2].extend((int(i), str(queue)) for i, queue in conn.execute(q["dep_free"], {"id": dep, "now": now}))


def _member_ended(conn: sqlite3.Connection | sqlite3.Cursor, q: dict[str, str], edge: int, bad: bool,
                  now: Any) -> None:
    """A batch member ended: its shard counts down; the shard that reaches zero
    counts once on its batch; the last one releases the callbacks."""
    batch, shard = divmod(edge, 16)
    (pending,) = conn.execute(q["batch_count"], {"batch": batch, "shard": shard, "bad": bad}).fetchone()
    if pending > 0:
        return
    (complete,) = conn.execute(q["batch_zeroed"], {"batch": batch}).fetchone()
    if not complete:
        return
    finished = conn.execute(q["batch_finish"], {"batch": batch, "now": now}).fetchone()
    if finished is not None:
        on_complete, on_success, failed = finished
        called = end(conn, q, "batch_release", {"batch": batch, "on_complete": on_complete, "on_success": on_success,
                                                "bad": failed or 0, "now": now})
        said = _note()
        said[1].append(int(batch))
        said[2].extend((int(r[0]), str(r[9])) for r in called if r[1] == "queued")


def reopen(conn: sqlite3.Connection | sqlite3.Cursor, q: dict[str, str], job_id: int) -> None:
    """``app.retry`` of ``job_id``, which has dependents: the steps its failure
    cancelled wait again, and the steps that counted it (or one of those) as
    ended and failed, and still wait, count it as pending again."""
    for (edge,) in conn.execute(q["batch_edges"], {"id": job_id}).fetchall():
        # a member of a batch not yet finished counts as pending (and not failed) again
        batch, shard = divmod(edge, 16)
        (pending,) = conn.execute(q["batch_reopen"], {"batch": batch, "shard": shard}).fetchone()
        if pending == 1 and not conn.execute(q["batch_unzero"], {"batch": batch}).fetchall():
            conn.execute(q["batch_count"], {"batch": batch, "shard": shard, "bad": True})  # finished: undo
    cut = [r[0] for r in conn.execute(q["dep_reopen"], {"id": job_id}).fetchall()]
    back = [r[0] for r in conn.execute(q["dep_back"], {"ids": json.dumps(cut)}).fetchall()] if cut else []
    conn.execute(q["dep_unmark"], {"back": json.dumps(back)})
    conn.execute(q["workflow_reopened"], {"id": job_id, "n": 1 + len(back)})
    conn.execute(q["dep_recount"], {"ups": json.dumps([job_id, *back]), "back": json.dumps(back)})
