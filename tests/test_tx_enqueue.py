"""Enqueue on the caller's connection (issue 19, part 1), on SQLite and PostgreSQL.

The job and the caller's own row commit together: nothing is visible to
another connection (a worker's) before the caller commits, nothing remains
after a rollback, and on PostgreSQL the wake-up NOTIFY arrives at the commit,
not before (and never after a rollback). psycopg 3 sync and async
connections, sqlite3 connections, and SQLAlchemy Connection / Session (sync
and async) all work; every wrong connection is refused with a message that
says what to do, before anything is written.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tether import ConfigError, JobContext, JobState, Outcome, SchemaMissing, Tether
from tether.config import parse_database_url
from tether.model import NewJob

from .conftest import BACKENDS, PG_URL, PGBOUNCER, backend_param


@pytest.fixture(params=[*BACKENDS, PGBOUNCER])
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite, PostgreSQL, and PostgreSQL through PgBouncer in transaction mode."""
    return backend_param(request)


def _tasks(app: Tether) -> Any:
    @app.task(name="receipt")
    def receipt(ctx: JobContext, order_id: int) -> None:
        return None

    return receipt


def _sqlite_path(db_url: str) -> str:
    return parse_database_url(db_url).url


@pytest.fixture
def caller(backend: str, db_url: str) -> Iterator[Callable[[], Any]]:
    """``caller()``: a new connection of the caller's own (sqlite3 or psycopg,
    not autocommit) to this test's database, with an ``orders`` table."""
    opened: list[Any] = []
    schema = parse_database_url(db_url).schema

    def connect() -> Any:
        if backend == "sqlite":
            conn: Any = sqlite3.connect(_sqlite_path(db_url))
            opened.append(conn)
            conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")
        else:
            conn = psycopg.connect(PG_URL)
            opened.append(conn)
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'CREATE TABLE IF NOT EXISTS "{schema}".orders (id int PRIMARY KEY)')
        conn.commit()
        return conn

    yield connect
    for conn in opened:
        conn.close()


def _orders(backend: str, db_url: str) -> str:
    return "orders" if backend == "sqlite" else f'"{parse_database_url(db_url).schema}".orders'


def _param(backend: str) -> str:
    return "?" if backend == "sqlite" else "%s"


def test_a_job_enqueued_on_the_callers_connection_exists_only_once_they_commit(
    make_app: Callable[..., Tether], caller: Callable[[], Any], backend: str, db_url: str,
) -> None:
    app = make_app()
    receipt = _tasks(app)
    conn = caller()
    conn.execute(f"INSERT INTO {_orders(backend, db_url)} (id) VALUES ({_param(backend)})", (42,))
    job_id = receipt.using(connection=conn).enqueue(order_id=42)
    many = receipt.using(connection=conn, priority=3).enqueue_many([{"order_id": i} for i in range(3)])
    by_name = app.enqueue("receipt", connection=conn, order_id=7)
    by_name_many = app.enqueue_many("receipt", [{"order_id": 8}, {"order_id": 9}], connection=conn)
    ids = [job_id, *many, by_name, *by_name_many]
    assert len(set(ids)) == 7
    # the app's own connections (a worker's view) see none of it yet
    assert all(app.get_job(i) is None for i in ids)
    if backend.startswith("postgresql"):  # (SQLite: the caller's write transaction holds the one write lock)
        assert app.store.claim("w", ["default"], 10, 30.0) == []
    conn.commit()
    jobs = [app.get_job(i) for i in ids]
    assert all(j is not None and j.state is JobState.QUEUED and j.task == "receipt" for j in jobs)
    assert [j.args for j in jobs if j is not None][:4] == [{"order_id": 42}, {"order_id": 0}, {"order_id": 1},
                                                           {"order_id": 2}]
    assert {j.priority for j in jobs[1:4] if j is not None} == {3}
    assert sorted(c.id for c in app.store.claim("w", ["default"], 10, 30.0)) == sorted(ids)


def test_get_job_on_the_callers_connection_sees_what_its_transaction_enqueued(
    make_app: Callable[..., Tether], caller: Callable[[], Any], backend: str,
) -> None:
    """``get_job(connection=...)`` reads inside the caller's transaction, as
    ``enqueue(connection=...)`` writes: the job is found before the commit
    (the app's own connections see nothing yet), with its attempts; a
    rollback takes it from both."""
    app = make_app()
    receipt = _tasks(app)
    (done,) = app.store.enqueue([NewJob(task="receipt", args_json='{"order_id": 0}')])
    (claimed,) = app.store.claim("w", ["default"], 1, 30.0)
    assert app.store.complete("w", [(claimed.id, claimed.attempt, None)]) == {done}
    conn = caller()
    # rows as dicts: the caller's row factory is theirs, and tether's statements must not depend on it
    if backend == "sqlite":
        conn.row_factory = lambda cur, row: {d[0]: v for d, v in zip(cur.description, row, strict=True)}
    else:
        conn.row_factory = psycopg.rows.dict_row
    job_id = receipt.using(connection=conn).enqueue(order_id=5)
    mine = app.get_job(job_id, connection=conn)
    assert mine is not None and mine.state is JobState.QUEUED and mine.args == {"order_id": 5}
    assert app.get_job(job_id) is None  # not committed: another connection sees nothing
    finished = app.get_job(done, connection=conn)  # a committed job, its attempts audit too
    assert finished is not None and finished.state is JobState.SUCCEEDED
    assert [(a.attempt, a.outcome) for a in finished.attempts] == [(1, Outcome.SUCCEEDED)]
    assert app.get_job(10**9, connection=conn) is None
    if backend != "sqlite":  # a connection that loads jsonb as text (as Django's do) still gives JSON back
        from psycopg.types.string import TextLoader

        conn.adapters.register_loader("jsonb", TextLoader)
        again = app.get_job(job_id, connection=conn)
        assert again is not None and again.args == {"order_id": 5}
    conn.rollback()
    assert app.get_job(job_id, connection=conn) is None and app.get_job(job_id) is None
    with pytest.raises(ConfigError):
        app.get_job(job_id, connection=object())


def test_a_rollback_takes_the_job_with_it(
    make_app: Callable[..., Tether], caller: Callable[[], Any], backend: str, db_url: str,
) -> None:
    app = make_app()
    receipt = _tasks(app)
    conn = caller()
    conn.execute(f"INSERT INTO {_orders(backend, db_url)} (id) VALUES ({_param(backend)})", (1,))
    job_id = receipt.using(connection=conn).enqueue(order_id=1)
    keyed = receipt.using(connection=conn, dedup_key="order-1").enqueue(order_id=1)
    assert receipt.using(connection=conn, dedup_key="order-1").enqueue(order_id=1) == keyed  # same transaction
    conn.rollback()
    assert app.get_job(job_id) is None and app.get_job(keyed) is None
    assert app.store.stats().counts == {}
    # the key is free again: the rolled-back job never held it
    assert app.get_task("receipt").using(dedup_key="order-1").enqueue(order_id=1) != keyed
    check = caller()
    assert check.execute(f"SELECT count(*) FROM {_orders(backend, db_url)}").fetchone()[0] == 0


def test_postgres_notify_is_sent_at_commit_and_never_after_a_rollback(
    make_app: Callable[..., Tether], caller: Callable[[], Any], backend: str, db_url: str,
) -> None:
    if not backend.startswith("postgresql"):
        pytest.skip("NOTIFY is PostgreSQL's")
    app = make_app()
    receipt = _tasks(app)
    channel = f"tether_{parse_database_url(db_url).schema}"
    with psycopg.connect(PG_URL, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel}"')
        conn = caller()
        receipt.using(connection=conn).enqueue(order_id=1)
        assert list(listener.notifies(timeout=0.3)) == []  # not before the commit
        conn.rollback()
        assert list(listener.notifies(timeout=0.3)) == []  # nor after a rollback
        receipt.using(connection=conn).enqueue(order_id=2)
        assert list(listener.notifies(timeout=0.3)) == []
        conn.commit()
        notes = list(listener.notifies(timeout=2.0, stop_after=1))
        assert [n.payload for n in notes] == ["default"]


def test_psycopg_async_connection_with_enqueue_async_and_many_async(
    make_app: Callable[..., Tether], backend: str, db_url: str,
) -> None:
    if not backend.startswith("postgresql"):
        pytest.skip("an async driver connection is psycopg's")
    app = make_app()
    receipt = _tasks(app)

    async def produce() -> tuple[list[int], list[int]]:
        async with await psycopg.AsyncConnection.connect(PG_URL) as conn:
            kept = [await receipt.using(connection=conn).enqueue_async(order_id=1),
                    *await receipt.using(connection=conn).enqueue_many_async([{"order_id": 2}, {"order_id": 3}])]
            assert all(app.get_job(i) is None for i in kept)
            await conn.commit()
            dropped = [await receipt.using(connection=conn).enqueue_async(order_id=4)]
            await conn.rollback()
            return kept, dropped

    kept, dropped = asyncio.run(produce())
    assert all(j is not None and j.state is JobState.QUEUED for j in map(app.get_job, kept))
    assert app.get_job(dropped[0]) is None


def test_a_sync_connection_in_enqueue_async_is_used_in_place(
    make_app: Callable[..., Tether], caller: Callable[[], Any],
) -> None:
    app = make_app()
    receipt = _tasks(app)
    conn = caller()
    job_id = asyncio.run(receipt.using(connection=conn).enqueue_async(order_id=5))
    assert app.get_job(job_id) is None
    conn.commit()
    assert app.get_job(job_id) is not None


def _engine_url(backend: str, db_url: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{_sqlite_path(db_url)}"
    return PG_URL.replace("postgresql://", "postgresql+psycopg://", 1)


def test_sqlalchemy_connection_and_session(make_app: Callable[..., Tether], backend: str, db_url: str) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    app = make_app()
    receipt = _tasks(app)
    engine = sqlalchemy.create_engine(_engine_url(backend, db_url))
    try:
        with engine.connect() as conn:
            committed = receipt.using(connection=conn).enqueue(order_id=1)
            assert app.get_job(committed) is None
            conn.commit()
            rolled = receipt.using(connection=conn).enqueue_many([{"order_id": 2}])
            conn.rollback()
        with Session(engine) as session:
            in_session = app.enqueue("receipt", connection=session, order_id=3)
            assert app.get_job(in_session) is None
            session.commit()
            dropped = receipt.using(connection=session).enqueue(order_id=4)
            session.rollback()
        closed = engine.connect()
        closed.close()
        with pytest.raises(ConfigError, match="closed"):
            receipt.using(connection=closed).enqueue(order_id=5)
    finally:
        engine.dispose()
    # (SQLite hands a rolled-back id out again: look at what the jobs carry)
    assert sorted(j.args["order_id"] for j in app.store.list_jobs()) == [1, 3]
    assert {committed, in_session} <= {j.id for j in app.store.list_jobs()}
    assert rolled and dropped


def test_sqlalchemy_async_connection_and_session(make_app: Callable[..., Tether], backend: str) -> None:
    if not backend.startswith("postgresql"):
        pytest.skip("an async driver connection is psycopg's")
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("greenlet")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    app = make_app()
    receipt = _tasks(app)

    async def produce() -> tuple[int, int, int]:
        engine = create_async_engine(_engine_url("postgresql", ""))
        try:
            async with engine.connect() as conn:
                kept = await receipt.using(connection=conn).enqueue_async(order_id=1)
                assert app.get_job(kept) is None
                await conn.commit()
            async with AsyncSession(engine) as session:
                in_session = await receipt.using(connection=session).enqueue_async(order_id=2)
                await session.commit()
                dropped = await receipt.using(connection=session).enqueue_async(order_id=3)
                await session.rollback()
            return kept, in_session, dropped
        finally:
            await engine.dispose()

    _kept, _in_session, dropped = asyncio.run(produce())
    assert sorted(j.args["order_id"] for j in app.store.list_jobs()) == [1, 2]
    assert dropped not in {j.id for j in app.store.list_jobs()}


# -- wrong connections ------------------------------------------------------------------------


def test_a_connection_of_the_other_backend_is_refused(
    make_app: Callable[..., Tether], backend: str, tmp_path: Path,
) -> None:
    app = make_app()
    receipt = _tasks(app)
    if backend == "sqlite":
        with psycopg.connect(PG_URL) as other, pytest.raises(ConfigError, match=r"SQLite file .*pass a sqlite3"):
            receipt.using(connection=other).enqueue(order_id=1)
    else:
        other = sqlite3.connect(tmp_path / "x.db")
        with pytest.raises(ConfigError, match="got a sqlite3 connection, but this app's jobs live in PostgreSQL"):
            receipt.using(connection=other).enqueue(order_id=1)
        other.close()
    with pytest.raises(ConfigError, match=r"got builtins\.object"):
        receipt.using(connection=object()).enqueue(order_id=1)


def test_a_connection_to_another_database_is_refused_naming_both(
    make_app: Callable[..., Tether], backend: str, db_url: str, tmp_path: Path,
) -> None:
    app = make_app()
    receipt = _tasks(app)
    if backend == "sqlite":
        other = sqlite3.connect(tmp_path / "other.db")
        with pytest.raises(ConfigError, match=r"other\.db.*tether\.db.*tether migrate"):
            receipt.using(connection=other).enqueue(order_id=1)
        other.close()
        return
    with psycopg.connect(PG_URL.rsplit("/", 1)[0] + "/postgres") as other:
        with pytest.raises(ConfigError, match=r"database 'postgres'.*database 'test'.*tether migrate"):
            receipt.using(connection=other).enqueue(order_id=1)
        other.rollback()


def test_missing_tables_name_the_database_and_tether_migrate(
    backend: str, db_url: str, caller: Callable[[], Any],
) -> None:
    app = Tether(db_url)  # not migrated
    try:
        receipt = _tasks(app)
        conn = caller()
        where = "tether.db" if backend == "sqlite" else "database 'test'"
        with pytest.raises(SchemaMissing, match=f"{where}.*tether migrate"):
            receipt.using(connection=conn).enqueue(order_id=1)
        conn.rollback()
    finally:
        app.close()


def test_a_closed_connection_is_refused(
    make_app: Callable[..., Tether], caller: Callable[[], Any], backend: str,
) -> None:
    app = make_app()
    receipt = _tasks(app)
    conn = caller()
    conn.close()
    with pytest.raises(ConfigError, match="closed"):
        receipt.using(connection=conn).enqueue(order_id=1)
    if backend.startswith("postgresql"):

        async def closed_async() -> None:
            aconn = await psycopg.AsyncConnection.connect(PG_URL)
            await aconn.close()
            await receipt.using(connection=aconn).enqueue_async(order_id=1)

        with pytest.raises(ConfigError, match="closed"):
            asyncio.run(closed_async())


def test_postgres_refuses_an_async_connection_in_sync_calls_and_a_failed_transaction(
    make_app: Callable[..., Tether], caller: Callable[[], Any], backend: str,
) -> None:
    if not backend.startswith("postgresql"):
        pytest.skip("psycopg's")
    app = make_app()
    receipt = _tasks(app)

    async def async_in_sync() -> None:
        async with await psycopg.AsyncConnection.connect(PG_URL) as aconn:
            receipt.using(connection=aconn).enqueue(order_id=1)

    with pytest.raises(ConfigError, match="use enqueue_async"):
        asyncio.run(async_in_sync())
    conn = caller()
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1 / 0")
    with pytest.raises(ConfigError, match=r"failed transaction.*roll it back"):
        receipt.using(connection=conn).enqueue(order_id=1)


def test_a_tether_server_app_refuses_connection(caller: Callable[[], Any]) -> None:
    app = Tether("http://127.0.0.1:9", token="t")
    try:
        receipt = _tasks(app)
        with pytest.raises(ConfigError, match="tether server"):
            receipt.using(connection=caller()).enqueue(order_id=1)
        with pytest.raises(ConfigError, match="tether server"):
            asyncio.run(receipt.using(connection=caller()).enqueue_async(order_id=1))
        with pytest.raises(ConfigError, match="tether server"):
            app.get_job(1, connection=caller())
    finally:
        app.close()
