"""Turning result rows into model records; shared by both backends.

PostgreSQL hands back datetimes and decoded JSON; SQLite hands back epoch
seconds and JSON text. Each backend passes its own converters (``ts`` for
times, ``js`` for JSON columns). The JSON converter must be the backend's, not
a guess from the value's type: a JSON *string* result decodes to a Python str
on PostgreSQL, and decoding that str again would fail (``"done"``) or silently
change it (``"123"`` into 123).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from ..model import MAX_ATTEMPTS_SHOWN, Attempt, ClaimedJob, Job, JobId, JobState, NewJob, Outcome, WorkerInfo, job_id
from .columns import READ

__all__ = [
    "DATETIME_MAX",
    "DATETIME_MIN",
    "assign_ids",
    "attempt_from_row",
    "claimed_from_rows",
    "epoch_to_dt",
    "inserted_ids",
    "job_from_row",
    "job_with_newest",
    "json_text",
    "missing_keys",
    "worker_from_row",
]

Row = Sequence[Any]


def _same(value: Any) -> Any:
    return value


def json_text(value: Any) -> Any:
    """Decode a JSON column kept as text (SQLite); NULL stays None."""
    return None if value is None else json.loads(value)


def job_from_row(
    r: Row, attempts: list[Attempt], ts: Callable[[Any], Any] = _same, js: Callable[[Any], Any] = _same,
    older_attempts: int = 0,
) -> Job:
    """A get_job or list_jobs row (the columns of ``columns.READ``, in order)
    as a Job; ``older_attempts``: how many attempts ``attempts`` leaves out."""
    fields = _fields(r, ts, js)
    return Job(**fields, attempts=_with_running(fields, attempts), older_attempts=older_attempts)


def _fields(r: Row, ts: Callable[[Any], Any], js: Callable[[Any], Any]) -> dict[str, Any]:
    read: dict[str, Callable[[Any], Any]] = {"plain": _same, "time": ts, "json": js, "flag": bool, "state": JobState}
    return {c.name: read[c.kind](value) for c, value in zip(READ, r, strict=True)}


def job_with_newest(
    r: Row, history: Sequence[Row], ts: Callable[[Any], Any] = _same, js: Callable[[Any], Any] = _same
) -> Job:
    """``get_job``'s row with ``get_attempts_newest``'s rows (newest first,
    each with the job's count of attempts last): the attempts oldest first,
    and how many older ones were left out."""
    attempts = [attempt_from_row(h, ts) for h in reversed(history)]
    older = (int(history[0][8]) - len(history)) if history else 0
    fields = _fields(r, ts, js)
    if fields["state"] is JobState.RUNNING and fields["locked_by"] is not None and len(attempts) >= MAX_ATTEMPTS_SHOWN:
        attempts, older = attempts[1:], older + 1  # room for the running attempt (_with_running)
    return Job(**fields, attempts=_with_running(fields, attempts), older_attempts=older)


def _with_running(job: dict[str, Any], attempts: list[Attempt]) -> list[Attempt]:
    """The attempts table holds finished attempts; the running one lives on the job row."""
    if job["state"] is JobState.RUNNING and job["locked_by"] is not None:
        return [*attempts, Attempt(job_id=job["id"], attempt=job["attempt"], worker=job["locked_by"],
                                   claimed_at=job["claimed_at"], finished_at=None, outcome=None)]
    return attempts


def attempt_from_row(r: Row, ts: Callable[[Any], Any] = _same) -> Attempt:
    return Attempt(
        job_id=r[0], attempt=r[1], worker=r[2], claimed_at=ts(r[3]), finished_at=ts(r[4]),
        outcome=Outcome(r[5]), error=r[6], traceback=r[7],
    )


_BY_ID = itemgetter(0)
_BY_PRIORITY = itemgetter(5)


def claimed_from_rows(rows: Sequence[Row], ts: Callable[[Any], Any] | None = None) -> list[ClaimedJob]:
    """A claim's rows, in ClaimedJob's field order with args, meta and trace as JSON
    text, as ClaimedJobs: highest priority first, then oldest id.

    The hot path of every worker round (up to 200 rows a claim, several
    thousand claims a second), so it does each step once per batch where it
    can: both sorts are keyed by C getters (the second stable, so ids stay in
    order within a priority); the args of the whole batch are decoded by one
    ``json.loads`` (a JSON loader per row was most of a claim's client CPU);
    and each record is made from its row in one tuple construction. ``ts``
    converts the times (SQLite's epoch seconds); PostgreSQL's are
    datetimes already.
    """
    if not rows:
        return []
    rows = sorted(rows, key=_BY_ID)
    rows.sort(key=_BY_PRIORITY, reverse=True)
    args = _batch_args(rows)
    new = tuple.__new__
    if ts is None:
        out = [new(ClaimedJob, (r[0], r[1], r[2], a, *r[4:])) for r, a in zip(rows, args, strict=True)]
    else:
        # scheduled_for (r[12]) is NULL but for a schedule's jobs: tested
        # inline, not through ts, so an ordinary job pays no call for it
        out = [new(ClaimedJob, (r[0], r[1], r[2], a, *r[4:9], ts(r[9]), r[10], ts(r[11]),
                                None if r[12] is None else ts(r[12]), r[13]))
               for r, a in zip(rows, args, strict=True)]
    for k, r in enumerate(rows):  # meta and trace: NULL but for the jobs that have them
        if r[10] is not None:
            out[k] = out[k]._replace(meta=json.loads(r[10]))
        if r[13] is not None:
            out[k] = out[k]._replace(trace=json.loads(r[13]))
    return out


def _batch_args(rows: Sequence[Row]) -> list[Any]:
    """Every row's args (JSON text, one value each) in one decode. A row whose
    text held more than one value (``1, 2``: never so for what tether wrote)
    would shift the rest; it cannot hide behind a row of none, which is a
    syntax error, so a count that differs means decode row by row instead."""
    args = json.loads("[" + ",".join([r[3] for r in rows]) + "]")
    if len(args) != len(rows):
        args = [json.loads(r[3]) for r in rows]
    return args  # type: ignore[no-any-return]


def worker_from_row(r: Row, ts: Callable[[Any], Any] = _same, js: Callable[[Any], Any] = _same) -> WorkerInfo:
    return WorkerInfo(
        id=r[0], host=r[1], pid=r[2], proc_start=r[3], started_at=ts(r[4]), last_seen=ts(r[5]),
        queues=list(js(r[6])), concurrency=r[7], stopped_at=ts(r[8]),
        tasks=None if r[9] is None else list(js(r[9])),
    )


def missing_keys(jobs: Sequence[NewJob], rows: Sequence[Row]) -> list[str]:
    """The dedup keys an enqueue's returned ``(id, dedup_key)`` rows lack: the
    active jobs already holding them are what those jobs map to (look them up)."""
    inserted = {row[1] for row in rows if row[1] is not None}
    return sorted({j.dedup_key for j in jobs if j.dedup_key is not None and j.dedup_key not in inserted})


def inserted_ids(rows: Sequence[Row]) -> list[JobId]:
    """An enqueue's ids when every job was inserted (no dedup hit): the rows' first column."""
    return [JobId(r[0]) for r in rows]


def assign_ids(jobs: Sequence[NewJob], rows: Sequence[Row], held: Mapping[str, int]) -> list[JobId | None]:
    """Map an enqueue's returned ``(id, dedup_key)`` rows back to the input order.

    Key-less jobs are always inserted, in order. A keyed job maps to the row
    inserted for its key, or (a dedup hit: ``duplicate``) to the job holding
    it, from ``held`` (the lookup of ``missing_keys``). A keyed job gets None
    when its key's holder finished (or its window passed) between the insert
    and the lookup: that one job is to be inserted again (and only it: the
    others are in).
    """
    keyless = iter([row[0] for row in rows if row[1] is None])
    inserted: dict[str, int] = {row[1]: row[0] for row in rows if row[1] is not None}
    out: list[JobId | None] = []
    for job in jobs:
        if job.dedup_key is None:
            out.append(JobId(next(keyless)))
        elif job.dedup_key in inserted:
            out.append(JobId(inserted[job.dedup_key]))
        else:
            found = held.get(job.dedup_key)
            out.append(None if found is None else job_id(found, duplicate=True))
    return out


#: what a time past Python's datetime reads as (``epoch_to_dt``; PostgreSQL's
#: loaders, postgres/timezones.py): the earliest and latest datetimes there are
DATETIME_MIN = datetime.min.replace(tzinfo=UTC)
DATETIME_MAX = datetime.max.replace(tzinfo=UTC)


def epoch_to_dt(value: float | None) -> datetime | None:
    """SQLite's epoch seconds as a datetime. A time outside Python's years 1 to
    9999 (a run_at 1e12 seconds away, written before delays were bounded:
    config.MAX_DELAY) reads as the nearest end, ``DATETIME_MIN`` or
    ``DATETIME_MAX``, rather than fail every listing that includes its row."""
    if value is None:
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return DATETIME_MAX if value > 0 else DATETIME_MIN
