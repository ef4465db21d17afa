"""``enqueue_async`` and ``enqueue_many_async`` on both backends, and on
PostgreSQL each event loop's own connections: opened by its calls, closed by
``close()``/``aclose()`` whatever became of their loop (ended, running here,
running on another thread), without warnings or connections left on the
server.

Connections are counted on the server (``pg_stat_activity``) by an
``application_name`` of the test's own. A backend exits just after its client
closes, so counts that must drop are polled for, up to a deadline.
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import PoolClosed

from tether import ConfigError, JobContext, JobState, PayloadError, Tether
from tether.events import Event
from tether.model import NewJob
from tether.store import Store

from .conftest import PG_URL
from .test_processes import wait_for
from .test_worker import FAST, running, wait_job


def _tasks(app: Tether) -> Any:
    @app.task(name="add", queue="maths", priority=2)
    def add(ctx: JobContext, a: int, b: int = 0) -> int:
        return a + b

    return add


def test_enqueue_async_and_many_async_insert_like_enqueue_and_fire_enqueued(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    add = _tasks(app)
    seen: list[Event] = []
    app.on("job.enqueued")(seen.append)

    async def produce() -> tuple[int, list[int], int]:
        one = await add.enqueue_async(a=1, b=2)
        many = await add.using(queue="bulk", delay=60).enqueue_many_async([{"a": i} for i in range(5)])
        by_name = await app.get_task("add").using(priority=9).enqueue_async(a=7)
        return one, many, by_name

    one, many, by_name = asyncio.run(produce())
    sync_one = add.enqueue(a=1, b=2)
    mine, theirs = app.get_job(one), app.get_job(sync_one)
    assert mine is not None and theirs is not None
    assert (mine.task, mine.queue, mine.priority, mine.args, mine.state, mine.max_attempts) == (
        theirs.task, theirs.queue, theirs.priority, theirs.args, theirs.state, theirs.max_attempts)
    assert len(set(many)) == 5 and many == sorted(many)
    bulk = [app.get_job(i) for i in many]
    assert [(j.queue, j.args) for j in bulk if j is not None] == [("bulk", {"a": i}) for i in range(5)]
    assert all(j is not None and j.run_at > j.created_at for j in bulk)
    assert app.get_job(by_name).priority == 9  # type: ignore[union-attr]
    assert [(e.job_id, e.task, e.queue, e.state) for e in seen] == [
        (one, "add", "maths", JobState.QUEUED), *((i, "add", "bulk", JobState.QUEUED) for i in many),
        (by_name, "add", "maths", JobState.QUEUED), (sync_one, "add", "maths", JobState.QUEUED)]


def test_enqueue_async_refuses_what_enqueue_refuses_and_inserts_nothing(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    add = _tasks(app)

    async def bad_args() -> int:
        return await add.enqueue_async(c=1)

    async def one_key_for_many() -> list[int]:
        return await add.using(dedup_key="k").enqueue_many_async([{"a": 1}, {"a": 2}])

    async def unserializable() -> list[int]:
        return await add.enqueue_many_async([{"a": 1}, {"a": object()}])

    with pytest.raises(PayloadError):
        asyncio.run(bad_args())
    with pytest.raises(ConfigError, match="one dedup_key for many jobs"):
        asyncio.run(one_key_for_many())
    with pytest.raises(PayloadError):
        asyncio.run(unserializable())
    assert app.store.list_jobs() == []


def test_an_async_handler_enqueues_on_the_workers_loop(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    add = _tasks(app)

    @app.task(name="fan_out")
    async def fan_out(ctx: JobContext, n: int) -> list[int]:
        return await add.enqueue_many_async([{"a": i} for i in range(n)]) + [await add.enqueue_async(a=n)]

    jid = fan_out.enqueue(n=3)
    with running(app, queues=["default", "maths"]):
        job = wait_job(app, jid, lambda j: j.state is JobState.SUCCEEDED)
        children = job.result
        assert isinstance(children, list) and len(children) == 4
        for child in children:
            wait_job(app, child, lambda j: j.state is JobState.SUCCEEDED)


def test_two_event_loops_one_after_another_then_close(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    add = _tasks(app)
    first = asyncio.run(add.enqueue_async(a=1))
    second = asyncio.run(add.enqueue_async(a=2))
    assert first != second
    app.close()
    gc.collect()  # finalizers of whatever the loops left run here, where a warning fails the test
    third = asyncio.run(add.enqueue_async(a=3))  # a closed app opens its store again
    assert [app.get_job(j).args for j in (first, second, third)] == [  # type: ignore[union-attr]
        {"a": 1}, {"a": 2}, {"a": 3}]


# -- PostgreSQL: each event loop's connections -------------------------------------------


def connections(name: str) -> int:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0])


def settles(name: str, count: int) -> None:
    wait_for(lambda: connections(name) == count, 10, f"{count} connection(s) named {name}")


#: for the tests of PostgreSQL's connections (each event loop's, and the sync pool's)
postgresql_only = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@pytest.fixture
def named_app(db_url: str) -> Iterator[tuple[Tether, str]]:
    """A migrated app on PostgreSQL whose connections carry a name of their own."""
    name = f"tether_test_{secrets.token_hex(4)}"
    app = Tether(f"{db_url}&application_name={name}")
    app.migrate()
    yield app, name
    app.close()


@postgresql_only
def test_each_loop_opens_its_own_and_an_ended_loops_are_closed(named_app: tuple[Tether, str]) -> None:
    app, name = named_app
    add = _tasks(app)
    settles(name, 1)  # the sync pool's one connection
    asyncio.run(add.enqueue_async(a=1))
    settles(name, 2)  # and the first loop's
    asyncio.run(add.enqueue_async(a=2))
    settles(name, 2)  # the second loop's replaced the ended first loop's
    app.close()
    settles(name, 0)
    gc.collect()


@postgresql_only
def test_a_loop_limited_to_one_round_connection_sends_its_rounds_on_one(named_app: tuple[Tether, str]) -> None:
    """What a worker whose claims carry its successes asks (runtime.run): its
    loop's round statements share one connection; unlimited, two."""
    app, name = named_app
    store = app.store

    async def rounds(limit: int | None) -> None:
        if limit is not None:
            store.round_connections(limit)
        await asyncio.gather(*(store.claim_async("w", ["default"], 1, 30.0) for _ in range(4)))

    asyncio.run(rounds(1))
    settles(name, 1 + 1)  # the sync pool's one, and the loop's one round connection
    asyncio.run(rounds(None))
    settles(name, 1 + 2)  # a new loop: the default, two (the ended loop's one closed)
    app.close()
    settles(name, 0)
    gc.collect()


@postgresql_only
def test_close_called_inside_the_running_loop_returns_and_closes(named_app: tuple[Tether, str]) -> None:
    app, name = named_app
    add = _tasks(app)

    async def main() -> int:
        job_id = await add.enqueue_async(a=1)
        app.close()  # sync, on the loop's own thread
        return job_id

    job_id = asyncio.run(main())
    settles(name, 0)
    assert app.get_job(job_id) is not None
    gc.collect()


@postgresql_only
def test_aclose_closes_this_loops_connections_and_the_sync_pool(named_app: tuple[Tether, str]) -> None:
    app, name = named_app
    add = _tasks(app)

    async def main() -> None:
        await add.enqueue_async(a=1)
        await add.enqueue_async(a=2)
        await app.aclose()

    asyncio.run(main())
    settles(name, 0)
    assert len(app.store.list_jobs()) == 2  # usable again: the store reopens


@postgresql_only
def test_close_from_another_thread_while_the_loop_runs(named_app: tuple[Tether, str]) -> None:
    app, name = named_app
    add = _tasks(app)
    enqueued, closed = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    async def main() -> None:
        await add.enqueue_async(a=1)
        enqueued.set()
        while not closed.is_set():  # the loop keeps running while the other thread closes its connections
            await asyncio.sleep(0.01)

    def loop_thread() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=loop_thread)
    t.start()
    try:
        assert enqueued.wait(10)
        settles(name, 2)
        app.close()  # idle, so closed from here
        settles(name, 0)
    finally:
        closed.set()
        t.join(10)
    assert not t.is_alive() and not errors


@postgresql_only
def test_an_enqueue_blocked_on_a_lock_does_not_hold_up_the_loops_others(named_app: tuple[Tether, str]) -> None:
    """One enqueue blocks (another transaction holds its dedup key); a second,
    concurrent one gets a second connection and goes through. In a second
    loop, after connections of an ended one."""
    app, name = named_app
    add = _tasks(app)
    store: Store = app.store
    asyncio.run(add.enqueue_async(a=0))
    schema = app.dsn.schema
    with psycopg.connect(PG_URL) as holder:  # a transaction: the key stays taken until it ends
        (held,) = holder.execute(
            f'INSERT INTO "{schema}".jobs (queue, task, args, run_at, max_attempts, created_at, dedup_key) '
            "VALUES ('maths', 'add', '{}', now(), 3, now(), 'k') RETURNING id").fetchone() or (None,)

        async def main() -> tuple[list[int], list[int]]:
            blocked = asyncio.ensure_future(store.enqueue_async([NewJob(task="add", args_json="{}", dedup_key="k")]))
            while not await asyncio.to_thread(waiting_on_a_lock, name):
                assert not blocked.done(), blocked
            free = await store.enqueue_async([NewJob(task="add", args_json='{"a": 1}')])
            assert not blocked.done()
            await asyncio.to_thread(holder.commit)  # the key's holder is active: the blocked one gets its id
            return await blocked, free

        blocked_ids, free_ids = asyncio.run(main())
    assert blocked_ids == [held]
    assert free_ids[0] != held
    gc.collect()


def waiting_on_a_lock(name: str) -> bool:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                           "AND wait_event_type = 'Lock'", (name,)).fetchone()
    return row is not None and int(row[0]) > 0


@postgresql_only
def test_a_closed_store_refuses_async_calls_as_sync_ones(named_app: tuple[Tether, str]) -> None:
    app, name = named_app
    store = app.store
    asyncio.run(store.enqueue_async([NewJob(task="add", args_json="{}")]))
    app.close()
    job = NewJob(task="add", args_json="{}")
    with pytest.raises(PoolClosed):
        store.enqueue([job])
    with pytest.raises(PoolClosed):
        asyncio.run(store.enqueue_async([job]))
    settles(name, 0)
