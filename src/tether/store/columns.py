"""The job's columns, declared once.

Every column of the jobs table, in the order ``get_job`` and ``list_jobs``
select them, with its SQL type on each backend, its name in the HTTP API's
records, and which operations carry it: ``read`` (a field of ``Job``: the
SELECT lists, ``rows.job_from_row``, ``records.encode_job``/``decode_job``)
and ``insert`` (the ``NewJob`` attribute an enqueue writes it from: the
INSERTs' column and parameter lists on both backends, their parameter maps,
the HTTP store's request and the server's ``NewJob``).

The backends fill their queries.sql from this table (``pg_macros``,
``sqlite_macros``: ``{job_select}``, ``{job_insert_columns}`` ...), so a new
field is its line here, a migration per backend, and the places that use it.
``tests/test_columns.py`` fails when a migrated jobs table and this table
disagree.

Two columns an enqueue writes are not in the generated lists, as their value
is worked out in SQL: ``run_at`` (the given time, or now plus ``delay``) and
``created_at`` (now); the INSERTs name them by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from ..model import NewJob

__all__ = [
    "INSERTED",
    "JOB_COLUMNS",
    "READ",
    "Column",
    "Kind",
    "insert_values",
    "pg_arrays",
    "pg_macros",
    "pg_params",
    "sqlite_macros",
    "sqlite_row",
]

#: how a column's values are converted: ``time`` (timestamptz / epoch REAL;
#: ISO 8601 on the wire), ``json`` (jsonb / JSON text), ``flag`` (boolean /
#: 0 or 1), ``state`` (a JobState), ``plain`` (as it is)
Kind = Literal["plain", "time", "json", "flag", "state"]


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    #: the column's type on PostgreSQL and on SQLite (as their migrations declare it)
    pg: str
    sqlite: str
    kind: Kind = "plain"
    #: a field of ``Job`` of the same name, read by get_job and list_jobs
    read: bool = True
    #: the ``NewJob`` attribute an enqueue writes it from (None: not by the
    #: generated insert lists; see the module's doc for run_at and created_at)
    insert: str | None = None
    #: the SQL that reads it, when not the bare column (a fragment of queries.sql)
    select: str = ""
    #: its key in the HTTP API's records ("": its name)
    wire_name: str = ""
    #: added after the HTTP API's first release: optional in a job record (an
    #: older server does not send it), and left out of an enqueue request when
    #: None (an older server refuses a field it does not know)
    wire_optional: bool = False

    @property
    def wire(self) -> str:
        return self.wire_name or self.name


JOB_COLUMNS: tuple[Column, ...] = (
    Column("id", "bigint", "INTEGER"),
    Column("queue", "text", "TEXT", insert="queue"),
    Column("task", "text", "TEXT", insert="task"),
    Column("args", "jsonb", "TEXT", "json", insert="args_json"),
    Column("state", "text", "TEXT", "state"),
    Column("priority", "integer", "INTEGER", insert="priority"),
    Column("run_at", "timestamptz", "REAL", "time"),
    Column("attempt", "integer", "INTEGER"),
    Column("released", "integer", "INTEGER"),
    Column("max_attempts", "integer", "INTEGER", insert="max_attempts"),
    Column("lease_ttl", "double precision", "REAL", insert="lease_ttl"),
    Column("timeout", "double precision", "REAL", insert="timeout"),
    Column("dedup_key", "text", "TEXT", insert="dedup_key"),
    Column("locked_by", "text", "TEXT", select="{_live_owner}"),
    Column("claimed_at", "timestamptz", "REAL", "time"),
    Column("lease_until", "timestamptz", "REAL", "time"),
    Column("cancel_requested", "boolean", "INTEGER", "flag"),
    Column("progress", "double precision", "REAL"),
    Column("progress_message", "text", "TEXT"),
    Column("result", "jsonb", "TEXT", "json"),
    Column("last_error", "text", "TEXT"),
    Column("created_at", "timestamptz", "REAL", "time"),
    Column("finished_at", "timestamptz", "REAL", "time"),
    Column("meta", "jsonb", "TEXT", "json", insert="meta_json"),
    Column("schedule", "text", "TEXT", wire_optional=True),
    Column("scheduled_for", "timestamptz", "REAL", "time", wire_optional=True),
    Column("exclusive_key", "text", "TEXT", insert="exclusive_key", wire_optional=True),
    # the producer's tracing context (otel.py), kept out of meta (migrations 0011 / 0009)
    Column("trace", "jsonb", "TEXT", "json", insert="trace_json", wire_optional=True),
    # a JSON array of short strings (issue 43; migrations 0013 / 0011): NULL for none
    Column("tags", "jsonb", "TEXT", "json", insert="tags_json", wire_optional=True),
    # the job app.rerun() copied (issue 43)
    Column("rerun_of", "bigint", "INTEGER", insert="rerun_of", wire_optional=True),
    # issue 44 (migrations 0014 / 0012): the dedup window, and the expiry the claim obeys.
    # dedup_for is cleared once its window has passed (the key is free again).
    Column("dedup_for", "double precision", "REAL", insert="dedup_for", wire_optional=True),
    Column("expires_at", "timestamptz", "REAL", "time", insert="expires_at", wire_optional=True),
    # issue 44 (migrations 0016 / 0014): the key per-key limits (app.configure_limit) count the job under
    Column("limit_key", "text", "TEXT", insert="limit_key", wire_optional=True),
    # stored, never read into a Job
    Column("backoff_base", "double precision", "REAL", read=False, insert="backoff_base"),
    Column("deadline", "timestamptz", "REAL", "time", read=False),
)

#: the columns a Job is made of, in the order the SELECT lists name them
READ = tuple(c for c in JOB_COLUMNS if c.read)
#: the columns the insert lists carry, in the order they name them
INSERTED = tuple(c for c in JOB_COLUMNS if c.insert is not None)

_insert_getter: Callable[[NewJob], tuple[Any, ...]] = attrgetter(*(c.insert for c in INSERTED if c.insert))


def insert_values(job: NewJob) -> tuple[Any, ...]:
    """A NewJob's values for the INSERTED columns, in their order."""
    return _insert_getter(job)


def _select_list() -> str:
    return ", ".join(c.select or c.name for c in READ)


def pg_macros() -> dict[str, str]:
    """The macros the PostgreSQL queries.sql names, from the declaration. JSON
    columns travel as text (``%(meta)s::text[]``) and are cast in SQL."""
    def param(c: Column) -> str:
        return "text" if c.pg == "jsonb" else c.pg

    def cast(c: Column) -> str:
        return "::jsonb" if c.pg == "jsonb" else ""

    return {
        "job_select": _select_list(),
        "job_insert_columns": ", ".join(c.name for c in INSERTED),
        # one job, plain parameters
        "job_insert_params": ", ".join(f"%({c.name})s::{c.pg}" for c in INSERTED),
        # many jobs: one array per column, unnested as n(...)
        "job_insert_arrays": ", ".join(f"%({c.name})s::{param(c)}[]" for c in INSERTED),
        "job_insert_unnested": ", ".join(f"n.{c.name}{cast(c)}" for c in INSERTED),
        # many jobs sharing their options: args from a.value, the rest plain parameters
        "job_insert_shared": ", ".join("a.value" if c.name == "args" else f"%({c.name})s::{c.pg}"
                                       for c in INSERTED),
    }


def sqlite_macros() -> dict[str, str]:
    """The macros the SQLite queries.sql names. Its enqueue reads each job as
    the JSON array ``sqlite_row`` makes: run_at and delay (positions 0 and 1,
    named by hand), then the INSERTED columns (``{job_insert_json}``)."""
    return {
        "job_select": _select_list(),
        "job_insert_columns": ", ".join(c.name for c in INSERTED),
        "job_insert_json": ", ".join(f"n.value ->> {2 + k}" for k in range(len(INSERTED))),
        "job_dedup_key_json": f"n.value ->> {2 + [c.name for c in INSERTED].index('dedup_key')}",
    }


def sqlite_row(job: NewJob, run_at: float | None, ts: Callable[[Any], Any]) -> list[Any]:
    """One job of the SQLite enqueue's JSON array (``run_at``: the job's as
    epoch seconds; ``ts``: what turns the other times it carries into them)."""
    row = [run_at, job.delay, *insert_values(job)]
    for k in _SQLITE_TIMES:
        if row[k] is not None:
            row[k] = ts(row[k])
    return row


def pg_params(job: NewJob) -> dict[str, Any]:
    """One job's parameters for the PostgreSQL inserts' generated lists."""
    return dict(zip(_INSERT_NAMES, insert_values(job), strict=True))


def pg_arrays(jobs: Sequence[NewJob]) -> dict[str, list[Any]]:
    """Many jobs' parameters for the unnesting insert: one list per column."""
    columns = list(zip(*map(insert_values, jobs), strict=True))
    return dict(zip(_INSERT_NAMES, map(list, columns), strict=True))


_INSERT_NAMES = tuple(c.name for c in INSERTED)
#: the positions in sqlite_row's array of the inserted times (after run_at and delay)
_SQLITE_TIMES = tuple(2 + k for k, c in enumerate(INSERTED) if c.kind == "time")
