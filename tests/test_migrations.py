"""Migrations produce the expected schema, apply once, and an unmigrated
database says so plainly (``SchemaMissing``: run ``tether migrate``)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from tether.config import parse_database_url
from tether.errors import SchemaMissing
from tether.model import NewJob, Outcome, WorkerInfo
from tether.store import Store, open_store
from tether.store.columns import JOB_COLUMNS

EXPECTED_COLUMNS: dict[str, set[str]] = {
    "jobs": {c.name for c in JOB_COLUMNS},  # the declaration: test_columns.py checks it
    "attempts": {"job_id", "attempt", "worker", "claimed_at", "finished_at", "outcome", "error", "traceback"},
    "workers": {
        "id", "host", "pid", "proc_start", "started_at", "last_seen", "queues", "concurrency", "stopped_at", "owner",
        "tasks",
    },
    "migrations": {"version", "name", "applied_at"},
    "schedules": {
        "name", "cron", "timezone", "args", "queue", "priority", "max_attempts", "lease_ttl", "timeout",
        "backoff_base", "catch_up", "overlap", "version", "since", "created_at", "updated_at", "last_seen",
        "orphaned", "last_tick", "last_fired", "last_job_id", "skipped", "task", "dynamic", "paused", "triggered",
        "last_triggered",
    },
    "schedule_ticks": {"schedule", "tick", "skipped", "decided_at", "manual"},
    "queues": {"queue", "paused", "updated_at", "concurrency", "rate_limit", "rate_period"},
    "queue_starts": {"queue", "started_at"},
    # workflows (issue 42): runs, their steps, the edges, and each waiting job's counts
    "workflows": {"id", "name", "created_at", "open", "finished_at"},
    "workflow_steps": {"job_id", "workflow_id", "name"},
    "job_deps": {"upstream_id", "job_id"},
    "job_waits": {"job_id", "pending", "failed", "on_failure", "cancelled_by"},
    # batches (issue 42): the callbacks, and the members' count split over shard rows
    "batches": {"id", "created_at", "shards", "zeroed", "on_complete", "on_success", "finished_at"},
    "batch_shards": {"batch_id", "shard", "pending", "failed"},
    # per-key limits (issue 44): the patterns, and the starts of keys whose pattern has a rate
    "key_limits": {"pattern", "matcher", "rank", "concurrency", "rate_limit", "rate_period", "updated_at"},
    "key_starts": {"limit_key", "started_at"},
}
#: PostgreSQL only: who waits for which job (its finish trigger notifies only
#: those; SQLite's app.wait polls)
POSTGRES_COLUMNS: dict[str, set[str]] = {"waiters": {"id", "job_id", "expires_at"}}
REQUIRED_INDEXES = {
    "jobs_claim_idx", "jobs_reap_idx", "jobs_dedup_idx", "attempts_finished_idx", "jobs_schedule_tick_idx",
}


@contextmanager
def raw_sql(db_url: str) -> Iterator[tuple[Callable[[str], list[tuple[Any, ...]]], str]]:
    """A plain driver connection beside the store: ``(run(sql), table_prefix)``."""
    dsn = parse_database_url(db_url)
    if dsn.backend == "sqlite":
        with closing(sqlite3.connect(dsn.url, isolation_level=None)) as conn:
            yield (lambda sql: conn.execute(sql).fetchall()), "tether_"
        return
    with psycopg.connect(dsn.url, autocommit=True) as pg:

        def run(sql: str) -> list[tuple[Any, ...]]:
            cur = pg.execute(sql.encode())
            return cur.fetchall() if cur.description else []

        yield run, f'"{dsn.schema}".'


def index_sql(db_url: str) -> dict[str, str]:
    """Each index's definition, lower-cased, whitespace collapsed, without the prefix."""
    dsn = parse_database_url(db_url)
    with raw_sql(db_url) as (run, _):
        if dsn.backend == "sqlite":
            rows = run("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
            found = {name.removeprefix("tether_"): sql for name, sql in rows}
        else:
            rows = run(f"SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = '{dsn.schema}'")
            found = dict(rows)
    return {name: " ".join(str(sql).lower().split()) for name, sql in found.items()}


# -- the schema ---------------------------------------------------------------------


def test_migrations_create_exactly_the_expected_tables_and_columns(store: Store) -> None:
    objects = store.schema_objects()
    tables = {key.removeprefix("table:"): set(cols) for key, cols in objects.items() if key.startswith("table:")}
    assert tables == EXPECTED_COLUMNS | (POSTGRES_COLUMNS if store.backend == "postgresql" else {})


def test_migrations_create_the_claim_reap_and_dedup_indexes(store: Store) -> None:
    assert set(store.schema_objects()["indexes"]) >= REQUIRED_INDEXES


def test_the_hot_path_indexes_are_partial(store: Store, db_url: str) -> None:
    defs = index_sql(db_url)
    claim, reap, dedup = defs["jobs_claim_idx"], defs["jobs_reap_idx"], defs["jobs_dedup_idx"]
    # claim: only queued rows, in claim order; finished history never enters it
    assert "unique" not in claim
    assert "where" in claim and "'queued'" in claim.split("where", 1)[1]
    assert "queue" in claim and "priority" in claim and "run_at" in claim
    # reap: running rows by lease end
    assert "lease_until" in reap and "'running'" in reap.split("where", 1)[1]
    # dedup: at most one *active* job per key
    assert "unique" in dedup and "dedup_key" in dedup
    predicate = dedup.split("where", 1)[1]
    assert "'queued'" in predicate and "'running'" in predicate


def test_the_throughput_query_reads_the_finished_at_index_not_the_table(store: Store, db_url: str) -> None:
    """Failures and other endings from the attempts table's index, successes
    from the jobs table's finished index (a success's record is its job row),
    on SQLite each without reading its table."""
    dsn = parse_database_url(db_url)
    sql = "EXPLAIN " + store.q["throughput"]  # type: ignore[attr-defined]
    params = {"start": 0, "end": 3600, "bucket": 60}
    if dsn.backend == "sqlite":
        with closing(sqlite3.connect(dsn.url)) as conn:
            plan = " ".join(str(r) for r in conn.execute(sql.replace("EXPLAIN", "EXPLAIN QUERY PLAN", 1), params))
        assert "COVERING INDEX tether_attempts_finished_idx" in plan, plan
        assert "COVERING INDEX tether_jobs_finished_idx" in plan, plan
        return
    with psycopg.connect(dsn.url, autocommit=True) as pg:
        pg.execute("SET enable_seqscan = off")  # an empty table is cheapest to scan; ask whether the index serves
        plan = " ".join(str(r[0]) for r in pg.execute(sql, params).fetchall())
    assert "attempts_finished_idx" in plan and "brin" in index_sql(db_url)["attempts_finished_idx"], plan
    assert "jobs_finished_idx" in plan, plan


def test_migrating_a_version_1_database_adds_the_finished_at_index_and_keeps_its_data(
    store: Store, db_url: str
) -> None:
    (job_id,) = store.enqueue([NewJob(task="t", args_json="{}")])
    [c] = store.claim("w", ["default"], 1, 30.0)
    store.complete("w", [(job_id, c.attempt, None)])
    with raw_sql(db_url) as (run, prefix):  # back to how version 1 left it
        run(f"DROP INDEX {prefix}attempts_finished_idx")
        run(f"DELETE FROM {prefix}migrations WHERE version = 2")
    with pytest.raises(SchemaMissing, match="0002_attempts_finished_idx"):
        store.check_schema()
    assert store.migrate() == ["0002_attempts_finished_idx"]
    store.check_schema()
    assert "attempts_finished_idx" in store.schema_objects()["indexes"]
    assert sum(b.counts[Outcome.SUCCEEDED] for b in store.throughput(buckets=2, bucket_seconds=3600)) == 1


def test_migrating_a_version_3_database_adds_schedules_and_keeps_its_jobs(store: Store, db_url: str) -> None:
    (job_id,) = store.enqueue([NewJob(task="t", args_json='{"keep": 1}')])
    with raw_sql(db_url) as (run, prefix):  # back to how version 3 left it
        run(f"DROP TABLE {prefix}schedules")
        run(f"DROP TABLE {prefix}schedule_ticks")
        run(f"DROP INDEX {prefix}jobs_schedule_tick_idx")
        run(f"ALTER TABLE {prefix}jobs DROP COLUMN schedule")
        run(f"ALTER TABLE {prefix}jobs DROP COLUMN scheduled_for")
        run(f"DELETE FROM {prefix}migrations WHERE version = 4")
        # the columns that schedules managed at run time added to those tables went with them
        dynamic = 13 if parse_database_url(db_url).backend == "sqlite" else 15
        run(f"DELETE FROM {prefix}migrations WHERE version = {dynamic}")
    with pytest.raises(SchemaMissing, match="0004_schedules"):
        store.check_schema()
    assert store.migrate() == ["0004_schedules", f"{dynamic:04d}_dynamic_schedules"]
    store.check_schema()
    job = store.get_job(job_id)
    assert job is not None and job.args == {"keep": 1}
    [claimed] = store.claim("w", ["default"], 1, 30.0)
    assert claimed.id == job_id and claimed.scheduled_for is None
    assert store.list_schedules() == []


def test_the_schedule_tick_index_is_unique_and_partial(store: Store, db_url: str) -> None:
    index = index_sql(db_url)["jobs_schedule_tick_idx"]
    assert "unique" in index and "scheduled_for" in index
    assert "schedule is not null" in index.split("where", 1)[1].replace("(", "").replace(")", "")


def test_migrating_a_version_5_database_records_worker_tasks_and_indexes_claims_by_task(
    store: Store, db_url: str
) -> None:
    (job_id,) = store.enqueue([NewJob(task="t", args_json="{}")])
    dsn = parse_database_url(db_url)
    claim_idx = "tether_jobs_claim_idx" if dsn.backend == "sqlite" else "jobs_claim_task_idx"
    with raw_sql(db_url) as (run, prefix):  # back to how version 5 left it
        if dsn.backend == "sqlite":
            run("DROP INDEX tether_jobs_claim_idx")
            run("CREATE INDEX tether_jobs_claim_idx ON tether_jobs (queue, priority DESC, run_at, id) "
                "WHERE state = 'queued'")
        else:
            run(f"DROP INDEX {prefix}{claim_idx}")
        run(f"ALTER TABLE {prefix}workers DROP COLUMN tasks")
        run(f"DELETE FROM {prefix}migrations WHERE version = 6")
    with pytest.raises(SchemaMissing, match="0006_worker_tasks"):
        store.check_schema()
    assert store.migrate() == ["0006_worker_tasks"]
    store.check_schema()
    claim = index_sql(db_url)[claim_idx.removeprefix("tether_")]
    assert "(queue, task, priority desc, run_at, id)" in claim and "'queued'" in claim.split("where", 1)[1]
    assert [c.id for c in store.claim("w", ["default"], 5, 30.0, tasks=["t"])] == [job_id]


def test_migrations_are_recorded_by_version(store: Store, db_url: str) -> None:
    with raw_sql(db_url) as (run, prefix):
        rows = run(f"SELECT version, name FROM {prefix}migrations ORDER BY version")
    assert rows[0] == (1, "init")
    assert [v for v, _ in rows] == list(range(1, len(rows) + 1))


def test_migrate_applies_once_and_then_nothing(db_url: str) -> None:
    s = open_store(db_url)
    try:
        applied = s.migrate()
        assert applied and applied[0] == "0001_init"
        assert s.migrate() == []
        s.check_schema()
    finally:
        s.close()
    other = open_store(db_url)  # a second process sees the same schema as done
    try:
        assert other.migrate() == []
        other.check_schema()
    finally:
        other.close()


def test_migrate_keeps_existing_jobs(store: Store) -> None:
    (job_id,) = store.enqueue([NewJob(task="t", args_json='{"keep": true}')])
    assert store.migrate() == []
    job = store.get_job(job_id)
    assert job is not None and job.args == {"keep": True}


def test_concurrent_migrate_applies_each_migration_once(db_url: str) -> None:
    stores = [open_store(db_url), open_store(db_url)]
    barrier = threading.Barrier(2)

    def go(s: Store) -> list[str]:
        barrier.wait(timeout=10)
        return s.migrate()

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = [f.result(timeout=60) for f in [pool.submit(go, s) for s in stores]]
        nothing, applied = sorted(results, key=len)
        assert nothing == []
        assert applied[:1] == ["0001_init"]
        stores[0].check_schema()
    finally:
        for s in stores:
            s.close()


# -- an unmigrated database ---------------------------------------------------------


def _assert_says_run_migrate(exc: SchemaMissing, db_url: str | None = None) -> None:
    assert "tether migrate" in str(exc)
    if db_url is not None:  # and names the database it looked in (a user with several cannot tell otherwise)
        parts = urlsplit(db_url)
        named = parts.path if parts.scheme == "sqlite" else f"{parts.hostname}:{parts.port}{parts.path}"
        assert named.lstrip("/") in str(exc), (named, str(exc))


def test_check_schema_on_an_unmigrated_database_says_run_migrate(db_url: str) -> None:
    s = open_store(db_url)
    try:
        with pytest.raises(SchemaMissing) as info:
            s.check_schema()
        _assert_says_run_migrate(info.value, db_url)
    finally:
        s.close()


_T = datetime(2024, 1, 1, tzinfo=UTC)
OPERATIONS: dict[str, Callable[[Store], object]] = {
    "enqueue": lambda s: s.enqueue([NewJob(task="t", args_json="{}")]),
    "enqueue_async": lambda s: asyncio.run(s.enqueue_async([NewJob(task="t", args_json="{}")])),
    "claim": lambda s: s.claim("w", ["default"], 10, 30.0),
    "heartbeat": lambda s: s.heartbeat("w", [(1, 1)], 30.0),
    "complete": lambda s: s.complete("w", [(1, 1, None)]),
    "fail": lambda s: s.fail("w", 1, 1, outcome=Outcome.FAILED, error="x"),
    "progress": lambda s: s.progress("w", 1, 1, 0.5, None, 30.0),
    "release": lambda s: s.release("w", 1, 1),
    "reap": lambda s: s.reap(10),
    "lapse_leases": lambda s: s.lapse_leases(["w"]),
    "retry": lambda s: s.retry(1),
    "register_worker": lambda s: s.register_worker(
        WorkerInfo(id="w", host="h", pid=1, proc_start=None, started_at=_T, last_seen=_T, queues=["q"], concurrency=1)
    ),
    "list_workers": lambda s: s.list_workers(),
    "get_job": lambda s: s.get_job(1),
    "list_jobs": lambda s: s.list_jobs(),
    "cancel": lambda s: s.cancel(1),
    "stats": lambda s: s.stats(),
    "throughput": lambda s: s.throughput(buckets=60, bucket_seconds=60),
    "sync_schedules": lambda s: s.sync_schedules([]),
    "fire_schedules": lambda s: s.fire_schedules(["t"], grace=10.0),
    "list_schedules": lambda s: s.list_schedules(),
}


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_operations_on_an_unmigrated_database_say_run_migrate(db_url: str, op: str) -> None:
    s = open_store(db_url)
    try:
        with pytest.raises(SchemaMissing) as info:
            OPERATIONS[op](s)
        _assert_says_run_migrate(info.value, db_url)
    finally:
        s.close()


def test_async_enqueue_on_an_unmigrated_database_fails_as_the_sync_one_does(db_url: str) -> None:
    s = open_store(db_url)
    try:
        for jobs in ([NewJob(task="t", args_json="{}")], [NewJob(task="t", args_json="{}", dedup_key="k")] * 2):
            with pytest.raises(SchemaMissing) as sync:
                s.enqueue(jobs)
            with pytest.raises(SchemaMissing) as async_:
                asyncio.run(s.enqueue_async(jobs))
            assert str(async_.value) == str(sync.value)
    finally:
        s.close()


def test_a_schema_behind_the_code_says_run_migrate(store: Store, db_url: str) -> None:
    with raw_sql(db_url) as (run, prefix):
        run(f"DELETE FROM {prefix}migrations WHERE version = 1")
    with pytest.raises(SchemaMissing) as info:
        store.check_schema()
    _assert_says_run_migrate(info.value)
    assert "0001_init" in str(info.value)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # schema= is a PostgreSQL setting
def test_postgres_schemas_are_independent(db_url: str) -> None:
    migrated = open_store(db_url)
    migrated.migrate()
    dsn = parse_database_url(db_url)
    bare_schema = dsn.schema + "_bare"
    bare = open_store(db_url.replace(f"schema={dsn.schema}", f"schema={bare_schema}"))
    try:
        migrated.check_schema()
        with pytest.raises(SchemaMissing):
            bare.check_schema()
        with pytest.raises(SchemaMissing):
            bare.enqueue([NewJob(task="t", args_json="{}")])
    finally:
        bare.close()
        migrated.close()
