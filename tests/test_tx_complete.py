"""Fenced completion in the handler's transaction (issue 19, part 2), on SQLite
and PostgreSQL: the store's ``transaction`` (sync and async), and a real
worker running handlers that use ``ctx.transaction()``.

The store's promise: the block's writes and the attempt's success (fenced on
id, attempt, worker and running, with its audit row) commit together or not at
all. A zombie attempt, even of the same worker id (the ABA case), commits
nothing and gets ``StaleAttempt``; an exception in the block leaves no write
behind. Each test compares the whole job record before and after a refusal.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tether import ConfigError, InvalidTransition, JobContext, JobState, StaleAttempt, Tether
from tether.config import parse_database_url
from tether.model import ClaimedJob, Outcome
from tether.store import Store, open_store

from .conftest import BACKENDS, PG_URL, PGBOUNCER, TEST_TOKEN, backend_param, served, take_from
from .test_conformance import TTL, W, claim_one, enqueue_one, finished_attempts, get, sec, start_job
from .test_worker import FAST, is_final, running, wait_job


@pytest.fixture(params=[*BACKENDS, PGBOUNCER])
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite, PostgreSQL, and PostgreSQL through PgBouncer in transaction mode."""
    return backend_param(request)


class Effects:
    """An ``effects`` table beside tether's, in the same database, and the SQL a
    handler's connection runs on it (the backend's own parameter style)."""

    def __init__(self, url: str) -> None:
        dsn = parse_database_url(url)
        self.sqlite = dsn.backend == "sqlite"
        self.table = "effects" if self.sqlite else f'"{dsn.schema}".effects'
        self.insert = f"INSERT INTO {self.table} (job_id, attempt) VALUES " + ("(?, ?)" if self.sqlite else "(%s, %s)")
        self._url = dsn.url if self.sqlite else PG_URL
        with self._connect() as conn:
            if not self.sqlite:
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{dsn.schema}"')
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (job_id bigint NOT NULL, attempt int NOT NULL)")

    def _connect(self) -> Any:
        return sqlite3.connect(self._url) if self.sqlite else psycopg.connect(self._url)

    def rows(self) -> list[tuple[int, int]]:
        conn = self._connect()
        try:
            return sorted(tuple(r) for r in conn.execute(f"SELECT job_id, attempt FROM {self.table}").fetchall())
        finally:
            conn.close()


@pytest.fixture
def effects(db_url: str, store: Store) -> Effects:
    return Effects(db_url)


def test_the_blocks_writes_and_the_fenced_success_commit_together(store: Store, effects: Effects) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    with store.transaction(W, c.id, c.attempt) as conn:
        conn.execute(effects.insert, (c.id, c.attempt))  # type: ignore[attr-defined]
        assert get(store, c.id).state is JobState.RUNNING  # nothing visible before the commit
        assert effects.rows() == []
    job = get(store, c.id)
    assert (job.state, job.result, job.locked_by, job.lease_until) == (JobState.SUCCEEDED, None, None, None)
    assert finished_attempts(job) == [(1, Outcome.SUCCEEDED, W)]
    assert effects.rows() == [(c.id, 1)]
    # the result comes after, matched to that success only
    assert store.set_result(W, c.id, 1, '{"charged": 10}')
    assert not store.set_result(W, c.id, 2, '"other attempt"')
    assert not store.set_result("someone-else", c.id, 1, '"other worker"')
    assert get(store, c.id).result == {"charged": 10}
    # once succeeded, a second transaction for the attempt commits nothing
    with pytest.raises(StaleAttempt), store.transaction(W, c.id, c.attempt) as conn:
        conn.execute(effects.insert, (c.id, c.attempt))  # type: ignore[attr-defined]
    assert effects.rows() == [(c.id, 1)]


def test_aba_the_old_attempts_block_commits_nothing_when_its_own_worker_claimed_again(
    store: Store, effects: Effects,
) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, max_attempts=5)
    first = claim_one(store, t0, worker=W)
    store.reap(100, now=t0 + sec(TTL + 1))
    second = claim_one(store, t0 + sec(TTL + 2), worker=W)  # the very same worker id
    assert (second.id, second.attempt) == (job_id, 2)
    before = get(store, job_id)
    with pytest.raises(StaleAttempt) as info, store.transaction(W, job_id, first.attempt) as conn:
        conn.execute(effects.insert, (job_id, first.attempt))  # type: ignore[attr-defined]
    assert info.value.op == "transaction"
    assert effects.rows() == []
    assert get(store, job_id) == before  # attempt 2 untouched, still running
    with store.transaction(W, job_id, second.attempt) as conn:
        conn.execute(effects.insert, (job_id, second.attempt))  # type: ignore[attr-defined]
    assert effects.rows() == [(job_id, 2)]
    assert finished_attempts(get(store, job_id)) == [(1, Outcome.LEASE_EXPIRED, W), (2, Outcome.SUCCEEDED, W)]


def test_another_worker_or_a_finished_job_commits_nothing(store: Store, effects: Effects) -> None:
    c = start_job(store, store.db_now())
    before = get(store, c.id)
    with pytest.raises(StaleAttempt), store.transaction("host-z:1:other", c.id, c.attempt) as conn:
        conn.execute(effects.insert, (c.id, 99))  # type: ignore[attr-defined]
    assert effects.rows() == [] and get(store, c.id) == before
    store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", retry=False)
    with pytest.raises(StaleAttempt), store.transaction(W, c.id, c.attempt) as conn:
        conn.execute(effects.insert, (c.id, c.attempt))  # type: ignore[attr-defined]
    assert effects.rows() == [] and get(store, c.id).state is JobState.DEAD


def test_an_exception_in_the_block_leaves_no_partial_writes(store: Store, effects: Effects) -> None:
    c = start_job(store, store.db_now())
    before = get(store, c.id)
    with pytest.raises(ZeroDivisionError), store.transaction(W, c.id, c.attempt) as conn:
        conn.execute(effects.insert, (c.id, c.attempt))  # type: ignore[attr-defined]
        conn.execute(effects.insert, (c.id, c.attempt))  # type: ignore[attr-defined]
        _ = 1 / 0
    assert effects.rows() == []
    assert get(store, c.id) == before  # still running, the lease its own, nothing written
    # and the attempt can still end normally
    assert store.complete(W, [(c.id, c.attempt, None)]) == {c.id}


def test_async_transaction_commits_fences_and_rolls_back(store: Store, effects: Effects) -> None:
    t0 = store.db_now()
    ok, stale, broken = (start_job(store, t0, queue=q) for q in ("a", "b", "c"))
    store.fail(W, stale.id, stale.attempt, outcome=Outcome.FAILED, error="moved on", retry=True)
    stale_before, broken_before = get(store, stale.id), get(store, broken.id)

    async def main() -> None:
        async with store.transaction_async(W, ok.id, ok.attempt) as conn:
            await _run(conn, effects.insert, (ok.id, ok.attempt))
        with pytest.raises(StaleAttempt):
            async with store.transaction_async(W, stale.id, stale.attempt) as conn:
                await _run(conn, effects.insert, (stale.id, stale.attempt))
        with pytest.raises(KeyError):
            async with store.transaction_async(W, broken.id, broken.attempt) as conn:
                await _run(conn, effects.insert, (broken.id, broken.attempt))
                raise KeyError("in the block")

    asyncio.run(main())
    assert effects.rows() == [(ok.id, 1)]
    assert get(store, ok.id).state is JobState.SUCCEEDED
    assert get(store, stale.id) == stale_before and get(store, broken.id) == broken_before


async def _run(conn: Any, sql: str, params: tuple[Any, ...]) -> None:
    if isinstance(conn, psycopg.AsyncConnection):
        await conn.execute(sql, params)
    else:  # sqlite3: no async driver; the block runs it where it stands
        conn.execute(sql, params)


def test_a_tether_server_store_refuses_transactions(db_url: str, backend: str) -> None:
    with served(db_url) as url:
        remote = open_store(url, token=TEST_TOKEN)
        try:
            with pytest.raises(ConfigError, match="tether server"):
                remote.transaction(W, 1, 1)
            with pytest.raises(ConfigError, match="tether server"):
                remote.transaction_async(W, 1, 1)
        finally:
            remote.close()


# -- a real worker -------------------------------------------------------------------------------


@pytest.fixture
def app_effects(make_app: Callable[..., Tether], db_url: str) -> Iterator[tuple[Tether, Effects]]:
    app = make_app(**FAST)
    yield app, Effects(db_url)


def _tx_tasks(app: Tether, effects: Effects) -> None:
    @app.task(name="charge")
    def charge(ctx: JobContext, amount: int, fail_in_block: bool = False, twice: bool = False) -> dict[str, Any]:
        with ctx.transaction() as conn:
            conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
            if fail_in_block:
                raise RuntimeError("declined")
        second = None
        if twice:
            try:
                ctx.transaction().__enter__()
            except InvalidTransition as exc:
                second = str(exc)
        return {"charged": amount, "second": second}

    @app.task(name="charge_async")
    async def charge_async(ctx: JobContext, amount: int) -> int:
        async with ctx.transaction() as conn:
            await _run(conn, effects.insert, (ctx.job_id, ctx.attempt))
        return amount

    @app.task(name="no_result")
    def no_result(ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute(effects.insert, (ctx.job_id, ctx.attempt))

    @app.task(name="blocking_with_in_async")
    async def blocking_with_in_async(ctx: JobContext) -> None:
        with ctx.transaction():
            pass


def test_a_worker_runs_handlers_that_commit_their_writes_with_their_success(
    app_effects: tuple[Tether, Effects],
) -> None:
    app, effects = app_effects
    _tx_tasks(app, effects)
    sync_id = app.enqueue("charge", amount=10, twice=True)
    async_id = app.enqueue("charge_async", amount=20)
    none_id = app.enqueue("no_result")
    failing_id = app.get_task("charge").using(max_attempts=1).enqueue(amount=30, fail_in_block=True)
    misuse_id = app.get_task("blocking_with_in_async").using(max_attempts=1).enqueue()
    with running(app) as w:
        jobs = {i: wait_job(app, i, is_final) for i in (sync_id, async_id, none_id, failing_id, misuse_id)}
        wait_job(app, sync_id, lambda j: j.result is not None)
        wait_job(app, async_id, lambda j: j.result is not None)
    sync_job, async_job = get(app.store, sync_id), get(app.store, async_id)
    assert sync_job.state is JobState.SUCCEEDED
    assert sync_job.result["charged"] == 10
    assert "once per attempt" in sync_job.result["second"]
    assert (async_job.state, async_job.result) == (JobState.SUCCEEDED, 20)
    assert (jobs[none_id].state, jobs[none_id].result) == (JobState.SUCCEEDED, None)
    for job_id in (sync_id, async_id, none_id):  # one success, written once (by the transaction)
        assert finished_attempts(get(app.store, job_id)) == [(1, Outcome.SUCCEEDED, w.id)]
    assert jobs[failing_id].state is JobState.DEAD and "declined" in (jobs[failing_id].last_error or "")
    assert jobs[misuse_id].state is JobState.DEAD and "async with" in (jobs[misuse_id].last_error or "")
    assert effects.rows() == sorted([(sync_id, 1), (async_id, 1), (none_id, 1)])
    assert w.state.counts["succeeded"] == 3
    assert w.state.counts["stale_reports"] == 0 and w.state.counts["lost"] == 0


def test_a_context_without_a_worker_says_so() -> None:
    job = ClaimedJob(1, 1, "t", {}, "default", 0, 1, 30.0, None, None, None, None)  # type: ignore[arg-type]
    ctx = JobContext(job, "w", lambda *a: False)
    with pytest.raises(ConfigError, match="no worker"):
        ctx.transaction()


def test_a_worker_whose_attempt_was_handed_on_commits_nothing_aba(
    app_effects: tuple[Tether, Effects], backend: str,
) -> None:
    """A real worker's attempt loses the job while its handler is in (PostgreSQL)
    or about to open (SQLite: the block holds the one write lock, so nothing
    can move the job during it) its transaction; the job is re-claimed under
    the very same worker id. The old attempt's block commits nothing."""
    app, effects = app_effects
    started, proceed = threading.Event(), threading.Event()
    in_block = backend.startswith("postgresql")

    @app.task(name="slow_charge")
    def slow_charge(ctx: JobContext) -> str:
        if not in_block:
            started.set()
            proceed.wait(10)
        with ctx.transaction() as conn:
            conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
            if in_block:
                started.set()
                proceed.wait(10)
        return "zombie"

    job_id = app.enqueue("slow_charge")
    with running(app, concurrency=1) as w:
        assert started.wait(10)
        store = app.store
        take_from(store, w.id, job_id)
        (again,) = store.claim(w.id, ["default"], 1, 30.0)  # the same worker id, attempt 2
        assert again.attempt == 2
        proceed.set()
        deadline = time.monotonic() + 10
        while w.state.inflight.get(job_id) is not None:  # the worker lets its old attempt go
            assert time.monotonic() < deadline, "the old attempt was never let go"
            time.sleep(0.05)
        assert effects.rows() == []  # the zombie's write never landed
        job = get(store, job_id)
        assert (job.state, job.attempt, job.locked_by) == (JobState.RUNNING, 2, w.id)
        with store.transaction(w.id, job_id, 2) as conn:  # attempt 2 finishes it, once
            conn.execute(effects.insert, (job_id, 2))  # type: ignore[attr-defined]
    assert effects.rows() == [(job_id, 2)]
    assert finished_attempts(get(app.store, job_id)) == [(1, Outcome.LEASE_EXPIRED, w.id), (2, Outcome.SUCCEEDED, w.id)]
    assert w.state.counts["succeeded"] == 0


def test_sqlite_refuses_progress_inside_the_block_at_once(app_effects: tuple[Tether, Effects], backend: str) -> None:
    """The block holds SQLite's one write lock, which a progress report needs:
    refused with the reason, not a 30 s wait for a lock it holds itself. On
    PostgreSQL progress inside the block works (another connection, another row lock)."""
    app, effects = app_effects

    @app.task(name="progress_in_block", max_attempts=1)
    def progress_in_block(ctx: JobContext) -> str:
        with ctx.transaction() as conn:
            conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
            ctx.progress(0.5, "half way")
        return "done"

    job_id = app.enqueue("progress_in_block")
    started = time.monotonic()
    with running(app):
        job = wait_job(app, job_id, is_final)
    assert time.monotonic() - started < 10
    if backend == "sqlite":
        assert job.state is JobState.DEAD and "cannot run inside ctx.transaction()" in (job.last_error or "")
        assert effects.rows() == []
    else:
        assert job.state is JobState.SUCCEEDED and effects.rows() == [(job_id, 1)]


def test_an_async_handler_timed_out_inside_the_block_commits_nothing(app_effects: tuple[Tether, Effects]) -> None:
    app, effects = app_effects

    @app.task(name="slow_async", timeout=0.5, max_attempts=1)
    async def slow_async(ctx: JobContext) -> None:
        async with ctx.transaction() as conn:
            await _run(conn, effects.insert, (ctx.job_id, ctx.attempt))
            await asyncio.sleep(5)

    job_id = app.enqueue("slow_async")
    with running(app) as w:
        job = wait_job(app, job_id, is_final)
    assert job.state is JobState.DEAD and "timed out" in (job.last_error or "")
    assert effects.rows() == []
    assert finished_attempts(job) == [(1, Outcome.TIMED_OUT, w.id)]


def test_after_the_commit_the_job_stays_succeeded_whatever_the_handler_does(
    app_effects: tuple[Tether, Effects], caplog: pytest.LogCaptureFixture,
) -> None:
    """Terminal is final: a raise after the block, or a result that is not
    JSON, is logged; the job stays succeeded (without a result), written once."""
    import logging

    caplog.set_level(logging.WARNING, logger="tether")
    app, effects = app_effects

    @app.task(name="raise_after")
    def raise_after(ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
        raise RuntimeError("after the commit")

    @app.task(name="not_json_after")
    async def not_json_after(ctx: JobContext) -> object:
        async with ctx.transaction() as conn:
            await _run(conn, effects.insert, (ctx.job_id, ctx.attempt))
        return object()

    raised, not_json = app.enqueue("raise_after"), app.enqueue("not_json_after")
    with running(app) as w:
        jobs = [wait_job(app, i, is_final) for i in (raised, not_json)]
        deadline = time.monotonic() + 10
        while w.state.counts["succeeded"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    for job in jobs:
        assert (job.state, job.result, job.attempt) == (JobState.SUCCEEDED, None, 1)
        assert finished_attempts(job) == [(1, Outcome.SUCCEEDED, w.id)]
    assert effects.rows() == sorted([(raised, 1), (not_json, 1)])
    assert "raised after its ctx.transaction() committed" in caplog.text
    assert "stays succeeded without a result" in caplog.text
    assert w.state.counts["stale_reports"] == 0


# -- ctx.transaction_on(): inside a transaction the caller holds on its own connection --------------
def _on_my_connection(ctx: JobContext, effects: Effects, *, before_block: Callable[[], None] | None = None) -> str:
    """What an ORM integration does: its own connection and transaction, the
    attempt's fenced success written into it, then its commit. The
    connection's rows come as dicts: its row factory is the caller's, and
    tether's statements must not depend on it."""
    conn = effects._connect()
    if effects.sqlite:
        conn.row_factory = lambda cur, row: {d[0]: v for d, v in zip(cur.description, row, strict=True)}
    else:
        conn.row_factory = psycopg.rows.dict_row
    try:
        if effects.sqlite:
            conn.execute("BEGIN")  # (psycopg begins at the first statement)
        tx = ctx.transaction_on(conn)
        try:
            with tx:
                if before_block is not None:
                    before_block()
                conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
            conn.commit()
        except BaseException:
            conn.rollback()
            tx.failed()
            raise
        tx.committed()
    finally:
        conn.close()
    return "booked"


def test_transaction_on_the_callers_connection_commits_its_writes_with_the_success(
    app_effects: tuple[Tether, Effects],
) -> None:
    app, effects = app_effects

    @app.task(name="book")
    def book(ctx: JobContext) -> str:
        return _on_my_connection(ctx, effects)

    @app.task(name="book_async")
    async def book_async(ctx: JobContext) -> None:
        async with ctx.transaction_on(object()):  # type: ignore[attr-defined]
            pass

    ids = [app.enqueue("book") for _ in range(3)]
    misuse = app.get_task("book_async").using(max_attempts=1).enqueue()
    with running(app) as w:
        for job_id in ids:
            wait_job(app, job_id, lambda j: j.result is not None)
        assert wait_job(app, misuse, is_final).state is JobState.DEAD
    for job_id in ids:  # one success, written once: by the caller's commit
        job = get(app.store, job_id)
        assert (job.state, job.result) == (JobState.SUCCEEDED, "booked")
        assert finished_attempts(job) == [(1, Outcome.SUCCEEDED, w.id)]
    assert effects.rows() == sorted((i, 1) for i in ids)
    assert w.state.counts["succeeded"] == 3 and w.state.counts["stale_reports"] == 0


def test_transaction_on_binds_its_handle_with_as_and_a_forgotten_committed_is_no_lost_lease(
    app_effects: tuple[Tether, Effects], caplog: pytest.LogCaptureFixture,
) -> None:
    """``with ctx.transaction_on(conn) as tx:`` gave the connection, so
    ``tx.committed()`` raised AttributeError after the commit, the job's result
    was lost and the log blamed a lapsed lease; a handler that forgot
    ``tx.committed()`` got the same false line. Now ``as`` binds the handle,
    and a forgotten call is taken as committed, with a warning that says so."""
    app, effects = app_effects

    def book(ctx: JobContext, say: bool) -> str:
        conn = effects._connect()
        try:
            if effects.sqlite:
                conn.execute("BEGIN")
            with ctx.transaction_on(conn) as tx:
                conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
            conn.commit()
            if say:
                tx.committed()
        finally:
            conn.close()
        return "booked"

    app.task(name="book_as")(book)
    said, unsaid = app.enqueue("book_as", say=True), app.enqueue("book_as", say=False)
    with caplog.at_level(logging.WARNING, logger="tether"), running(app) as w:
        for job_id in (said, unsaid):
            wait_job(app, job_id, lambda j: j.result is not None)
    for job_id in (said, unsaid):
        job = get(app.store, job_id)
        assert (job.state, job.result) == (JobState.SUCCEEDED, "booked")
        assert finished_attempts(job) == [(1, Outcome.SUCCEEDED, w.id)]
    assert effects.rows() == sorted([(said, 1), (unsaid, 1)])
    assert w.state.counts["stale_reports"] == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for m in warned if "without tx.committed() or tx.failed()" in m and f"job {unsaid} " in m]
    assert not [m for m in warned if "refused" in m or "lost" in m], warned


def test_a_shutdown_inside_a_def_handlers_block_lets_it_commit_with_its_result(
    app_effects: tuple[Tether, Effects], caplog: pytest.LogCaptureFixture,
) -> None:
    """A graceful shutdown while a def handler is inside ctx.transaction():
    the worker released the job beside the block. On SQLite the release
    waited for the block's write lock, the block committed the success, the
    release was refused ("lease lapsed", falsely), and the result was dropped
    with the straggler's outcome. The block is now left to end and commit."""
    app, effects = app_effects
    inside = threading.Event()

    @app.task(name="slow_block")
    def slow_block(ctx: JobContext) -> str:
        with ctx.transaction() as conn:
            conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
            inside.set()
            time.sleep(0.6)  # past the shutdown's timeout, well inside the 1.5 s lease (SQLite's beats wait for it)
        return "kept"

    job_id = app.enqueue("slow_block")
    with caplog.at_level(logging.WARNING, logger="tether"), running(app, shutdown_timeout=0.05):
        assert inside.wait(15)
    job = get(app.store, job_id)
    assert (job.state, job.result, job.attempt) == (JobState.SUCCEEDED, "kept", 1)
    assert effects.rows() == [(job_id, 1)]
    assert not [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]


def test_transaction_on_a_stale_attempt_writes_nothing_and_the_job_runs_again(
    app_effects: tuple[Tether, Effects],
) -> None:
    """The attempt loses the job inside the block (here its own worker hands it
    back): the fenced success is refused, the caller rolls back, and the
    block's write never lands; the next attempt writes it once."""
    app, effects = app_effects
    runs: list[int] = []

    @app.task(name="book_once")
    def book_once(ctx: JobContext) -> str:
        runs.append(ctx.attempt)
        first = len(runs) == 1

        def hand_back() -> None:  # (SQLite: before the block's first write takes the write lock)
            if first:
                assert app.store.release(ctx.worker_id, ctx.job_id, ctx.attempt) is JobState.QUEUED

        return _on_my_connection(ctx, effects, before_block=hand_back)

    job_id = app.enqueue("book_once")
    with running(app, concurrency=1) as w:
        job = wait_job(app, job_id, lambda j: j.result is not None)
    assert (job.state, job.result, len(runs)) == (JobState.SUCCEEDED, "booked", 2)
    assert effects.rows() == [(job_id, job.attempt)]  # the stale attempt's write never landed
    assert w.state.counts["succeeded"] == 1


def test_transaction_on_refuses_a_connection_outside_a_transaction(
    app_effects: tuple[Tether, Effects], backend: str,
) -> None:
    app, effects = app_effects
    errors: list[str] = []

    @app.task(name="autocommit")
    def autocommit(ctx: JobContext) -> None:
        conn = effects._connect()
        try:
            if not effects.sqlite:
                conn.autocommit = True
            with pytest.raises(ConfigError, match="transaction of yours") as info, ctx.transaction_on(conn):
                pass
            errors.append(str(info.value))
        finally:
            conn.close()

    job_id = app.enqueue("autocommit")
    with running(app):
        wait_job(app, job_id, is_final)
    assert len(errors) == 1 and effects.rows() == []


def test_transaction_on_takes_an_autocommit_connection_inside_its_transaction_block(
    app_effects: tuple[Tether, Effects], backend: str,
) -> None:
    """psycopg's ``with conn.transaction():`` opens a real transaction on an
    autocommit connection too (the README's example); only autocommit with
    none open would commit the success alone. Before, autocommit alone was
    refused."""
    if "postgresql" not in backend:
        pytest.skip("psycopg's autocommit")
    app, effects = app_effects

    @app.task(name="in_block")
    def in_block(ctx: JobContext) -> str:
        with effects._connect() as conn:
            conn.autocommit = True
            with conn.transaction(), ctx.transaction_on(conn) as tx:
                conn.execute(effects.insert, (ctx.job_id, ctx.attempt))
            tx.committed()
        return "booked"

    job_id = app.enqueue("in_block")
    with running(app):
        job = wait_job(app, job_id, lambda j: j.result is not None)
    assert (job.state, job.result) == (JobState.SUCCEEDED, "booked")
    assert effects.rows() == [(job_id, 1)]
