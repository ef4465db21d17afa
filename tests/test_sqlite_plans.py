"""How much a SQLite claim reads: a bounded number of rows however many jobs
wait, in every shape a claim takes (the worker's task list, no task list, a
limited queue), in the NATS sweep's due_unclaimed and in unknown_tasks.

The work is counted in SQLite virtual-machine steps (``set_progress_handler``),
which depend on the plan and the data, not on the machine's speed: a
statement that reads and sorts every queued job takes about ten times the
steps against ten times the backlog. Before these statements were shaped for
tether_jobs_claim_idx's walks, a limited queue's claim took 157 ms against a
backlog of 100,000 jobs, and a claim without a task list 28 ms."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.model import QueueLimits, WorkerInfo
from tether.store import open_store
from tether.store.sqlite.store import SQLiteStore

from .test_conformance import TTL, W, new_job

SMALL, LARGE = 400, 4000
#: allowed growth of the steps from SMALL to LARGE queued jobs (a read of
#: every queued job grows about LARGE / SMALL = 10 times)
GROWTH = 1.3


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    stores: list[SQLiteStore] = []

    def make(backlog: int, *, tasks: int = 1, limited: bool = False) -> SQLiteStore:
        store = open_store(f"sqlite:///{tmp_path / f'b{len(stores)}.db'}")
        assert isinstance(store, SQLiteStore)
        stores.append(store)
        store.migrate()
        store.enqueue([new_job(task=f"t{n % tasks}") for n in range(backlog)])
        if limited:
            store.set_limits(QueueLimits("default", concurrency=1000))
        return store

    yield make
    for store in stores:
        store.close()


def _steps(store: SQLiteStore, name: str, params: dict[str, Any]) -> tuple[int, int]:
    """(VM steps, rows returned) of one named statement, rolled back."""
    conn = store._open()  # a connection of the store's own kind: its pragmas and SQL functions
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    conn.set_progress_handler(tick, 10)
    try:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(store.q[name], params).fetchall()
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return count[0] * 10, len(rows)


def _claim(store: SQLiteStore, tasks: list[str] | None) -> tuple[int, int]:
    name, params = store._claim_params(W, ["default"], 10, TTL, None, tasks)
    return _steps(store, name, params)


@pytest.mark.parametrize(("tasks", "limited", "known"), [
    (1, False, True),  # the worker's claim (it names its tasks)
    (3, False, True),
    (1, False, False),  # Store.claim without tasks (an API caller, a client that sends none)
    (3, False, False),
    (1, True, True),  # a limited queue (app.configure_queue)
    (3, True, True),
    (3, True, False),
], ids=lambda v: str(v))
def test_a_claim_reads_as_much_against_ten_times_the_backlog(make: Any, tasks: int, limited: bool,
                                                             known: bool) -> None:
    names = [f"t{n}" for n in range(tasks)] if known else None
    small, got_small = _claim(make(SMALL, tasks=tasks, limited=limited), names)
    large, got_large = _claim(make(LARGE, tasks=tasks, limited=limited), names)
    assert got_small == got_large == 10
    assert large <= small * GROWTH, f"{small} steps against {SMALL} queued jobs, {large} against {LARGE}"


def test_the_sweeps_due_unclaimed_reads_as_much_against_ten_times_the_backlog(make: Any) -> None:
    params = {"queues": '["default"]', "grace": 0.0, "limit": 50, "now": None}
    small, got_small = _steps(make(SMALL, tasks=2), "due_unclaimed", params)
    large, got_large = _steps(make(LARGE, tasks=2), "due_unclaimed", params)
    assert got_small == got_large == 50
    assert large <= small * GROWTH, f"{small} steps against {SMALL} queued jobs, {large} against {LARGE}"


def test_a_claim_without_tasks_takes_the_best_jobs_of_every_task_in_claim_order(make: Any) -> None:
    """The skip scan finds every task with queued jobs: the claim's order is
    the queue's (priority, then run_at, then id) across all of them."""
    store = make(0)
    ids = store.enqueue([new_job(task="b"), new_job(task="a", priority=5), new_job(task="c"),
                         new_job(task="a"), new_job(task="b", priority=5)])
    claimed = store.claim(W, ["default"], 4, TTL)
    assert [j.id for j in claimed] == [ids[1], ids[4], ids[0], ids[2]]
    assert [j.id for j in store.claim(W, ["default"], 4, TTL)] == [ids[3]]
    assert store.claim(W, ["default"], 4, TTL) == []


def test_a_claim_over_one_keys_backlog_reads_each_of_its_jobs_once(make: Any) -> None:
    """A job with an exclusive key is claimed only as its key's first queued
    job. Looking that first job up once for each of the key's jobs the walk
    passes must be a seek, not a read of the key's whole backlog: before
    migration 0008 the first claim over 4,000 queued jobs of one key took
    4.5 s (the steps grew a hundredfold for ten times the jobs)."""

    def first_claim(backlog: int) -> int:
        store = make(0)
        store.enqueue([new_job(exclusive_key="k") for _ in range(backlog)])
        store.enqueue([new_job() for _ in range(9)])
        steps, got = _claim(store, ["t"])
        assert got == 10  # the key's first job and the nine without a key
        return steps

    small, large = first_claim(SMALL), first_claim(LARGE)
    assert large <= small * 20, f"{small} steps over {SMALL} jobs of one key, {large} over {LARGE}"


def test_unknown_tasks_reads_as_much_against_ten_times_the_backlog_of_known_tasks(make: Any) -> None:
    """unknown_tasks (each worker's minute check, `tether status`, the
    dashboard) finds the (queue, task) pairs by a skip scan and reads only the
    jobs of the pairs no worker knows. It grouped every queued job before."""
    def steps(backlog: int) -> tuple[int, int]:
        store = make(backlog, tasks=3)
        store.enqueue([new_job(task="stray") for _ in range(5)])
        t = store.db_now()
        store.register_worker(WorkerInfo(id="w", host="h", pid=1, proc_start=None, started_at=t, last_seen=t,
                                         queues=["default"], concurrency=10, tasks=["t0", "t1", "t2"]))
        assert [(u.task, u.jobs) for u in store.unknown_tasks()] == [("stray", 5)]
        return _steps(store, "unknown_tasks", {"since": 60.0, "now": None})

    (small, got_small), (large, got_large) = steps(SMALL), steps(LARGE)
    assert got_small == got_large == 1
    assert large <= small * GROWTH, f"{small} steps against {SMALL} queued jobs, {large} against {LARGE}"
