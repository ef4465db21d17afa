"""Finding and acting on many jobs on PostgreSQL (issue 43; store/many.py): a
mixin of ``PostgresStore``; its statements are in ``queries.sql`` under
"Finding and acting on many jobs"."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg import errors as pg_errors

from ...model import Job
from ...search import JobFilter
from ..many import Batch, Ended, not_rerun
from ..rows import job_from_row

__all__ = ["FEW_ROWS", "PostgresMany", "filter_params"]

#: a tags or meta filter the planner expects to match at most this many rows
#: reads them all from its GIN index, newest first by a sort, instead of
#: walking the primary key (search_jobs_few). Measured on bench/many_jobs.py's
#: rows: 10,000 matches sort in about 20 ms; a primary key walk is as fast
#: only where the newest rows hold the tag (it has no bound otherwise).
FEW_ROWS = 20_000


def filter_params(f: JobFilter) -> dict[str, Any]:
    """The parameters of queries.sql's _job_filter (JSON filters as jsonb text)."""
    return {
        "states": None if f.states is None else list(f.states), "queue": f.queue, "task": f.task,
        "tags": json.dumps(list(f.tags)) if f.tags else None,
        "meta": None if f.meta is None else json.dumps(f.meta),
        "args": None if f.args is None else json.dumps(f.args),
        "created_after": f.created_after, "created_before": f.created_before,
        "ids": None if f.ids is None else list(f.ids),
        "finished_after": f.finished_after, "finished_before": f.finished_before,
    }


class PostgresMany:
    """``ManyJobs`` for ``PostgresStore`` (which provides ``_all``)."""

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def search_jobs(self, f: JobFilter, *, limit: int, before_id: int | None = None) -> list[Job]:
        params = {**filter_params(f), "limit": limit, "before": before_id}
        rows = self._all(self.search_query(f, params), params)
        return [job_from_row(r, []) for r in rows]

    def search_query(self, f: JobFilter, params: dict[str, Any]) -> str:
        """search_jobs, or search_jobs_few for a tags or meta filter the
        planner expects to match at most FEW_ROWS rows (queries.sql says why)."""
        if not f.tags and f.meta is None:
            return "search_jobs"
        ((plan,),) = self._all("search_estimate", params)
        return "search_jobs_few" if plan[0]["Plan"]["Plan Rows"] <= FEW_ROWS else "search_jobs"

    def count_jobs(self, f: JobFilter) -> int:
        return int(self._all("count_jobs", filter_params(f))[0][0])

    def cancel_batch(self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None,
                     ended: list[Ended] | None = None) -> Batch:
        ((count, last, cancelled),) = self._all("cancel_many", {**filter_params(f), "after": after_id,
                                                                 "limit": limit, "now": now,
                                                                 "report": ended is not None})
        if ended is not None and cancelled:
            ended.extend((int(i), str(t), str(q)) for i, t, q in cancelled)
        return int(count), last

    def retry_batch(
        self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None
    ) -> tuple[list[tuple[int, str]], int | None]:
        rows = self._all("retry_many", {**filter_params(f), "after": after_id, "limit": limit, "now": now})
        return [(int(i), str(q)) for i, q, _, _ in rows if i is not None], rows[0][2]

    def delete_batch(self, f: JobFilter, *, after_id: int, limit: int) -> Batch:
        ((count, last),) = self._all("delete_many", {**filter_params(f), "after": after_id, "limit": limit})
        return int(count), last

    def rerun(self, job_id: int, *, now: datetime | None = None) -> int:
        try:
            rows = self._all("rerun", {"id": job_id, "now": now})
        except pg_errors.UniqueViolation:  # an exclusive or other unique rule the insert broke
            rows = []
        if rows:
            return int(rows[0][0])
        state = self._all("job_state", {"id": job_id})
        not_rerun(job_id, str(state[0][0]) if state else None)
