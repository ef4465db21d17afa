"""The plans of app.jobs()' search (issue 43): on PostgreSQL the tags and
meta filters read the partial GIN indexes of migration 0013, which a plain
job (neither meta nor tags) never enters; on SQLite a page walks the rowid
newest first, with no sort of the matching rows."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import psycopg
import pytest

from tether import Tether
from tether.config import parse_database_url
from tether.search import JobFilter
from tether.store.postgres import many as pg_many
from tether.store.postgres.many import filter_params as pg_params
from tether.store.sqlite.many import filter_params as sqlite_params
from tether.store.sqlite.many import register_functions

from .test_migrations import index_sql

PLAIN, TAGGED = 4000, 20


@pytest.fixture
def app(db_url: str) -> Iterator[Tether]:
    a = Tether(db_url)
    a.migrate()
    t = a.task(name="t")(lambda ctx, n: None)
    t.enqueue_many([{"n": n} for n in range(PLAIN)])
    for n in range(TAGGED):
        t.using(tags=["rare"], meta={"customer": 42}).enqueue(n=n)
    yield a
    a.close()


def plan(app: Tether, db_url: str, **filters: Any) -> str:
    f = JobFilter.of(filters)
    dsn = parse_database_url(db_url)
    sql = app.store.q["search_jobs"]  # type: ignore[attr-defined]
    if dsn.backend == "sqlite":
        with closing(sqlite3.connect(dsn.url)) as conn:
            register_functions(conn)
            params = {**sqlite_params(f), "limit": 101, "before": None}
            return " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    with psycopg.connect(dsn.url, autocommit=True) as pg:
        pg.execute("ANALYZE " + app.store.schema + ".jobs")  # type: ignore[attr-defined]
        params = {**pg_params(f), "limit": 101, "before": None}
        sql = app.store.q[app.store.search_query(f, params)]  # type: ignore[attr-defined]  # the one it runs
        return " ".join(str(r[0]) for r in pg.execute("EXPLAIN " + sql, params).fetchall())


def test_the_tags_and_meta_filters_read_their_indexes(app: Tether, db_url: str) -> None:
    if app.dsn.backend == "sqlite":
        shown = plan(app, db_url, tags=["rare"], meta={"customer": 42})
        assert "SCAN tether_jobs" in shown and "TEMP B-TREE" not in shown, shown  # rowid order: no sort
        assert "TEMP B-TREE" not in plan(app, db_url, queue="default", state="queued"), shown
        return
    assert "jobs_tags_idx" in plan(app, db_url, tags=["rare"])
    assert "jobs_meta_idx" in plan(app, db_url, meta={"customer": 42})
    both = plan(app, db_url, tags=["rare"], meta={"customer": 42}, task="t", state="queued")
    assert "jobs_tags_idx" in both or "jobs_meta_idx" in both, both
    assert len(app.jobs(tags=["rare"], meta={"customer": 42}).jobs) == TAGGED


def test_the_gin_indexes_are_partial_and_hold_only_jobs_with_tags_or_meta(app: Tether, db_url: str) -> None:
    if app.dsn.backend == "sqlite":
        pytest.skip("SQLite cannot index JSON containment (migration 0011 says so)")
    defs = index_sql(db_url)
    for name, column in (("jobs_tags_idx", "tags"), ("jobs_meta_idx", "meta")):
        assert "gin" in defs[name] and "jsonb_path_ops" in defs[name]
        assert f"where ({column} is not null)" in defs[name], defs[name]


def test_a_rare_tag_reads_its_gin_index_and_a_common_one_walks_the_primary_key(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/many_jobs.py's rare-tag first page in small (issue 43): the newest
    jobs hold neither tag (a bulk enqueue of another), a common tag is on
    nearly every older job and a rare one on 1%. On its own PostgreSQL walks
    the primary key newest first for the rare tag too, through every newer
    job; the store asks the planner's estimate first and, for a filter it
    expects to match few rows (FEW_ROWS, made small here for the small
    table), runs search_jobs_few, which starts from the GIN index."""
    if not db_url.startswith("postgresql"):
        pytest.skip("the plans of PostgreSQL's search (SQLite cannot index JSON containment)")
    monkeypatch.setattr(pg_many, "FEW_ROWS", FEW)
    a = Tether(db_url)
    a.migrate()
    try:
        t = a.task(name="t")(lambda ctx, n: None)
        # enough rows that a page's 101 rare jobs are 1.5% of them: fewer, and
        # the planner reads the GIN index by itself, as it cannot stop early
        rare = t.using(tags=["common", "rare"]).enqueue_many([{"n": n} for n in range(300)])
        t.using(tags=["common"]).enqueue_many([{"n": n} for n in range(19_700)])
        t.using(tags=["newest"]).enqueue_many([{"n": n} for n in range(5000)])
        rare_plan = plan(a, db_url, tags=["rare"])
        assert "jobs_tags_idx" in rare_plan and "Filter: (tags @>" not in rare_plan, rare_plan
        common_plan = plan(a, db_url, tags=["common"])
        assert "Index Scan Backward using jobs_pkey" in common_plan and "jobs_tags_idx" not in common_plan, common_plan
        page = a.jobs(tags=["rare"], limit=200)
        assert [j.id for j in page.jobs] == rare[::-1][:200] and page.next is not None
        assert [j.id for j in a.jobs(tags=["rare"], limit=200, after=page.next).jobs] == rare[::-1][200:]
        assert a.count_jobs(tags=["common"]) == 20_000
    finally:
        a.close()


#: FEW_ROWS for the rare-tag test's table: 300 rare jobs are few, 20,000 common ones are not
FEW = 1000
