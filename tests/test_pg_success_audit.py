"""A success's audit on PostgreSQL is its job row: no attempts row is written
for it (queries.sql, _complete_done), yet every reader of attempts reports it
exactly as it reports the attempts table's rows, and a success written the
older way (an attempts row, locked_by NULL: before this release, or by a
worker of an older release during a rolling deploy) is reported once, not
twice."""

from __future__ import annotations

import pytest

from tether.model import Outcome
from tether.store.postgres.connect import quote
from tether.store.postgres.store import PostgresStore

from . import test_pg_plans
from .test_conformance import TTL, W, new_job

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
pg = test_pg_plans.pg  # the fixture: a migrated PostgresStore


def _audit_rows(pg: PostgresStore, job_id: int) -> int:
    with pg.pool.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {quote(pg.schema)}.attempts WHERE job_id = %s", (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def _succeed_the_older_way(pg: PostgresStore, job_id: int, attempt: int) -> None:
    """What complete wrote before this release: locked_by cleared, an attempts row."""
    s = quote(pg.schema)
    with pg.pool.connection() as conn:
        conn.execute(f"INSERT INTO {s}.attempts (job_id, attempt, worker, claimed_at, finished_at, outcome) "
                     f"SELECT id, attempt, locked_by, claimed_at, now(), 'succeeded' FROM {s}.jobs WHERE id = %s",
                     (job_id,))
        conn.execute(f"UPDATE {s}.jobs SET state = 'succeeded', finished_at = now(), locked_by = NULL, "
                     f"lease_until = NULL, deadline = NULL WHERE id = %s AND attempt = %s", (job_id, attempt))


def _succeeded_in_throughput(pg: PostgresStore) -> int:
    return sum(b.counts[Outcome.SUCCEEDED] for b in pg.throughput(buckets=2, bucket_seconds=3600))


def test_a_success_writes_no_attempts_row_and_every_reader_reports_it_once(pg: PostgresStore) -> None:
    a, b = pg.enqueue([new_job(), new_job()])
    ja, jb = pg.claim(W, ["default"], 2, TTL)
    assert pg.complete(W, [(ja.id, ja.attempt, None)]) == {ja.id}
    # the worker's usual round carries the other success
    accepted, _ = pg.complete_and_claim(W, [(jb.id, jb.attempt, '{"ok": 1}')], ["default"], 1, TTL)
    assert accepted == {jb.id}

    for job_id in (a, b):
        assert _audit_rows(pg, job_id) == 0
        job = pg.get_job(job_id)
        assert job is not None
        assert [(x.attempt, x.worker, x.outcome, x.error) for x in job.attempts] == [(1, W, Outcome.SUCCEEDED, None)]
        (att,) = job.attempts
        assert att.claimed_at == job.claimed_at and att.finished_at == job.finished_at
        assert job.locked_by is None  # the worker is named by the attempt, not as an owner
    assert pg.list_jobs(state="succeeded")[0].locked_by is None
    assert sorted(x.job_id for x in pg.recent_attempts([Outcome.SUCCEEDED])) == [a, b]
    assert pg.recent_attempts([Outcome.LEASE_EXPIRED]) == []
    assert _succeeded_in_throughput(pg) == 2
    # the fence of a result written after ctx.transaction()'s success: only that attempt's worker
    assert not pg.set_result("someone-else", b, 1, '{"x": 1}')
    assert pg.set_result(W, b, 1, '{"x": 2}')
    assert not pg.set_result(W, b, 2, '{"x": 3}')
    job = pg.get_job(b)
    assert job is not None and job.result == {"x": 2}


def test_a_success_written_the_older_way_is_reported_once(pg: PostgresStore) -> None:
    old, new = pg.enqueue([new_job(), new_job()])
    jo, jn = pg.claim(W, ["default"], 2, TTL)
    assert jo.id == old
    _succeed_the_older_way(pg, old, jo.attempt)
    assert pg.complete(W, [(jn.id, jn.attempt, None)]) == {new}

    for job_id in (old, new):
        job = pg.get_job(job_id)
        assert job is not None and job.locked_by is None
        assert [(x.attempt, x.worker, x.outcome) for x in job.attempts] == [(1, W, Outcome.SUCCEEDED)]
    assert sorted(x.job_id for x in pg.recent_attempts([Outcome.SUCCEEDED, Outcome.FAILED])) == [old, new]
    assert _succeeded_in_throughput(pg) == 2
    assert pg.set_result(W, old, 1, '{"older": true}')  # its worker is in its attempts row
    assert not pg.set_result("someone-else", old, 1, '{"older": false}')


def test_a_failed_attempt_then_a_success_lists_both_in_order(pg: PostgresStore) -> None:
    (job_id,) = pg.enqueue([new_job(max_attempts=3)])
    (first,) = pg.claim(W, ["default"], 1, TTL)
    pg.fail(W, job_id, first.attempt, outcome=Outcome.FAILED, error="boom", delay=0)
    (second,) = pg.claim(W, ["default"], 1, TTL)
    assert pg.complete(W, [(job_id, second.attempt, None)]) == {job_id}
    job = pg.get_job(job_id)
    assert job is not None
    assert [(x.attempt, x.outcome, x.error) for x in job.attempts] == [(1, Outcome.FAILED, "boom"),
                                                                        (2, Outcome.SUCCEEDED, None)]
    assert _audit_rows(pg, job_id) == 1
