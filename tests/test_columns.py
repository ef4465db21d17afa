"""The job's columns are declared once (store/columns.py), and the declaration
is the truth: a column added to the jobs table by a migration but not to the
declaration (or declared but never migrated, or of another type) fails here,
on each backend, and so does a Job field, a NewJob field or an HTTP record key
that the declaration does not account for."""

from __future__ import annotations

import dataclasses
import sqlite3
from contextlib import closing

import psycopg

from tether.config import parse_database_url
from tether.model import Job, NewJob
from tether.store import Store
from tether.store.columns import INSERTED, JOB_COLUMNS, READ
from tether.store.http.wire import JOB_RECORD, NEW_JOB


def table_columns(db_url: str) -> dict[str, str]:
    """The migrated jobs table's columns and their declared types, in table order."""
    dsn = parse_database_url(db_url)
    if dsn.backend == "sqlite":
        with closing(sqlite3.connect(dsn.url)) as conn:
            return {name: kind for _, name, kind, *_ in conn.execute("PRAGMA table_info(tether_jobs)")}
    with psycopg.connect(dsn.url) as pg:
        rows = pg.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS a"
            " WHERE a.attrelid = (quote_ident(%s) || '.jobs')::regclass AND a.attnum > 0 AND NOT a.attisdropped"
            " ORDER BY a.attnum", (dsn.schema,)).fetchall()
    # format_type spells timestamptz out; the declaration uses the short name
    return {name: kind.replace("timestamp with time zone", "timestamptz") for name, kind in rows}


def test_the_migrated_jobs_table_has_exactly_the_declared_columns(store: Store, db_url: str) -> None:
    found = table_columns(db_url)
    declared = {c.name: c.pg if store.backend == "postgresql" else c.sqlite for c in JOB_COLUMNS}
    missing = sorted(found.keys() - declared.keys())
    assert not missing, f"jobs columns not declared in store/columns.py: {missing}"
    assert not declared.keys() - found.keys(), "declared in store/columns.py, but no migration adds them"
    assert found == declared


def test_a_job_is_the_read_columns_and_its_attempts() -> None:
    # older_attempts: how many attempts get_job left out (MAX_ATTEMPTS_SHOWN), counted, not stored
    assert {f.name for f in dataclasses.fields(Job)} == {c.name for c in READ} | {"attempts", "older_attempts"}


def test_every_newjob_field_is_inserted_or_worked_out_in_sql() -> None:
    # run_at and delay make the run_at column (queries.sql: enqueue)
    assert {f.name for f in dataclasses.fields(NewJob)} == {c.insert for c in INSERTED} | {"run_at", "delay"}


def test_the_http_records_carry_the_declared_wire_names() -> None:
    assert set(JOB_RECORD["properties"]) == {c.wire for c in READ} | {"attempts", "older_attempts"}
    assert set(JOB_RECORD["required"]) == {c.wire for c in READ if not c.wire_optional} | {"attempts"}
    assert set(NEW_JOB["properties"]) == {c.wire for c in INSERTED} | {"run_at", "delay"}
