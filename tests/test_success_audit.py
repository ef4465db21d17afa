"""A success's audit is its job row: no attempts row is written for it
(PostgreSQL's queries.sql, _complete_done; SQLite's, complete), yet every
reader of attempts reports it exactly as it reports the attempts table's
rows, and a success written the older way (an attempts row, locked_by NULL:
before this release, or by a worker of an older release during a rolling
deploy) is reported once, not twice."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

from tether.model import Outcome
from tether.store import Store
from tether.store.postgres.connect import quote
from tether.store.postgres.store import PostgresStore
from tether.store.sqlite.store import SQLiteStore

from .test_conformance import TTL, W, new_job


@contextmanager
def _sql(store: Store) -> Iterator[tuple[Any, str, str]]:
    """A connection to the store's database whose writes are committed when
    the block ends (PostgreSQL: one of the store's pool; SQLite: autocommit),
    the tables' prefix and the placeholder style."""
    if isinstance(store, PostgresStore):
        with store.pool.connection() as conn:
            yield conn, f"{quote(store.schema)}.", "%s"
    else:
        assert isinstance(store, SQLiteStore)
        with closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
            yield conn, "tether_", "?"


def _audit_rows(store: Store, job_id: int) -> int:
    with _sql(store) as (conn, t, p):
        row = conn.execute(f"SELECT count(*) FROM {t}attempts WHERE job_id = {p}", (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def _succeed_the_older_way(store: Store, job_id: int, attempt: int) -> None:
    """What complete wrote before this release: locked_by cleared, an attempts row."""
    with _sql(store) as (conn, t, p):
        now = "now()" if isinstance(store, PostgresStore) else "((julianday('now') - 2440587.5) * 86400.0)"
        conn.execute(f"INSERT INTO {t}attempts (job_id, attempt, worker, claimed_at, finished_at, outcome) "
                     f"SELECT id, attempt, locked_by, claimed_at, {now}, 'succeeded' FROM {t}jobs WHERE id = {p}",
                     (job_id,))
        conn.execute(f"UPDATE {t}jobs SET state = 'succeeded', finished_at = {now}, locked_by = NULL, "
                     f"lease_until = NULL, deadline = NULL WHERE id = {p} AND attempt = {p}", (job_id, attempt))


def _succeeded_in_throughput(store: Store) -> int:
    return sum(b.counts[Outcome.SUCCEEDED] for b in store.throughput(buckets=2, bucket_seconds=3600))


def test_a_success_writes_no_attempts_row_and_every_reader_reports_it_once(store: Store) -> None:
    a, b = store.enqueue([new_job(), new_job()])
    ja, jb = store.claim(W, ["default"], 2, TTL)
    assert store.complete(W, [(ja.id, ja.attempt, None)]) == {ja.id}
    # the worker's usual round carries the other success
    accepted, _ = store.complete_and_claim(W, [(jb.id, jb.attempt, '{"ok": 1}')], ["default"], 1, TTL)
    assert accepted == {jb.id}

    for job_id in (a, b):
        assert _audit_rows(store, job_id) == 0
        job = store.get_job(job_id)
        assert job is not None
        assert [(x.attempt, x.worker, x.outcome, x.error) for x in job.attempts] == [(1, W, Outcome.SUCCEEDED, None)]
        (att,) = job.attempts
        assert att.claimed_at == job.claimed_at and att.finished_at == job.finished_at
        assert job.locked_by is None  # the worker is named by the attempt, not as an owner
    assert store.list_jobs(state="succeeded")[0].locked_by is None
    assert sorted(x.job_id for x in store.recent_attempts([Outcome.SUCCEEDED])) == [a, b]
    assert store.recent_attempts([Outcome.LEASE_EXPIRED]) == []
    assert _succeeded_in_throughput(store) == 2
    # the fence of a result written after ctx.transaction()'s success: only that attempt's worker
    assert not store.set_result("someone-else", b, 1, '{"x": 1}')
    assert store.set_result(W, b, 1, '{"x": 2}')
    assert not store.set_result(W, b, 2, '{"x": 3}')
    job = store.get_job(b)
    assert job is not None and job.result == {"x": 2}


def test_a_success_written_the_older_way_is_reported_once(store: Store) -> None:
    old, new = store.enqueue([new_job(), new_job()])
    jo, jn = store.claim(W, ["default"], 2, TTL)
    assert jo.id == old
    _succeed_the_older_way(store, old, jo.attempt)
    assert store.complete(W, [(jn.id, jn.attempt, None)]) == {new}

    for job_id in (old, new):
        job = store.get_job(job_id)
        assert job is not None and job.locked_by is None
        assert [(x.attempt, x.worker, x.outcome) for x in job.attempts] == [(1, W, Outcome.SUCCEEDED)]
    assert sorted(x.job_id for x in store.recent_attempts([Outcome.SUCCEEDED, Outcome.FAILED])) == [old, new]
    assert _succeeded_in_throughput(store) == 2
    assert store.set_result(W, old, 1, '{"older": true}')  # its worker is in its attempts row
    assert not store.set_result("someone-else", old, 1, '{"older": false}')


def test_a_failed_attempt_then_a_success_lists_both_in_order(store: Store) -> None:
    (job_id,) = store.enqueue([new_job(max_attempts=3)])
    (first,) = store.claim(W, ["default"], 1, TTL)
    store.fail(W, job_id, first.attempt, outcome=Outcome.FAILED, error="boom", delay=0)
    (second,) = store.claim(W, ["default"], 1, TTL)
    assert store.complete(W, [(job_id, second.attempt, None)]) == {job_id}
    job = store.get_job(job_id)
    assert job is not None
    assert [(x.attempt, x.outcome, x.error) for x in job.attempts] == [(1, Outcome.FAILED, "boom"),
                                                                        (2, Outcome.SUCCEEDED, None)]
    assert _audit_rows(store, job_id) == 1
