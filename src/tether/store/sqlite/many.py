"""Finding and acting on many jobs on SQLite (issue 43; store/many.py): a mixin
of ``SQLiteStore``; its statements are in ``queries.sql`` under "Finding and
acting on many jobs". SQLite has no JSON containment operator: each
connection registers ``tether_contains`` (search.contains_json)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from ...model import Job
from ...search import JobFilter, contains_json
from ..many import Batch, Ended, not_rerun
from ..rows import epoch_to_dt, job_from_row, json_text
from .ending import end, reopen

__all__ = ["SQLiteMany", "filter_params", "register_functions"]


def register_functions(conn: sqlite3.Connection) -> None:
    """The SQL functions queries.sql's _job_filter calls."""
    conn.create_function("tether_contains", 2, contains_json, deterministic=True)


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def filter_params(f: JobFilter) -> dict[str, Any]:
    """The parameters of queries.sql's _job_filter (lists and objects as JSON text, times as epoch)."""
    return {
        "states": None if f.states is None else json.dumps(list(f.states)), "queue": f.queue, "task": f.task,
        "tags": json.dumps(list(f.tags)) if f.tags else None,
        "meta": None if f.meta is None else json.dumps(f.meta),
        "args": None if f.args is None else json.dumps(f.args),
        "created_after": _ts(f.created_after), "created_before": _ts(f.created_before),
        "ids": None if f.ids is None else json.dumps(list(f.ids)),
        "finished_after": _ts(f.finished_after), "finished_before": _ts(f.finished_before),
    }


class SQLiteMany:
    """``ManyJobs`` for ``SQLiteStore`` (which provides ``q``, ``_all`` and ``_write``)."""

    q: dict[str, str]

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def search_jobs(self, f: JobFilter, *, limit: int, before_id: int | None = None) -> list[Job]:
        rows = self._all("search_jobs", {**filter_params(f), "limit": limit, "before": before_id})
        return [job_from_row(r, [], epoch_to_dt, json_text) for r in rows]

    def count_jobs(self, f: JobFilter) -> int:
        return int(self._all("count_jobs", filter_params(f))[0][0])

    def _pick(self, conn: sqlite3.Connection, f: JobFilter, states: list[str], after_id: int,
              limit: int) -> list[int]:
        params = {**filter_params(f), "picked": json.dumps(states), "after": after_id, "limit": limit}
        return [int(r[0]) for r in conn.execute(self.q["many_picked"], params).fetchall()]

    def cancel_batch(self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None,
                     ended: list[Ended] | None = None) -> Batch:
        with self._write() as conn:
            ids = self._pick(conn, f, ["queued", "running"], after_id, limit)
            rows = end(conn, self.q, "cancel_many", {"ids": json.dumps(ids), "now": _ts(now)}) if ids else []
        if ended is not None:  # columns 9 and 10: the task and queue (queries.sql)
            ended.extend((int(r[0]), str(r[9]), str(r[10])) for r in rows if r[1] == "cancelled")
        return len(rows), (ids[-1] if ids else None)

    def retry_batch(
        self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None
    ) -> tuple[list[tuple[int, str]], int | None]:
        with self._write() as conn:
            ids = self._pick(conn, f, ["dead", "cancelled"], after_id, limit)
            rows = conn.execute(self.q["retry_many"], {"ids": json.dumps(ids), "now": _ts(now)}).fetchall() \
                if ids else []
            for job_id, _, dependents in rows:  # as retry: what its ending settled waits for it again
                if dependents:
                    reopen(conn, self.q, job_id)
        return [(int(i), str(q)) for i, q, _ in rows], (ids[-1] if ids else None)

    def delete_batch(self, f: JobFilter, *, after_id: int, limit: int) -> Batch:
        with self._write() as conn:
            ids = self._pick(conn, f, ["succeeded", "dead", "cancelled"], after_id, limit)
            gone = conn.execute(self.q["delete_many"], {"ids": json.dumps(ids)}).fetchall() if ids else []
            if gone:
                conn.execute(self.q["prune_attempts"], {"ids": json.dumps([r[0] for r in gone])})
        return len(gone), (ids[-1] if ids else None)

    def rerun(self, job_id: int, *, now: datetime | None = None) -> int:
        try:
            rows = self._all("rerun", {"id": job_id, "now": _ts(now)})
        except sqlite3.IntegrityError:
            rows = []
        if rows:
            return int(rows[0][0])
        state = self._all("job_state", {"id": job_id})
        not_rerun(job_id, str(state[0][0]) if state else None)
