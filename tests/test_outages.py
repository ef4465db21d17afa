"""Outages met mid-life, against a real PostgreSQL through a TCP proxy that
resets every connection.

A progress report the store cannot take (its connection cut) is a missed
heartbeat, not the handler's failure. Found by a new user's walkthrough: a
2 s restart of the database's path (or of a tether server) failed every
running job that reported progress, an attempt spent each time. A real
worker, its connections reset mid-job.

A pooled connection the outage ended while idle is dropped before use, so
the next call after it succeeds; one cut in use raises DatabaseUnavailable, a
ConnectionError as the README promises (it raised psycopg's
OperationalError)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tether import DatabaseUnavailable, JobContext, JobState, Tether
from tether.chaos.proxy import TCPProxy

from .test_worker import is_final, running, wait_job

PG_ONLY = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
STEPS = 30


@pytest.fixture
def proxied(db_url: str, make_app: Callable[..., Tether]) -> Iterator[tuple[Tether, TCPProxy]]:
    """An app whose every connection goes through a TCP proxy (the schema
    migrated by a direct one, ``make_app``'s)."""
    make_app()
    parts = urlsplit(db_url)
    proxy = TCPProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    app = Tether(db_url.replace(parts.netloc, f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"))
    try:
        yield app, proxy
    finally:
        app.close()
        proxy.close()


@PG_ONLY
@pytest.mark.parametrize("kind", ["def", "async"])
def test_a_cut_connection_under_progress_costs_the_job_nothing(
    backend: str, make_app: Callable[..., Tether], proxied: tuple[Tether, TCPProxy], kind: str,
) -> None:
    direct = make_app()  # reads the job past the proxy
    app, proxy = proxied  # the default timers: a 30 s lease outlives the cut by far
    halfway = threading.Event()

    if kind == "def":
        @app.task(name="long", max_attempts=3)
        def long(ctx: JobContext) -> int:
            for i in range(STEPS):
                ctx.progress(i / STEPS, f"step {i}")
                if i == STEPS // 2:
                    halfway.set()
                time.sleep(0.05)
            return ctx.attempt
    else:
        @app.task(name="long", max_attempts=3)
        async def long(ctx: JobContext) -> int:  # type: ignore[misc]
            for i in range(STEPS):
                ctx.progress(i / STEPS, f"step {i}")
                if i == STEPS // 2:
                    halfway.set()
                await asyncio.sleep(0.05)
            return ctx.attempt

    job_id = app.get_task("long").enqueue()  # (before the cut)
    with running(app):
        assert halfway.wait(20)
        proxy.reset()  # every connection the worker holds is cut; new ones go through
        job = wait_job(direct, job_id, is_final, timeout=30)
    assert job.state is JobState.SUCCEEDED, job
    assert job.result == 1 and job.attempts_used == 1, job  # the first attempt, unharmed


@PG_ONLY
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_producer_after_an_outage_gets_a_good_connection(
    backend: str, proxied: tuple[Tether, TCPProxy], kind: str,
) -> None:
    """Every pooled connection is cut while idle (a database restart, a
    network reset): the next call gets a good one, not the cut one's error."""
    app, proxy = proxied

    @app.task(name="noop")
    def noop(ctx: JobContext, i: int) -> None: ...

    if kind == "sync":
        ids = [noop.enqueue(i=1)]
        proxy.reset()
        time.sleep(0.2)  # the resets reach the pool's sockets
        ids += [noop.enqueue(i=2), noop.enqueue(i=3)]
    else:  # one loop throughout: its own idle connections are the ones cut
        async def run() -> list[int]:
            first = await noop.enqueue_async(i=1)
            proxy.reset()
            await asyncio.sleep(0.2)
            return [first, await noop.enqueue_async(i=2), await noop.enqueue_async(i=3)]

        ids = asyncio.run(run())
    assert ids == sorted(set(ids))


@PG_ONLY
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_connection_cut_mid_use_is_a_connection_error(
    backend: str, proxied: tuple[Tether, TCPProxy], kind: str,
) -> None:
    """The README: catch ConnectionError to retry an outage. A connection lost
    in use raises DatabaseUnavailable (one), the driver's error its cause;
    it raised psycopg's OperationalError, which is not one."""
    app, proxy = proxied
    store: Any = app.store
    caught: BaseException | None = None
    if kind == "sync":
        try:
            with store.pool.connection() as conn:  # what every sync call runs in
                proxy.reset()
                time.sleep(0.2)
                conn.execute("SELECT 1")
        except BaseException as exc:  # checked below
            caught = exc
    else:
        async def run() -> BaseException | None:
            try:
                async with store.async_connections.connection() as conn:  # every async call's
                    proxy.reset()
                    await asyncio.sleep(0.2)
                    await conn.execute("SELECT 1")
            except BaseException as exc:  # checked below
                return exc
            return None

        caught = asyncio.run(run())
    assert isinstance(caught, ConnectionError) and isinstance(caught, DatabaseUnavailable), repr(caught)
    assert "lost PostgreSQL at" in str(caught) and caught.__cause__ is not None


@PG_ONLY
def test_a_call_waiting_through_a_long_outage_gets_a_connection_once_the_server_answers(
    proxied: tuple[Tether, TCPProxy],
) -> None:
    """An outage longer than the pool's reconnect timeout (a slow failover, a
    restart): the pool gives up re-opening the connections it lost, and a call
    already waiting for one was never served when the server came back
    (psycopg_pool grows only for a new request), so it failed at its full pool
    timeout with the server answering for seconds. It now gets a connection
    once the server answers, within its timeout."""
    from tether.store.postgres.connect import POOL_TIMEOUT, RECONNECT_TIMEOUT

    app, proxy = proxied

    @app.task(name="noop")
    def noop(ctx: JobContext) -> None: ...

    jid = noop.enqueue()
    proxy.refuse()
    proxy.reset()  # every pooled connection cut, and no new one can open
    time.sleep(0.2)  # (the cut reaches the client's sockets: they are dropped, not used)
    got: list[Any] = []
    call = threading.Thread(target=lambda: got.append(_outcome(lambda: app.get_job(jid))))
    call.start()
    # heal after the pool has given up re-opening (RECONNECT_TIMEOUT) and well
    # before the waiting call's own timeout
    time.sleep(RECONNECT_TIMEOUT + (POOL_TIMEOUT - RECONNECT_TIMEOUT) / 3)
    proxy.heal()
    call.join(POOL_TIMEOUT + 5)
    assert len(got) == 1 and getattr(got[0], "id", None) == jid, got


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        return exc
