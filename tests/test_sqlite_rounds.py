"""A worker's rounds on SQLite (``store/sqlite/rounds.py``): run on the event
loop when the write lock is free, on a database thread (waiting their turn,
the loop free meanwhile) when another connection holds it, and again from the
start on a thread when the lock is lost part-way through."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tether.model import NewJob
from tether.store import open_store
from tether.store.sqlite.store import SQLiteStore

W = "w-rounds"
TTL = 30.0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "rounds.sqlite3"


def _store(path: Path, query: str = "") -> SQLiteStore:
    store = open_store(f"sqlite:///{path}{query}")
    assert isinstance(store, SQLiteStore)
    store.migrate()
    return store


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1, thread_name_prefix="tether-db-test") as pool:
        yield pool


def _enqueue(store: SQLiteStore, n: int) -> list[int]:
    return store.enqueue([NewJob(queue="default", task="t", args_json="{}") for _ in range(n)])


def _recording(store: SQLiteStore, name: str) -> list[int]:
    """Record the thread each call of the store's ``name`` runs on."""
    threads: list[int] = []
    real: Callable[..., Any] = getattr(store, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    setattr(store, name, wrapper)
    return threads


def test_a_round_on_a_free_lock_runs_on_the_loop_thread(path: Path, executor: ThreadPoolExecutor) -> None:
    store = _store(path)
    try:
        ids = _enqueue(store, 3)
        threads = _recording(store, "complete_and_claim")

        async def main() -> tuple[set[int], list[Any]]:
            claimed = await store.claim_async(W, ["default"], 2, TTL, executor=executor, tasks=["t"])
            done = [(j.id, j.attempt, None) for j in claimed]
            return await store.complete_and_claim_async(W, done, ["default"], 10, TTL, executor=executor,
                                                        tasks=["t"])

        accepted, claimed = asyncio.run(main())
        assert threads == [threading.get_ident()]  # this (the loop's) thread, not the executor's
        assert len(accepted) == 2 and [j.id for j in claimed] == [i for i in ids if i not in accepted]
        assert {store.get_job(i).state for i in accepted} == {"succeeded"}
    finally:
        store.close()


def test_a_round_waits_on_a_thread_while_another_connection_holds_the_lock(
    path: Path, executor: ThreadPoolExecutor
) -> None:
    store = _store(path)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        ids = _enqueue(store, 2)
        threads = _recording(store, "claim")
        blocker.execute("BEGIN IMMEDIATE")  # another process's write transaction, say

        async def main() -> tuple[list[Any], int]:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            tick = asyncio.create_task(ticker())
            asyncio.get_running_loop().call_later(0.3, blocker.execute, "COMMIT")
            claimed = await store.claim_async(W, ["default"], 10, TTL, executor=executor, tasks=["t"])
            tick.cancel()
            return claimed, ticks

        claimed, ticks = asyncio.run(main())
        assert sorted(j.id for j in claimed) == ids
        # tried here first, refused at once, then run (and waited) on the executor's thread
        assert threads[0] == threading.get_ident() and len(threads) == 2 and threads[1] != threading.get_ident()
        assert ticks >= 10  # the loop ran while the round waited for the lock
        with store._nowait_conns.use() as conn:
            assert not conn.in_transaction
    finally:
        blocker.close()
        store.close()


def test_a_round_that_loses_the_lock_part_way_is_rolled_back_and_run_again_on_a_thread(
    path: Path, executor: ThreadPoolExecutor
) -> None:
    """A COMMIT that fails busy leaves its transaction open: it is rolled back
    (its insert gone) before the round runs again from the start."""
    store = _store(path)
    tries: list[int] = []

    def call() -> str:
        tries.append(threading.get_ident())
        if len(tries) == 1:
            with store._use() as conn:
                conn.execute("BEGIN IMMEDIATE")
                store._enqueue_in(conn, [NewJob(queue="default", task="first-try", args_json="{}")], None)
                busy = sqlite3.OperationalError("database is locked")
                busy.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
                raise busy
        return "second"

    try:
        assert asyncio.run(store._round(executor, call)) == "second"
        assert tries[0] == threading.get_ident() and tries[1] != threading.get_ident()
        with store._nowait_conns.use() as conn:
            assert not conn.in_transaction
        assert store.list_jobs(task="first-try") == []  # the first try's write was rolled back
    finally:
        store.close()


def test_other_errors_of_a_round_on_the_loop_are_raised_not_retried(path: Path, executor: ThreadPoolExecutor) -> None:
    store = _store(path)
    tries = 0

    def call() -> None:
        nonlocal tries
        tries += 1
        raise sqlite3.OperationalError("no such column: nope")

    try:
        with pytest.raises(sqlite3.OperationalError, match="nope"):
            asyncio.run(store._round(executor, call))
        assert tries == 1
    finally:
        store.close()


def test_with_synchronous_full_rounds_stay_on_the_threads(path: Path, executor: ThreadPoolExecutor) -> None:
    """Every commit waits for the disk then: not on the loop."""
    store = _store(path, "?synchronous=full")
    try:
        _enqueue(store, 1)
        threads = _recording(store, "claim")
        claimed = asyncio.run(store.claim_async(W, ["default"], 10, TTL, executor=executor, tasks=["t"]))
        assert len(claimed) == 1 and threads and threading.get_ident() not in threads
    finally:
        store.close()


def test_the_loops_connection_leaves_checkpoints_to_a_database_thread(
    path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit on the loop that crossed SQLite's autocheckpoint size ran the
    checkpoint there (up to 10 ms of loop time); the loop's connection does
    not checkpoint, and its rounds send one to a thread every
    CHECKPOINT_CHANGES rows changed, one at a time."""
    from tether.store.sqlite import rounds

    monkeypatch.setattr(rounds, "CHECKPOINT_CHANGES", 3)
    store = _store(path)
    try:
        _enqueue(store, 4)
        threads = _recording(store, "_checkpoint")

        async def main() -> None:
            for _ in range(4):  # each claims one job: a row changed (and a starts row), a checkpoint due
                await store.claim_async(W, ["default"], 1, TTL, executor=executor, tasks=["t"])
            for _ in range(100):
                if store._checkpoint_sent is None:
                    break
                await asyncio.sleep(0.01)

        asyncio.run(main())
        assert threads and threading.get_ident() not in threads  # on the executor's thread, never the loop's
        assert len(threads) <= 4 and store._checkpoint_sent is None
        with store._nowait_conns.use() as conn:
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        with store._use() as conn:  # the store's other connections keep SQLite's own
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    finally:
        store.close()


def test_a_checkpoint_an_executor_dropped_does_not_stop_the_next(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's database threads drop calls not started at its shutdown; a
    store that outlives the worker (the app's, in a test run or a process
    that starts another worker) still checkpoints once the dropped one is
    stale."""
    from tether.store.sqlite import rounds

    monkeypatch.setattr(rounds, "CHECKPOINT_CHANGES", 1)
    monkeypatch.setattr(rounds, "CHECKPOINT_STALE", 0.05)
    store = _store(path)
    try:
        _enqueue(store, 2)
        threads = _recording(store, "_checkpoint")
        dropped = ThreadPoolExecutor(1)
        gate = threading.Event()
        dropped.submit(gate.wait, 5)  # busy: the checkpoint queues behind it, then is cancelled
        asyncio.run(store.claim_async(W, ["default"], 1, TTL, executor=dropped, tasks=["t"]))
        dropped.shutdown(wait=False, cancel_futures=True)
        gate.set()
        assert store._checkpoint_sent is not None and threads == []  # sent, never run
        with ThreadPoolExecutor(1) as fresh:
            asyncio.run(asyncio.sleep(0.06))
            asyncio.run(store.claim_async(W, ["default"], 1, TTL, executor=fresh, tasks=["t"]))
        assert len(threads) == 1 and store._checkpoint_sent is None
    finally:
        store.close()
