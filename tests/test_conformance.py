"""The store conformance suite: every operation and every fence, on every backend.

Each test runs against a real SQLite file and a real PostgreSQL schema, the
same schema through PgBouncer in transaction pooling mode
(``postgresql-pgbouncer``), and over HTTP against a ``tether server`` in front
of each (``http-sqlite``, ``http-postgresql``: the ``store`` fixture is
parametrized over all five). Nothing sleeps: every
time-dependent call gets ``now=`` from a base of ``store.db_now()`` plus a
timedelta, so "the lease lapsed" is a clock we move, not a wait.

The fence is ``id AND attempt AND locked_by AND state = 'running'``. A refused
write must change *nothing*: the tests compare the whole ``Job`` record
(attempts history included) before and after.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import pytest

from tether.errors import ConfigError, InvalidTransition, JobNotFound, StaleAttempt
from tether.model import (
    Beat,
    ClaimedJob,
    Job,
    JobState,
    NewJob,
    Outcome,
    Reaped,
    WorkerInfo,
)
from tether.store import Store, open_store
from tether.store.buckets import MAX_BUCKET_SECONDS, MAX_BUCKETS

from .conftest import STORE_BACKENDS, backend_param

TTL = 30.0
W = "host-a:111:w1"
W2 = "host-b:222:w2"
UNKNOWN_ID = 987_654_321
# SQLite keeps times as epoch floats; a millisecond is far above its rounding.
TOLERANCE = timedelta(milliseconds=5)

A = TypeVar("A")
B = TypeVar("B")


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


class Rounds:
    """A worker's round-trip operations, called as ``sync`` methods or as the
    ``_async`` forms the worker's event loop awaits (PostgreSQL sends those
    from the loop on connections of their own; the others run the sync
    method on a thread): both must fence and claim alike."""

    def __init__(self, store: Store, mode: str) -> None:
        self.store, self.mode = store, mode

    def claim(self, *args: Any, **kwargs: Any) -> list[ClaimedJob]:
        return self._call("claim", *args, **kwargs)  # type: ignore[no-any-return]

    def complete(self, *args: Any, **kwargs: Any) -> set[int]:
        return self._call("complete", *args, **kwargs)  # type: ignore[no-any-return]

    def complete_and_claim(self, *args: Any, **kwargs: Any) -> tuple[set[int], list[ClaimedJob]]:
        return self._call("complete_and_claim", *args, **kwargs)  # type: ignore[no-any-return]

    def claim_ids(self, *args: Any, **kwargs: Any) -> list[ClaimedJob]:
        return self._call("claim_ids", *args, **kwargs)  # type: ignore[no-any-return]

    def complete_and_claim_ids(self, *args: Any, **kwargs: Any) -> tuple[set[int], list[ClaimedJob]]:
        return self._call("complete_and_claim_ids", *args, **kwargs)  # type: ignore[no-any-return]

    def _call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        if self.mode == "sync":
            return getattr(self.store, op)(*args, **kwargs)
        with ThreadPoolExecutor(max_workers=1) as pool:
            return asyncio.run(getattr(self.store, f"{op}_async")(*args, executor=pool, **kwargs))


@pytest.fixture(params=["sync", "async"])
def rounds(store: Store, request: pytest.FixtureRequest) -> Rounds:
    return Rounds(store, request.param)


# -- helpers --------------------------------------------------------------------


def sec(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def new_job(task: str = "t", args: dict[str, Any] | None = None, **options: Any) -> NewJob:
    return NewJob(task=task, args_json=json.dumps(args if args is not None else {}), **options)


def enqueue_one(store: Store, now: datetime, **options: Any) -> int:
    (job_id,) = store.enqueue([new_job(**options)], now=now)
    return job_id


def claim_one(
    store: Store, now: datetime, worker: str = W, queues: Sequence[str] = ("default",), ttl: float = TTL
) -> ClaimedJob:
    claimed = store.claim(worker, queues, 1, ttl, now=now)
    assert len(claimed) == 1, f"expected one claimable job at {now}, got {claimed}"
    return claimed[0]


def start_job(store: Store, now: datetime, worker: str = W, **options: Any) -> ClaimedJob:
    """Enqueue one job in its own queue and claim it: a running attempt 1."""
    queue = options.pop("queue", "default")
    job_id = enqueue_one(store, now, queue=queue, **options)
    c = claim_one(store, now, worker, queues=[queue])
    assert (c.id, c.attempt) == (job_id, 1)
    return c


def get(store: Store, job_id: int) -> Job:
    job = store.get_job(job_id)
    assert job is not None, f"job {job_id} vanished"
    return job


def close_to(actual: datetime | None, expected: datetime, tolerance: timedelta = TOLERANCE) -> bool:
    return actual is not None and abs(actual - expected) <= tolerance


def finished_attempts(job: Job) -> list[tuple[int, Outcome | None, str]]:
    return [(a.attempt, a.outcome, a.worker) for a in job.attempts if a.finished_at is not None]


def all_ids(store: Store) -> set[int]:
    return {j.id for j in store.list_jobs(limit=10_000)}


def race(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """Run two calls at the same instant on two threads (two connections)."""
    barrier = threading.Barrier(2)

    def go(fn: Callable[[], Any]) -> Any:
        barrier.wait(timeout=10)
        return fn()

    with ThreadPoolExecutor(max_workers=2) as pool:
        fa = pool.submit(go, first)
        fb = pool.submit(go, second)
        return fa.result(timeout=60), fb.result(timeout=60)


# -- enqueue ---------------------------------------------------------------------


def test_enqueue_single_returns_id_and_stores_a_queued_job(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, task="emails.send", args={"to": "a@example.com"}, queue="mail",
                         priority=7, max_attempts=5, lease_ttl=60.0, timeout=120.0, meta_json='{"trace": "x"}')
    job = get(store, job_id)
    assert job.state is JobState.QUEUED
    assert (job.task, job.queue, job.priority, job.max_attempts) == ("emails.send", "mail", 7, 5)
    assert (job.lease_ttl, job.timeout) == (60.0, 120.0)
    assert job.args == {"to": "a@example.com"}
    assert job.meta == {"trace": "x"}
    assert (job.attempt, job.released, job.locked_by, job.lease_until) == (0, 0, None, None)
    assert close_to(job.run_at, t0)
    assert close_to(job.created_at, t0)
    assert job.attempts == []


def test_a_jobs_times_are_utc_whatever_the_sessions_time_zone(
    backend: str, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL psycopg reads a timestamptz in the session's zone: the
    server's default, a role's setting, or the client's PGTZ. The README says
    a job's times are UTC; they came back at -05:00 under PGTZ=America/New_York."""
    if backend.startswith("http-"):
        pytest.skip("the server's store is the one tested directly")
    monkeypatch.setenv("PGTZ", "America/New_York")
    store = open_store(db_url)
    try:
        store.migrate()
        job_id = enqueue_one(store, store.db_now())
        claimed = claim_one(store, store.db_now())
        job = get(store, job_id)
        times = [store.db_now(), claimed.claimed_at, job.created_at, job.run_at, job.claimed_at, job.lease_until]

        async def read_async() -> list[datetime]:  # PostgreSQL's async connections are a set of their own
            await store.enqueue_async([new_job(queue="tz")])
            return [c.claimed_at for c in await store.claim_async(W, ["tz"], 1, TTL)]

        times += asyncio.run(read_async())
        assert all(t is not None and t.utcoffset() == timedelta(0) for t in times), times
    finally:
        store.close()


def test_enqueue_many_returns_ids_in_input_order_from_one_statement(store: Store) -> None:
    jobs = [new_job(task=f"task{i % 3}", args={"i": i}, priority=i % 4) for i in range(50)]
    ids = store.enqueue(jobs)  # the database clock: one statement, one now()
    assert len(ids) == 50 and len(set(ids)) == 50
    assert ids == sorted(ids)
    for i, job_id in enumerate(ids):
        job = get(store, job_id)
        assert (job.args, job.task) == ({"i": i}, f"task{i % 3}")
    # One statement (one transaction) sees one clock: every row has the same created_at.
    created = {get(store, job_id).created_at for job_id in ids}
    assert len(created) == 1


def test_enqueue_many_that_share_their_options_keep_order_args_and_options(store: Store) -> None:
    """The common bulk case (enqueue_many: one task, one set of options); a
    batch that differs in one option only must keep each job's own."""
    t0 = store.db_now()
    opts: dict[str, Any] = {"queue": "bulk", "priority": 7, "max_attempts": 5, "lease_ttl": 12.5, "timeout": 60.0,
                            "backoff_base": 0.5, "delay": 30.0, "meta_json": json.dumps({"m": 1})}
    ids = store.enqueue([new_job(task="same", args={"i": i, "s": "a,b\"{c}"}, **opts) for i in range(300)], now=t0)
    assert len(ids) == 300 and ids == sorted(ids) and len(set(ids)) == 300
    for i in (0, 1, 150, 299):
        job = get(store, ids[i])
        assert job.args == {"i": i, "s": "a,b\"{c}"}
        assert (job.task, job.queue, job.priority, job.max_attempts, job.lease_ttl, job.timeout, job.meta) == (
            "same", "bulk", 7, 5, 12.5, 60.0, {"m": 1})
        assert close_to(job.run_at, t0 + sec(30))
    mixed = store.enqueue([new_job(task="same", args={"i": i}, **{**opts, "priority": i}) for i in range(3)], now=t0)
    assert [get(store, j).priority for j in mixed] == [0, 1, 2]


def test_enqueue_empty_batch_inserts_nothing(store: Store) -> None:
    assert store.enqueue([]) == []
    assert store.list_jobs() == []


def test_enqueue_async_inserts_what_enqueue_does(store: Store) -> None:
    """One job, a batch sharing its options and a mixed batch: the three
    inserts the sync enqueue chooses between, awaited."""
    t0 = store.db_now()

    async def produce() -> tuple[list[int], list[int], list[int], list[int]]:
        return (
            await store.enqueue_async([new_job(task="one", args={"n": 1}, queue="q", priority=3, delay=5.0)], now=t0),
            await store.enqueue_async([new_job(task="same", args={"i": i}, queue="q") for i in range(20)], now=t0),
            await store.enqueue_async([new_job(task=f"t{i}", args={"i": i}, priority=i) for i in range(5)], now=t0),
            await store.enqueue_async([], now=t0),
        )

    (one,), uniform, mixed, nothing = asyncio.run(produce())
    job = get(store, one)
    assert (job.state, job.task, job.queue, job.priority, job.args) == (JobState.QUEUED, "one", "q", 3, {"n": 1})
    assert close_to(job.run_at, t0 + sec(5))
    assert len(set(uniform)) == 20 and uniform == sorted(uniform)
    assert [get(store, j).args for j in uniform] == [{"i": i} for i in range(20)]
    assert [(get(store, j).task, get(store, j).priority) for j in mixed] == [(f"t{i}", i) for i in range(5)]
    assert nothing == []
    assert all_ids(store) == {one, *uniform, *mixed}


def test_enqueue_async_dedup_key_returns_the_active_job(store: Store) -> None:
    t0 = store.db_now()
    held = enqueue_one(store, t0, dedup_key="report:42", args={"n": 1})

    async def produce() -> tuple[list[int], list[int]]:
        return (
            await store.enqueue_async([new_job(dedup_key="report:42", args={"n": 2})], now=t0),
            await store.enqueue_async([new_job(dedup_key="report:42"), new_job(), new_job(dedup_key="new"),
                                       new_job(dedup_key="new")], now=t0),
        )

    again, batch = asyncio.run(produce())
    assert again == [held] and batch[0] == held
    assert batch[2] == batch[3] and len({held, batch[1], batch[2]}) == 3
    assert all_ids(store) == {held, batch[1], batch[2]}
    assert get(store, held).args == {"n": 1}


def test_enqueue_async_from_one_event_loop_after_another(store: Store) -> None:
    """Each ``asyncio.run`` is a new loop. The second one enqueues eight jobs
    at once: connections (and the tasks that open more of them) kept from the
    first loop, which has ended, could not serve it."""

    async def at_once(n: int, run: int) -> list[int]:
        batches = await asyncio.gather(*(store.enqueue_async([new_job(args={"run": run, "i": i})])
                                         for i in range(n)))
        return [job_id for ids in batches for job_id in ids]

    first = asyncio.run(at_once(1, 1))
    second = asyncio.run(at_once(8, 2))
    assert len({*first, *second}) == 9
    assert sorted(get(store, j).args["i"] for j in second) == list(range(8))
    gc.collect()  # whatever the first loop left behind is finalized here, inside the test


def test_args_round_trip_through_enqueue_get_and_claim(store: Store) -> None:
    args: dict[str, Any] = {
        "text": "héllo ✓ \"quoted\" \\ back",
        "int": 2**53,
        "neg": -7,
        "float": 1.5,
        "none": None,
        "flags": [True, False],
        "nested": {"list": [1, "two", {"three": 3.0}], "empty": {}},
    }
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, args=args)
    assert get(store, job_id).args == args
    claimed = claim_one(store, t0)
    assert claimed.args == args


def test_claim_takes_higher_priority_first(store: Store) -> None:
    t0 = store.db_now()
    low = enqueue_one(store, t0, priority=-5)
    mid = enqueue_one(store, t0, priority=0)
    high_first = enqueue_one(store, t0, priority=10)
    high_second = enqueue_one(store, t0, priority=10)
    five = enqueue_one(store, t0, priority=5)
    order = [claim_one(store, t0).id for _ in range(5)]
    assert order == [high_first, high_second, five, mid, low]


def test_a_batch_claim_orders_its_jobs_and_keeps_each_ones_args_and_meta(store: Store) -> None:
    """One claim of many: highest priority first, then oldest id, and every
    job with its own args and meta (decoded for the whole batch at once)."""
    t0 = store.db_now()
    specs = [(-1, None), (3, '{"trace": "a"}'), (0, None), (3, None), (0, '{"trace": "b", "n": [1, 2]}'), (7, None)]
    ids = [enqueue_one(store, t0, priority=p, meta_json=m, args={"k": k, "s": f"job {k}, [quoted]"})
           for k, (p, m) in enumerate(specs)]
    claimed = store.claim(W, ["default"], 10, TTL, now=t0)
    expected = sorted(range(len(specs)), key=lambda k: (-specs[k][0], ids[k]))
    assert [c.id for c in claimed] == [ids[k] for k in expected]
    for c in claimed:
        k = ids.index(c.id)
        assert c.args == {"k": k, "s": f"job {k}, [quoted]"}
        assert c.meta == (None if specs[k][1] is None else json.loads(specs[k][1]))
        assert (c.priority, c.attempt, c.task, c.queue) == (specs[k][0], 1, "t", "default")
        assert close_to(c.claimed_at, t0)


def test_claim_within_a_priority_takes_the_earliest_run_at_first(store: Store) -> None:
    t0 = store.db_now()
    later = enqueue_one(store, t0, run_at=t0 - sec(10))
    earlier = enqueue_one(store, t0, run_at=t0 - sec(20))
    assert [claim_one(store, t0).id for _ in range(2)] == [earlier, later]


def test_future_run_at_is_not_claimable_until_the_clock_passes_it(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, run_at=t0 + sec(60))
    assert close_to(get(store, job_id).run_at, t0 + sec(60))
    assert store.claim(W, ["default"], 10, TTL, now=t0) == []
    assert store.claim(W, ["default"], 10, TTL, now=t0 + sec(59)) == []
    assert [c.id for c in store.claim(W, ["default"], 10, TTL, now=t0 + sec(60))] == [job_id]


def test_delay_is_measured_from_the_enqueue_clock(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, delay=30.0)
    assert close_to(get(store, job_id).run_at, t0 + sec(30))
    assert store.claim(W, ["default"], 10, TTL, now=t0 + sec(29)) == []
    assert [c.id for c in store.claim(W, ["default"], 10, TTL, now=t0 + sec(31))] == [job_id]


def test_claim_only_takes_jobs_from_the_named_queues(store: Store) -> None:
    t0 = store.db_now()
    a = enqueue_one(store, t0, queue="a")
    b = enqueue_one(store, t0, queue="b")
    c = enqueue_one(store, t0, queue="c")
    assert [j.id for j in store.claim(W, ["a"], 10, TTL, now=t0)] == [a]
    assert {j.id for j in store.claim(W, ["b", "c", "zzz"], 10, TTL, now=t0)} == {b, c}
    assert store.claim(W, ["missing"], 10, TTL, now=t0) == []


# -- claim -------------------------------------------------------------------------


def test_a_claim_over_several_queues_takes_only_the_best_limit_of_them(store: Store) -> None:
    """Each queue's scan may lock up to ``limit`` rows; the claim takes the best
    ``limit`` across them, and the rest stay queued for the next claim."""
    t0 = store.db_now()
    a = [enqueue_one(store, t0, queue="a", priority=p) for p in (5, 1, 0)]
    b = [enqueue_one(store, t0, queue="b", priority=p) for p in (4, 3, 2)]
    first = store.claim(W, ["a", "b"], 3, TTL, now=t0)
    assert [j.id for j in first] == [a[0], b[0], b[1]]
    assert sorted(j.id for j in store.list_jobs(state="queued")) == sorted([a[1], a[2], b[2]])
    assert [j.id for j in store.claim(W, ["a", "b"], 10, TTL, now=t0)] == [b[2], a[1], a[2]]


def test_claim_sets_running_and_grants_a_lease_in_one_step(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, task="work", queue="q", priority=3, max_attempts=4)
    (c,) = rounds.claim(W, ["q"], 1, TTL, now=t0)
    assert (c.id, c.attempt, c.task, c.queue, c.priority, c.max_attempts) == (job_id, 1, "work", "q", 3, 4)
    assert c.lease_ttl == TTL and c.timeout is None
    assert close_to(c.claimed_at, t0)
    job = get(store, job_id)
    assert job.state is JobState.RUNNING
    assert (job.attempt, job.locked_by) == (1, W)
    assert close_to(job.claimed_at, t0)
    assert close_to(job.lease_until, t0 + sec(TTL))


def test_claim_bumps_attempt_by_one_per_claim(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, max_attempts=10)
    assert claim_one(store, t0).attempt == 1
    store.release(W, job_id, 1, now=t0 + sec(1))
    assert claim_one(store, t0 + sec(2)).attempt == 2
    store.fail(W, job_id, 2, outcome=Outcome.FAILED, error="boom", now=t0 + sec(3))
    assert claim_one(store, t0 + sec(3600)).attempt == 3
    store.reap(100, now=t0 + sec(3600 + TTL + 1))
    assert claim_one(store, t0 + sec(3600 + TTL + 1)).attempt == 4
    assert get(store, job_id).attempt == 4


def test_per_job_lease_ttl_overrides_the_workers(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, lease_ttl=90.0)
    c = claim_one(store, t0, ttl=TTL)
    assert c.lease_ttl == 90.0
    assert close_to(get(store, job_id).lease_until, t0 + sec(90))
    # and the heartbeat renews by the job's TTL, not the worker's
    store.heartbeat(W, [(job_id, 1)], TTL, now=t0 + sec(10))
    assert close_to(get(store, job_id).lease_until, t0 + sec(100))
    assert store.reap(100, now=t0 + sec(TTL + 1)) == []


def test_claim_takes_at_most_limit(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    store.enqueue([new_job() for _ in range(5)], now=t0)
    assert len(rounds.claim(W, ["default"], 2, TTL, now=t0)) == 2
    assert len(rounds.claim(W, ["default"], 2, TTL, now=t0)) == 2
    assert len(rounds.claim(W, ["default"], 2, TTL, now=t0)) == 1
    assert rounds.claim(W, ["default"], 2, TTL, now=t0) == []


def test_two_claimers_never_get_the_same_job(store: Store) -> None:
    t0 = store.db_now()
    ids = store.enqueue([new_job() for _ in range(10)], now=t0)
    first = {c.id for c in store.claim(W, ["default"], 6, TTL, now=t0)}
    second = {c.id for c in store.claim(W2, ["default"], 10, TTL, now=t0)}
    assert len(first) == 6 and len(second) == 4
    assert first.isdisjoint(second)
    assert first | second == set(ids)
    assert {get(store, i).locked_by for i in first} == {W}
    assert {get(store, i).locked_by for i in second} == {W2}


def test_concurrent_claimers_never_get_the_same_job(store: Store) -> None:
    t0 = store.db_now()
    ids = store.enqueue([new_job() for _ in range(40)], now=t0)
    for _ in range(5):
        mine, theirs = race(
            lambda: store.claim(W, ["default"], 40, TTL, now=t0),
            lambda: store.claim(W2, ["default"], 40, TTL, now=t0),
        )
        a, b = {c.id for c in mine}, {c.id for c in theirs}
        assert a.isdisjoint(b)
        assert a | b == set(ids)
        for c in [*mine, *theirs]:
            store.release(W if c.id in a else W2, c.id, c.attempt, now=t0)


# -- heartbeat -----------------------------------------------------------------------


def test_one_heartbeat_renews_every_held_lease(store: Store) -> None:
    t0 = store.db_now()
    store.enqueue([new_job() for _ in range(5)], now=t0)
    held = [(c.id, c.attempt) for c in store.claim(W, ["default"], 5, TTL, now=t0)]
    beats = store.heartbeat(W, held, TTL, now=t0 + sec(10))
    assert beats == {job_id: Beat.RENEWED for job_id, _ in held}
    for job_id, _ in held:
        assert close_to(get(store, job_id).lease_until, t0 + sec(10 + TTL))
    # renewed leases survive the time at which the original ones would have lapsed
    assert store.reap(100, now=t0 + sec(TTL + 1)) == []


def test_heartbeat_with_no_jobs_is_harmless(store: Store) -> None:
    assert store.heartbeat(W, [], TTL) == {}


def test_stale_heartbeat_wrong_attempt_is_lost_and_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    before = get(store, c.id)
    assert store.heartbeat(W, [(c.id, c.attempt + 1)], TTL, now=t0 + sec(10)) == {c.id: Beat.LOST}
    assert store.heartbeat(W, [(c.id, c.attempt - 1)], TTL, now=t0 + sec(10)) == {c.id: Beat.LOST}
    assert get(store, c.id) == before


def test_stale_heartbeat_wrong_worker_is_lost_and_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    before = get(store, c.id)
    assert store.heartbeat(W2, [(c.id, c.attempt)], TTL, now=t0 + sec(10)) == {c.id: Beat.LOST}
    assert get(store, c.id) == before


def test_stale_heartbeat_for_a_finished_job_is_lost_and_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    assert store.complete(W, [(c.id, c.attempt, None)], now=t0 + sec(1)) == {c.id}
    before = get(store, c.id)
    assert store.heartbeat(W, [(c.id, c.attempt)], TTL, now=t0 + sec(10)) == {c.id: Beat.LOST}
    assert get(store, c.id) == before


def test_stale_heartbeat_for_an_unknown_id_is_lost(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    beats = store.heartbeat(W, [(c.id, c.attempt), (UNKNOWN_ID, 1)], TTL, now=t0 + sec(10))
    assert beats == {c.id: Beat.RENEWED, UNKNOWN_ID: Beat.LOST}
    assert store.get_job(UNKNOWN_ID) is None


def test_heartbeat_mixes_renewed_and_lost_in_one_call(store: Store) -> None:
    t0 = store.db_now()
    mine = start_job(store, t0, queue="mine")
    theirs = start_job(store, t0, worker=W2, queue="theirs")
    done = start_job(store, t0, queue="done")
    store.complete(W, [(done.id, 1, None)], now=t0)
    theirs_before = get(store, theirs.id)
    beats = store.heartbeat(W, [(mine.id, 1), (theirs.id, 1), (done.id, 1)], TTL, now=t0 + sec(10))
    assert beats == {mine.id: Beat.RENEWED, theirs.id: Beat.LOST, done.id: Beat.LOST}
    assert close_to(get(store, mine.id).lease_until, t0 + sec(10 + TTL))
    assert get(store, theirs.id) == theirs_before


def test_heartbeat_reports_a_cancel_request_and_still_renews(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    other = start_job(store, t0, queue="other")
    assert store.cancel(c.id, now=t0 + sec(1)) is JobState.RUNNING
    beats = store.heartbeat(W, [(c.id, 1), (other.id, 1)], TTL, now=t0 + sec(10))
    assert beats == {c.id: Beat.CANCEL_REQUESTED, other.id: Beat.RENEWED}
    assert close_to(get(store, c.id).lease_until, t0 + sec(10 + TTL))


def test_heartbeat_marks_the_worker_seen(store: Store) -> None:
    t0 = store.db_now()
    store.register_worker(WorkerInfo(id=W, host="host-a", pid=111, proc_start=12345, started_at=t0,
                                     last_seen=t0, queues=["default", "mail"], concurrency=4))
    (info,) = store.list_workers()
    assert (info.id, info.host, info.pid, info.proc_start, info.queues, info.concurrency) == (
        W, "host-a", 111, 12345, ["default", "mail"], 4)
    c = start_job(store, t0)
    store.heartbeat(W, [(c.id, 1)], TTL, now=t0 + sec(100))
    (info,) = store.list_workers()
    assert close_to(info.last_seen, t0 + sec(100))
    # a beat with nothing held still says the worker is alive
    store.heartbeat(W, [], TTL, now=t0 + sec(200))
    (info,) = store.list_workers()
    assert close_to(info.last_seen, t0 + sec(200))


def test_stop_worker_and_list_workers_filters(store: Store) -> None:
    t0 = store.db_now()
    for wid, host in ((W, "host-a"), (W2, "host-b")):
        store.register_worker(WorkerInfo(id=wid, host=host, pid=1, proc_start=None, started_at=t0,
                                         last_seen=t0, queues=["default"], concurrency=1))
    assert {w.id for w in store.list_workers()} == {W, W2}
    assert [w.id for w in store.list_workers(host="host-b")] == [W2]
    store.stop_worker(W, now=t0 + sec(5))
    assert [w.id for w in store.list_workers(live_only=True)] == [W2]
    stopped = next(w for w in store.list_workers() if w.id == W)
    assert close_to(stopped.stopped_at, t0 + sec(5))
    # re-registering the same id brings it back to life
    store.register_worker(WorkerInfo(id=W, host="host-a", pid=1, proc_start=None, started_at=t0,
                                     last_seen=t0, queues=["default"], concurrency=1))
    assert {w.id for w in store.list_workers(live_only=True)} == {W, W2}


# -- progress ------------------------------------------------------------------------


def test_progress_records_and_extends_the_lease(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    assert store.progress(W, c.id, 1, 0.25, "a quarter", TTL, now=t0 + sec(20)) is False
    job = get(store, c.id)
    assert (job.progress, job.progress_message) == (0.25, "a quarter")
    assert close_to(job.lease_until, t0 + sec(20 + TTL))
    assert store.reap(100, now=t0 + sec(TTL + 1)) == []


def test_a_success_leaves_progress_at_one_not_at_its_last_report(store: Store) -> None:
    """A succeeded job reads 100%, not the 0.25 it last reported; one that never
    reported progress keeps none (issue 17)."""
    t0 = store.db_now()
    c = start_job(store, t0)
    store.progress(W, c.id, 1, 0.25, "a quarter", TTL, now=t0 + sec(1))
    other = start_job(store, t0)
    assert store.complete(W, [(c.id, 1, None), (other.id, 1, None)], now=t0 + sec(2)) == {c.id, other.id}
    assert get(store, c.id).progress == 1.0
    assert get(store, other.id).progress is None


def test_progress_reports_a_cancel_request(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    store.cancel(c.id, now=t0)
    assert store.progress(W, c.id, 1, 0.5, None, TTL, now=t0 + sec(1)) is True


def test_stale_progress_raises_and_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    store.progress(W, c.id, 1, 0.1, "start", TTL, now=t0 + sec(1))
    before = get(store, c.id)
    with pytest.raises(StaleAttempt) as info:
        store.progress(W, c.id, 2, 0.9, "nearly", TTL, now=t0 + sec(10))
    assert (info.value.job_id, info.value.attempt, info.value.worker, info.value.op) == (c.id, 2, W, "progress")
    with pytest.raises(StaleAttempt):
        store.progress(W2, c.id, 1, 0.9, "nearly", TTL, now=t0 + sec(10))
    with pytest.raises(StaleAttempt):
        store.progress(W, UNKNOWN_ID, 1, 0.9, "nearly", TTL, now=t0 + sec(10))
    assert get(store, c.id) == before


# -- complete ------------------------------------------------------------------------


def test_complete_batch_accepts_only_rows_that_pass_their_fence(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    store.enqueue([new_job() for _ in range(3)], now=t0)
    a, b, c = store.claim(W, ["default"], 3, TTL, now=t0)
    b_before = get(store, b.id)
    accepted = rounds.complete(
        W,
        [(a.id, a.attempt, '{"ok": 1}'), (b.id, b.attempt + 1, '"wrong attempt"'), (c.id, c.attempt, None),
         (UNKNOWN_ID, 1, None)],
        now=t0 + sec(5),
    )
    assert accepted == {a.id, c.id}
    assert get(store, b.id) == b_before  # the stale row is untouched: still running, lease as it was
    done = get(store, a.id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"ok": 1}
    assert (done.locked_by, done.lease_until) == (None, None)
    assert close_to(done.finished_at, t0 + sec(5))
    assert get(store, c.id).result is None


@pytest.mark.parametrize("op", ["complete", "complete_and_claim"])
def test_a_batch_of_successes_larger_than_one_statement_takes_is_written_whole(store: Store, rounds: Rounds, op: str) -> None:
    """450 successes at once (more than a claim batch; PostgreSQL writes them
    in chunks of 200), with a stale row in each chunk: each row is fenced on
    its own attempt, each result lands on its own job."""
    t0 = store.db_now()
    store.enqueue([new_job(args={"n": n}) for n in range(460)], now=t0)
    jobs = store.claim(W, ["default"], 450, TTL, now=t0)
    assert len(jobs) == 450
    stale = {jobs[k].id for k in (5, 250, 449)}
    done = [(j.id, j.attempt + (j.id in stale), f'{{"n": {j.args["n"]}}}') for j in jobs]
    if op == "complete":
        accepted = rounds.complete(W, done, now=t0 + sec(1))
    else:
        accepted, claimed = rounds.complete_and_claim(W, done, ["default"], 10, TTL, now=t0 + sec(1))
        assert [c.args["n"] for c in claimed] == list(range(450, 460))
    assert accepted == {j.id for j in jobs} - stale
    running = 3 + (10 if op == "complete_and_claim" else 0)
    assert store.stats().counts == {("default", "succeeded"): 447, ("default", "running"): running,
                                    **({("default", "queued"): 10} if op == "complete" else {})}
    # the stale rows, the edges of each chunk, and a few between (each get is a request over HTTP)
    for j in [jobs[k] for k in (0, 5, 6, 199, 200, 201, 250, 399, 400, 448, 449)]:
        job = get(store, j.id)
        if j.id in stale:
            assert job.state is JobState.RUNNING and job.result is None
            assert Outcome.SUCCEEDED not in [a.outcome for a in job.attempts]
        else:
            assert job.state is JobState.SUCCEEDED and job.result == {"n": j.args["n"]}
            assert [(a.attempt, a.outcome) for a in job.attempts] == [(1, Outcome.SUCCEEDED)]


def test_complete_from_the_wrong_worker_is_refused(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    before = get(store, c.id)
    assert rounds.complete(W2, [(c.id, c.attempt, '"mine"')], now=t0 + sec(1)) == set()
    assert get(store, c.id) == before


def test_complete_writes_one_succeeded_attempt_row_once(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    assert rounds.complete(W, [(c.id, 1, '[1, 2, "three"]')], now=t0 + sec(3)) == {c.id}
    # a second completion (a retried batch) is refused and writes nothing
    assert rounds.complete(W, [(c.id, 1, '"again"')], now=t0 + sec(4)) == set()
    job = get(store, c.id)
    assert job.result == [1, 2, "three"]
    (att,) = job.attempts
    assert (att.attempt, att.worker, att.outcome, att.error) == (1, W, Outcome.SUCCEEDED, None)
    assert close_to(att.claimed_at, t0)
    assert close_to(att.finished_at, t0 + sec(3))


@pytest.mark.parametrize(
    ("result_json", "expected"),
    [('"done"', "done"), ('"123"', "123"), ("123", 123), ("1.5", 1.5), ("true", True), ("null", None),
     (None, None), ('[1, "a"]', [1, "a"]), ('{"k": {"n": "v"}}', {"k": {"n": "v"}})],
)
def test_result_round_trips_every_json_type(store: Store, result_json: str | None, expected: Any) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    assert store.complete(W, [(c.id, 1, result_json)], now=t0) == {c.id}
    result = get(store, c.id).result
    assert result == expected and type(result) is type(expected)


def test_complete_with_nothing_is_a_no_op(store: Store, rounds: Rounds) -> None:
    assert rounds.complete(W, []) == set()


def test_complete_and_claim_fences_each_completion_and_claims_the_next_jobs(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    store.enqueue([new_job(args={"n": n}) for n in range(4)], now=t0)
    a, b = rounds.claim(W, ["default"], 2, TTL, now=t0)
    b_before = get(store, b.id)
    accepted, claimed = rounds.complete_and_claim(
        W, [(a.id, a.attempt, '{"ok": 1}'), (b.id, b.attempt + 1, '"stale"'), (UNKNOWN_ID, 1, None)],
        ["default"], 5, TTL, now=t0 + sec(2),
    )
    assert accepted == {a.id}
    # the rest of the backlog, in order, each a fresh attempt 1 leased to W from the same now
    assert [c.args["n"] for c in claimed] == [2, 3]
    assert all(c.attempt == 1 and close_to(c.claimed_at, t0 + sec(2)) and c.lease_ttl == TTL for c in claimed)
    assert all(get(store, c.id).state is JobState.RUNNING and get(store, c.id).locked_by == W for c in claimed)
    assert get(store, b.id) == b_before  # the stale completion changed nothing
    done = get(store, a.id)
    assert done.state is JobState.SUCCEEDED and done.result == {"ok": 1}
    assert [(x.attempt, x.worker, x.outcome) for x in done.attempts] == [(1, W, Outcome.SUCCEEDED)]
    # the same successes again (a retried round trip whose answer was lost): refused, written once
    again, more = rounds.complete_and_claim(W, [(a.id, a.attempt, '"again"')], ["default"], 5, TTL,
                                           now=t0 + sec(3))
    assert (again, more) == (set(), [])
    assert get(store, a.id).result == {"ok": 1} and len(get(store, a.id).attempts) == 1


def test_complete_and_claim_with_one_side_empty_is_the_other_alone(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    enqueue_one(store, t0)
    assert rounds.complete_and_claim(W, [], ["default"], 3, TTL, now=t0 + sec(1))[0] == set()
    (c,) = get_running(store)
    accepted, claimed = rounds.complete_and_claim(W, [(c.id, c.attempt, None)], ["default"], 3, TTL,
                                                 now=t0 + sec(2))
    assert (accepted, claimed) == ({c.id}, [])
    assert get(store, c.id).state is JobState.SUCCEEDED


def test_complete_and_claim_refuses_another_workers_success_but_still_claims(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)  # W holds it
    later = enqueue_one(store, t0)
    accepted, claimed = rounds.complete_and_claim(W2, [(c.id, c.attempt, '"not mine"')], ["default"], 1, TTL,
                                                 now=t0 + sec(1))
    assert accepted == set() and [j.id for j in claimed] == [later]
    assert get(store, c.id).state is JobState.RUNNING and get(store, c.id).locked_by == W
    assert get(store, later).locked_by == W2


# -- complete_and_claim_ids: a delivering transport's round ---------------------------


def test_complete_and_claim_ids_fences_each_completion_and_claims_the_delivered_jobs(
    store: Store, rounds: Rounds
) -> None:
    t0 = store.db_now()
    ids = store.enqueue([new_job(args={"n": n}) for n in range(5)], now=t0)
    a, b = rounds.claim_ids(W, ids[:2], ["default"], TTL, now=t0)
    b_before = get(store, b.id)
    accepted, claimed = rounds.complete_and_claim_ids(
        W, [(a.id, a.attempt, '{"ok": 1}'), (b.id, b.attempt + 1, '"stale"'), (UNKNOWN_ID, 1, None)],
        [ids[3], ids[2], a.id, b.id, UNKNOWN_ID], ["default"], TTL, now=t0 + sec(2),
    )
    assert accepted == {a.id}
    # exactly the delivered jobs still queued (not a, just finished, nor b, held), each a fresh attempt 1
    assert sorted(c.id for c in claimed) == [ids[2], ids[3]]
    assert all(c.attempt == 1 and close_to(c.claimed_at, t0 + sec(2)) and c.lease_ttl == TTL for c in claimed)
    assert all(get(store, c.id).state is JobState.RUNNING and get(store, c.id).locked_by == W for c in claimed)
    assert get(store, ids[4]).state is JobState.QUEUED  # not delivered: not claimed
    assert get(store, b.id) == b_before  # the stale completion changed nothing
    done = get(store, a.id)
    assert done.state is JobState.SUCCEEDED and done.result == {"ok": 1}
    assert [(x.attempt, x.worker, x.outcome) for x in done.attempts] == [(1, W, Outcome.SUCCEEDED)]
    # the same round again (a retry whose answer was lost): refused, written once
    again, more = rounds.complete_and_claim_ids(W, [(a.id, a.attempt, '"again"')], [ids[2]], ["default"], TTL,
                                                now=t0 + sec(3))
    assert (again, more) == (set(), [])
    assert get(store, a.id).result == {"ok": 1} and len(get(store, a.id).attempts) == 1


def test_complete_and_claim_ids_does_not_write_a_zombies_success(store: Store, rounds: Rounds) -> None:
    """W's lease lapsed and the job went to W2 (attempt 2): W's late success,
    riding with W's next claim, must not be written, and the claim still goes on."""
    t0 = store.db_now()
    job_id = enqueue_one(store, t0)
    (c1,) = store.claim(W, ["default"], 1, 5.0, now=t0)
    later = t0 + sec(60)
    assert [r.id for r in store.reap(10, now=later)] == [job_id]
    (c2,) = store.claim_ids(W2, [job_id], ["default"], TTL, now=later)
    assert c2.attempt == c1.attempt + 1
    other = enqueue_one(store, later)
    accepted, claimed = rounds.complete_and_claim_ids(W, [(job_id, c1.attempt, '"zombie"')], [job_id, other],
                                                      ["default"], TTL, now=later + sec(1))
    assert accepted == set() and [c.id for c in claimed] == [other]
    job = get(store, job_id)
    assert job.state is JobState.RUNNING and job.locked_by == W2 and job.attempt == c2.attempt
    assert job.result is None
    assert Outcome.SUCCEEDED not in [a.outcome for a in job.attempts]
    # the owner's success is still the one written
    assert rounds.complete(W2, [(job_id, c2.attempt, '"mine"')], now=later + sec(2)) == {job_id}
    assert get(store, job_id).result == "mine"


def test_complete_and_claim_ids_with_one_side_empty_is_the_other_alone(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0)
    accepted, claimed = rounds.complete_and_claim_ids(W, [], [job_id], ["default"], TTL, now=t0 + sec(1))
    assert accepted == set() and [c.id for c in claimed] == [job_id]
    (c,) = claimed
    assert rounds.complete_and_claim_ids(W, [(c.id, c.attempt, None)], [], ["default"], TTL,
                                         now=t0 + sec(2)) == ({c.id}, [])
    assert get(store, c.id).state is JobState.SUCCEEDED


def get_running(store: Store) -> list[Job]:
    return [j for j in store.list_jobs(limit=100) if j.state is JobState.RUNNING]


# -- fail ----------------------------------------------------------------------------


def test_fail_retries_with_exponential_backoff_and_jitter(store: Store) -> None:
    t0 = store.db_now()
    n = 20
    store.enqueue([new_job(backoff_base=10.0, max_attempts=5) for _ in range(n)], now=t0)
    t = t0
    for failure in (1, 2, 3):
        t = t + sec(3600)
        claimed = store.claim(W, ["default"], n, TTL, now=t)
        assert len(claimed) == n and {c.attempt for c in claimed} == {failure}
        full = 10.0 * 2 ** (failure - 1)
        delays = []
        for c in claimed:
            assert store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="oops", now=t) is JobState.QUEUED
            job = get(store, c.id)
            assert job.state is JobState.QUEUED and job.locked_by is None and job.lease_until is None
            assert job.finished_at is None
            delays.append((job.run_at - t).total_seconds())
        assert all(0.5 * full - 0.01 <= d <= full + 0.01 for d in delays), (failure, delays)
        assert len({round(d, 3) for d in delays}) > 1, "backoff has no jitter"
        # not claimable before its backoff has passed
        assert store.claim(W, ["default"], n, TTL, now=t + sec(0.5 * full - 0.1)) == []


def test_fail_backoff_is_capped_at_an_hour(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, backoff_base=3000.0, max_attempts=5)
    store.fail(W, c.id, 1, outcome=Outcome.FAILED, error="x", now=t0)
    c2 = claim_one(store, t0 + sec(4000))
    store.fail(W, c2.id, 2, outcome=Outcome.FAILED, error="x", now=t0 + sec(4000))
    delay = (get(store, c.id).run_at - (t0 + sec(4000))).total_seconds()
    assert 1800 - 0.01 <= delay <= 3600 + 0.01


def test_fail_goes_dead_once_max_attempts_are_spent(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, max_attempts=2, backoff_base=1.0)
    c = claim_one(store, t0)
    assert store.fail(W, job_id, c.attempt, outcome=Outcome.FAILED, error="first", now=t0) is JobState.QUEUED
    c = claim_one(store, t0 + sec(10))
    assert c.attempt == 2
    assert store.fail(W, job_id, 2, outcome=Outcome.FAILED, error="second", now=t0 + sec(11)) is JobState.DEAD
    job = get(store, job_id)
    assert job.state is JobState.DEAD
    assert job.last_error == "second"
    assert close_to(job.finished_at, t0 + sec(11))
    assert store.claim(W, ["default"], 10, TTL, now=t0 + sec(99999)) == []


def test_fail_without_retry_goes_dead_at_once(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=10)
    assert store.fail(W, c.id, 1, outcome=Outcome.FAILED, error="bad input", retry=False, now=t0) is JobState.DEAD
    job = get(store, c.id)
    assert job.state is JobState.DEAD and job.attempts_used == 1


def test_fail_with_outcome_cancelled_ends_cancelled(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=10)
    state = store.fail(W, c.id, 1, outcome=Outcome.CANCELLED, error="cancelled by operator", now=t0 + sec(2))
    assert state is JobState.CANCELLED
    job = get(store, c.id)
    assert job.state is JobState.CANCELLED
    assert close_to(job.finished_at, t0 + sec(2))
    assert [(a.attempt, a.outcome) for a in job.attempts] == [(1, Outcome.CANCELLED)]


def test_fail_after_a_cancel_request_ends_cancelled_not_retried(store: Store) -> None:
    t0 = store.db_now()
    retried = start_job(store, t0, queue="a", max_attempts=10)
    final = start_job(store, t0, queue="b", max_attempts=10)
    for c in (retried, final):
        assert store.cancel(c.id, now=t0 + sec(1)) is JobState.RUNNING
    # the handler failed before its worker heard of the request: the cancel still wins
    assert store.fail(W, retried.id, 1, outcome=Outcome.FAILED, error="boom", now=t0 + sec(2)) is JobState.CANCELLED
    assert store.fail(W, final.id, 1, outcome=Outcome.FAILED, error="boom", retry=False,
                      now=t0 + sec(2)) is JobState.CANCELLED
    for c in (retried, final):
        job = get(store, c.id)
        assert job.state is JobState.CANCELLED
        assert close_to(job.finished_at, t0 + sec(2))
        assert [(a.attempt, a.outcome, a.error) for a in job.attempts] == [(1, Outcome.FAILED, "boom")]
    assert store.claim(W, ["a", "b"], 10, TTL, now=t0 + sec(99999)) == []


def test_fail_records_error_and_traceback_in_the_attempts_row(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: nope\n'
    store.fail(W, c.id, 1, outcome=Outcome.FAILED, error="ValueError: nope", traceback=tb, now=t0 + sec(4))
    job = get(store, c.id)
    assert job.last_error == "ValueError: nope"
    (att,) = job.attempts
    assert (att.attempt, att.worker, att.outcome, att.error, att.traceback) == (
        1, W, Outcome.FAILED, "ValueError: nope", tb)
    assert close_to(att.claimed_at, t0)
    assert close_to(att.finished_at, t0 + sec(4))


def test_stale_fail_raises_and_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    before = get(store, c.id)
    with pytest.raises(StaleAttempt) as info:
        store.fail(W, c.id, 2, outcome=Outcome.FAILED, error="zombie", now=t0 + sec(1))
    assert info.value.op == "fail"
    with pytest.raises(StaleAttempt):
        store.fail(W2, c.id, 1, outcome=Outcome.FAILED, error="zombie", retry=False, now=t0 + sec(1))
    with pytest.raises(StaleAttempt):
        store.fail(W, UNKNOWN_ID, 1, outcome=Outcome.FAILED, error="zombie", now=t0 + sec(1))
    assert get(store, c.id) == before


def test_fail_on_a_finished_job_raises_and_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    store.complete(W, [(c.id, 1, '"done"')], now=t0 + sec(1))
    before = get(store, c.id)
    with pytest.raises(StaleAttempt):
        store.fail(W, c.id, 1, outcome=Outcome.FAILED, error="late", now=t0 + sec(2))
    assert get(store, c.id) == before


# -- release -------------------------------------------------------------------------


def test_release_hands_the_job_back_without_spending_budget(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=1)
    assert store.release(W, c.id, 1, now=t0 + sec(5)) is JobState.QUEUED
    job = get(store, c.id)
    assert job.state is JobState.QUEUED
    assert (job.released, job.attempt, job.attempts_used) == (1, 1, 0)
    assert (job.locked_by, job.lease_until, job.finished_at) == (None, None, None)
    assert close_to(job.run_at, t0)  # kept: due at once, in its old place in the claim order
    assert [(a.attempt, a.outcome, a.worker) for a in job.attempts] == [(1, Outcome.RELEASED, W)]
    # claimable again at once, and the one real attempt is still there to spend
    c2 = claim_one(store, t0 + sec(5), worker=W2)
    assert c2.attempt == 2
    assert store.fail(W2, c.id, 2, outcome=Outcome.FAILED, error="real failure", now=t0 + sec(6)) is JobState.DEAD
    job = get(store, c.id)
    assert (job.state, job.attempt, job.released, job.attempts_used) == (JobState.DEAD, 2, 1, 1)


def test_released_attempts_do_not_count_when_fail_judges_the_budget(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=2, backoff_base=1.0)
    store.release(W, c.id, 1, now=t0)
    c = claim_one(store, t0)
    assert c.attempt == 2
    # one real attempt spent of two: a retry, not dead
    assert store.fail(W, c.id, 2, outcome=Outcome.FAILED, error="x", now=t0) is JobState.QUEUED
    c = claim_one(store, t0 + sec(10))
    assert store.fail(W, c.id, 3, outcome=Outcome.FAILED, error="x", now=t0 + sec(10)) is JobState.DEAD
    job = get(store, c.id)
    assert (job.attempt, job.released, job.attempts_used) == (3, 1, 2)


def test_release_does_not_grow_the_backoff(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=5, backoff_base=100.0)
    for i in range(3):
        store.release(W, c.id, c.attempt, now=t0)
        c = claim_one(store, t0)
        assert c.attempt == i + 2
    store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", now=t0)
    delay = (get(store, c.id).run_at - t0).total_seconds()
    assert 50 - 0.01 <= delay <= 100 + 0.01  # the first failure's backoff, not the fourth's


def test_release_with_a_pending_cancel_ends_cancelled(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    store.cancel(c.id, now=t0)
    assert store.release(W, c.id, 1, now=t0 + sec(1)) is JobState.CANCELLED
    assert get(store, c.id).state is JobState.CANCELLED
    assert store.claim(W, ["default"], 10, TTL, now=t0 + sec(2)) == []


def test_stale_release_raises_and_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    before = get(store, c.id)
    with pytest.raises(StaleAttempt) as info:
        store.release(W, c.id, 2, now=t0 + sec(1))
    assert info.value.op == "release"
    with pytest.raises(StaleAttempt):
        store.release(W2, c.id, 1, now=t0 + sec(1))
    with pytest.raises(StaleAttempt):
        store.release(W, UNKNOWN_ID, 1, now=t0 + sec(1))
    assert get(store, c.id) == before


# -- the ABA case: the same worker id, a newer attempt ---------------------------------


def test_aba_zombie_attempt_of_the_same_worker_is_fenced_out(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, max_attempts=5)
    first = claim_one(store, t0, worker=W)
    assert first.attempt == 1
    (reaped,) = store.reap(100, now=t0 + sec(TTL + 1))
    assert (reaped.id, reaped.attempt, reaped.worker, reaped.state) == (job_id, 1, W, JobState.QUEUED)
    t1 = t0 + sec(TTL + 2)
    second = claim_one(store, t1, worker=W)  # the very same worker id takes it again
    assert (second.id, second.attempt) == (job_id, 2)
    store.progress(W, job_id, 2, 0.5, "attempt two", TTL, now=t1)
    before = get(store, job_id)
    later = t1 + sec(5)

    # every write from attempt 1 is refused and changes nothing
    assert store.heartbeat(W, [(job_id, 1)], TTL, now=later) == {job_id: Beat.LOST}
    with pytest.raises(StaleAttempt):
        store.progress(W, job_id, 1, 1.0, "zombie", TTL, now=later)
    assert store.complete(W, [(job_id, 1, '"zombie result"')], now=later) == set()
    with pytest.raises(StaleAttempt):
        store.fail(W, job_id, 1, outcome=Outcome.FAILED, error="zombie", now=later)
    with pytest.raises(StaleAttempt):
        store.fail(W, job_id, 1, outcome=Outcome.CANCELLED, error="zombie", now=later)
    with pytest.raises(StaleAttempt):
        store.release(W, job_id, 1, now=later)
    assert get(store, job_id) == before

    # attempt 2 still owns the job
    assert store.heartbeat(W, [(job_id, 2)], TTL, now=later) == {job_id: Beat.RENEWED}
    assert store.complete(W, [(job_id, 2, '"real result"')], now=later) == {job_id}
    job = get(store, job_id)
    assert (job.state, job.result) == (JobState.SUCCEEDED, "real result")
    assert finished_attempts(job) == [(1, Outcome.LEASE_EXPIRED, W), (2, Outcome.SUCCEEDED, W)]


# -- reap ----------------------------------------------------------------------------


def test_reap_takes_only_lapsed_leases(store: Store) -> None:
    t0 = store.db_now()
    old = start_job(store, t0, queue="old")
    fresh = start_job(store, t0 + sec(20), queue="fresh")
    fresh_before = get(store, fresh.id)
    assert store.reap(100, now=t0 + sec(TTL - 0.01)) == []  # not lapsed until lease_until passes
    reaped = store.reap(100, now=t0 + sec(TTL + 1))
    assert [r.id for r in reaped] == [old.id]
    assert get(store, fresh.id) == fresh_before


def test_reap_takes_oldest_leases_first_bounded_by_limit(store: Store) -> None:
    t0 = store.db_now()
    # ids ascend while leases descend, so "oldest first" cannot pass by accident of row order
    ids = store.enqueue([new_job(lease_ttl=ttl) for ttl in (120.0, 90.0, 60.0, 45.0)], now=t0)
    store.claim(W, ["default"], 4, TTL, now=t0)
    by_lease = list(reversed(ids))
    later = t0 + sec(1000)
    assert [r.id for r in store.reap(2, now=later)] == by_lease[:2]
    assert {get(store, i).state for i in by_lease[2:]} == {JobState.RUNNING}
    assert [r.id for r in store.reap(1, now=later)] == [by_lease[2]]
    assert [r.id for r in store.reap(10, now=later)] == [by_lease[3]]
    assert store.reap(10, now=later) == []


def test_reap_leaves_a_lapsed_lease_alone_until_it_is_among_the_oldest(store: Store) -> None:
    t0 = store.db_now()
    ids = store.enqueue([new_job(lease_ttl=ttl) for ttl in (45.0, 30.0)], now=t0)
    store.claim(W, ["default"], 2, TTL, now=t0)
    (r,) = store.reap(1, now=t0 + sec(50))
    assert r.id == ids[1]  # the lease that lapsed first, not the lower id


def test_reap_requeues_at_once_while_budget_remains(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=3, backoff_base=600.0)
    tr = t0 + sec(TTL + 1)
    (r,) = store.reap(100, now=tr)
    assert r == Reaped(id=c.id, attempt=1, worker=W, outcome=Outcome.LEASE_EXPIRED, state=JobState.QUEUED,
                       queue="default", lease_until=r.lease_until)
    assert r.lease_until is not None and close_to(r.lease_until, t0 + sec(TTL))  # the lease that lapsed
    job = get(store, c.id)
    assert job.state is JobState.QUEUED
    assert (job.locked_by, job.lease_until, job.finished_at) == (None, None, None)
    assert close_to(job.run_at, t0)  # no backoff after a lapse: kept, due at once, in its old place
    assert job.last_error is not None and job.last_error.startswith("worker lease expired")
    assert W in job.last_error
    (att,) = job.attempts
    assert (att.attempt, att.worker, att.outcome) == (1, W, Outcome.LEASE_EXPIRED)
    assert att.error == job.last_error
    assert close_to(att.claimed_at, t0)
    assert close_to(att.finished_at, tr)
    assert claim_one(store, tr, worker=W2).attempt == 2


def test_reap_sends_a_spent_job_dead_with_a_reason(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=2)
    store.reap(100, now=t0 + sec(TTL + 1))
    c2 = claim_one(store, t0 + sec(TTL + 1))
    assert c2.attempt == 2
    tr = t0 + sec(2 * TTL + 2)
    (r,) = store.reap(100, now=tr)
    assert (r.id, r.attempt, r.state, r.outcome) == (c.id, 2, JobState.DEAD, Outcome.LEASE_EXPIRED)
    job = get(store, c.id)
    assert job.state is JobState.DEAD
    assert job.last_error is not None and job.last_error.startswith("worker lease expired")
    assert close_to(job.finished_at, tr)
    assert [(a.attempt, a.outcome) for a in job.attempts] == [(1, Outcome.LEASE_EXPIRED), (2, Outcome.LEASE_EXPIRED)]
    assert store.claim(W, ["default"], 10, TTL, now=tr + sec(99999)) == []


def test_reap_of_a_running_job_with_a_cancel_request_ends_cancelled(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=5)
    store.cancel(c.id, now=t0 + sec(1))
    (r,) = store.reap(100, now=t0 + sec(TTL + 1))
    assert (r.id, r.state) == (c.id, JobState.CANCELLED)
    job = get(store, c.id)
    assert job.state is JobState.CANCELLED and job.finished_at is not None
    assert store.claim(W, ["default"], 10, TTL, now=t0 + sec(99999)) == []


def test_reaping_twice_reaps_once(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    tr = t0 + sec(TTL + 1)
    assert len(store.reap(100, now=tr)) == 1
    after_first = get(store, c.id)
    assert store.reap(100, now=tr) == []
    assert store.reap(100, now=tr + sec(1000)) == []
    assert get(store, c.id) == after_first
    assert len(after_first.attempts) == 1


def test_reap_after_complete_does_nothing_and_complete_after_reap_is_refused(store: Store) -> None:
    t0 = store.db_now()
    done = start_job(store, t0, queue="done")
    lapsed = start_job(store, t0, queue="lapsed")
    tr = t0 + sec(TTL + 1)
    assert store.complete(W, [(done.id, 1, None)], now=tr) == {done.id}  # late, but nobody reaped it yet
    assert [r.id for r in store.reap(100, now=tr)] == [lapsed.id]
    after_reap = get(store, lapsed.id)
    assert store.complete(W, [(lapsed.id, 1, '"too late"')], now=tr) == set()
    assert get(store, lapsed.id) == after_reap
    assert get(store, done.id).state is JobState.SUCCEEDED


def test_attempt_timeout_is_reaped_at_its_deadline_despite_heartbeats(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, timeout=45.0, max_attempts=3)
    assert c.timeout == 45.0
    deadline = t0 + sec(45)
    assert close_to(get(store, c.id).lease_until, t0 + sec(TTL))
    for at in (10, 20, 30, 40, 44):
        assert store.heartbeat(W, [(c.id, 1)], TTL, now=t0 + sec(at)) == {c.id: Beat.RENEWED}
        lease = get(store, c.id).lease_until
        assert lease is not None and lease <= deadline + TOLERANCE  # never past the deadline
        assert close_to(lease, min(t0 + sec(at + TTL), deadline))
    store.progress(W, c.id, 1, 0.9, None, TTL, now=t0 + sec(44))
    assert close_to(get(store, c.id).lease_until, deadline)
    assert store.reap(100, now=t0 + sec(44.5)) == []
    (r,) = store.reap(100, now=t0 + sec(45.5))
    assert (r.id, r.attempt, r.worker, r.outcome, r.state) == (c.id, 1, W, Outcome.TIMED_OUT, JobState.QUEUED)
    job = get(store, c.id)
    assert job.last_error is not None and "timed out" in job.last_error
    assert [(a.attempt, a.outcome) for a in job.attempts] == [(1, Outcome.TIMED_OUT)]
    assert store.heartbeat(W, [(c.id, 1)], TTL, now=t0 + sec(46)) == {c.id: Beat.LOST}


@pytest.mark.parametrize("past", [0.0, 0.5, 20.0])
def test_heartbeat_at_or_past_the_deadline_is_lost_and_changes_nothing(store: Store, past: float) -> None:
    """The lease can never outlive the attempt's deadline, so a beat at or past
    it cannot renew anything: it says LOST (the reaper times the attempt out),
    not RENEWED, and leaves the row as it was."""
    t0 = store.db_now()
    c = start_job(store, t0, timeout=45.0)
    other = start_job(store, t0, queue="other")  # no timeout: the same beat renews it
    assert store.heartbeat(W, [(c.id, 1)], TTL, now=t0 + sec(40)) == {c.id: Beat.RENEWED}
    before = get(store, c.id)
    at = t0 + sec(45 + past)
    beats = store.heartbeat(W, [(c.id, 1), (other.id, 1)], TTL, now=at)
    assert beats == {c.id: Beat.LOST, other.id: Beat.RENEWED}
    assert get(store, c.id) == before
    assert close_to(get(store, other.id).lease_until, at + sec(TTL))
    (r,) = store.reap(100, now=at + sec(0.001))
    assert (r.id, r.attempt, r.outcome) == (c.id, 1, Outcome.TIMED_OUT)


def test_heartbeat_just_before_the_deadline_still_renews_up_to_it(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, timeout=45.0)
    assert store.heartbeat(W, [(c.id, 1)], TTL, now=t0 + sec(44.9)) == {c.id: Beat.RENEWED}
    assert close_to(get(store, c.id).lease_until, t0 + sec(45))


def test_heartbeat_past_the_deadline_with_a_cancel_request_is_lost(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, timeout=10.0)
    assert store.cancel(c.id, now=t0 + sec(1)) is JobState.RUNNING
    before = get(store, c.id)
    assert store.heartbeat(W, [(c.id, 1)], TTL, now=t0 + sec(10)) == {c.id: Beat.LOST}
    assert get(store, c.id) == before


@pytest.mark.parametrize("past", [0.0, 20.0])
def test_progress_at_or_past_the_deadline_raises_and_changes_nothing(store: Store, past: float) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, timeout=45.0)
    assert store.progress(W, c.id, 1, 0.5, "half", TTL, now=t0 + sec(40)) is False
    before = get(store, c.id)
    with pytest.raises(StaleAttempt) as info:
        store.progress(W, c.id, 1, 0.9, "nearly", TTL, now=t0 + sec(45 + past))
    assert (info.value.job_id, info.value.attempt, info.value.op) == (c.id, 1, "progress")
    assert get(store, c.id) == before


def test_the_attempts_own_report_after_its_deadline_is_still_accepted(store: Store) -> None:
    """Only renewals stop at the deadline. The worker cancels the handler at its
    local deadline (a little before the database's) and reports the attempt
    timed out; that fenced report may land after the deadline and must count,
    as must a success that arrives before the reaper moved the job on."""
    t0 = store.db_now()
    timed_out = start_job(store, t0, timeout=10.0, max_attempts=3)
    assert store.fail(W, timed_out.id, 1, outcome=Outcome.TIMED_OUT, error="attempt timed out after 10s",
                      now=t0 + sec(10.5)) is JobState.QUEUED
    assert finished_attempts(get(store, timed_out.id)) == [(1, Outcome.TIMED_OUT, W)]
    late = start_job(store, t0, queue="late", timeout=10.0)
    assert store.complete(W, [(late.id, 1, None)], now=t0 + sec(10.5)) == {late.id}
    assert store.reap(100, now=t0 + sec(11)) == []


def test_attempt_timeout_shorter_than_the_lease_caps_the_first_lease(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, timeout=10.0)
    assert close_to(get(store, c.id).lease_until, t0 + sec(10))
    (r,) = store.reap(100, now=t0 + sec(11))
    assert (r.id, r.outcome) == (c.id, Outcome.TIMED_OUT)


def test_lapse_before_the_deadline_is_lease_expired_not_timed_out(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, timeout=300.0)
    (r,) = store.reap(100, now=t0 + sec(TTL + 1))
    assert (r.id, r.outcome) == (c.id, Outcome.LEASE_EXPIRED)


def test_timeout_is_per_attempt(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, timeout=45.0, max_attempts=3)
    store.reap(100, now=t0 + sec(46))
    t1 = t0 + sec(100)
    c2 = claim_one(store, t1)
    assert (c2.id, c2.attempt) == (c.id, 2)
    assert close_to(get(store, c.id).lease_until, t1 + sec(TTL))
    store.heartbeat(W, [(c.id, 2)], TTL, now=t1 + sec(40))
    assert close_to(get(store, c.id).lease_until, t1 + sec(45))


def _check_race_outcome(store: Store, job_id: int, accepted: set[int], reaped: list[Reaped]) -> str:
    """Exactly one of complete and reap took the job; the row and audit trail agree."""
    job = get(store, job_id)
    won_complete = job_id in accepted
    won_reap = [r for r in reaped if r.id == job_id]
    assert won_complete != bool(won_reap), f"job {job_id}: complete={won_complete} reap={won_reap}"
    rows = [a for a in job.attempts if a.attempt == 1]
    assert len(rows) == 1, f"job {job_id} has {len(rows)} attempt rows for attempt 1"
    if won_complete:
        assert job.state is JobState.SUCCEEDED
        assert rows[0].outcome is Outcome.SUCCEEDED
        return "complete"
    assert job.state is won_reap[0].state
    assert job.state in (JobState.QUEUED, JobState.DEAD)
    assert rows[0].outcome is Outcome.LEASE_EXPIRED
    assert job.result is None
    return "reap"


def test_reap_racing_complete_on_one_row_leaves_exactly_one_outcome(store: Store) -> None:
    t0 = store.db_now()
    tr = t0 + sec(TTL + 1)
    winners: dict[str, int] = {"complete": 0, "reap": 0}
    for i in range(30):
        # its own queue, so a job requeued by an earlier round is never claimed again here
        c = start_job(store, t0, queue=f"race{i}", max_attempts=1 + (i % 2) * 2)
        accepted, reaped = race(
            partial(store.complete, W, [(c.id, c.attempt, '"done"')], now=tr),
            partial(store.reap, 100, now=tr),
        )
        winners[_check_race_outcome(store, c.id, accepted, reaped)] += 1
        # nothing is left running, so the next round races on its own row alone
        assert store.list_jobs(state="running") == []
    assert sum(winners.values()) == 30


def test_many_reapers_racing_reap_each_job_once(store: Store) -> None:
    t0 = store.db_now()
    store.enqueue([new_job(max_attempts=3) for _ in range(40)], now=t0)
    store.claim(W, ["default"], 40, TTL, now=t0)
    tr = t0 + sec(TTL + 1)
    first, second = race(lambda: store.reap(1000, now=tr), lambda: store.reap(1000, now=tr))
    ids_first, ids_second = [r.id for r in first], [r.id for r in second]
    assert set(ids_first).isdisjoint(ids_second)
    assert len(ids_first) + len(ids_second) == 40
    for job in store.list_jobs(limit=100):
        assert job.state is JobState.QUEUED
        assert [(a.attempt, a.outcome) for a in get(store, job.id).attempts] == [(1, Outcome.LEASE_EXPIRED)]


# -- lapse_leases (start-up reconciliation) -------------------------------------------


def test_lapse_leases_ends_only_those_workers_leases(store: Store) -> None:
    t0 = store.db_now()
    store.enqueue([new_job() for _ in range(6)], now=t0)
    dead = {c.id for c in store.claim(W, ["default"], 3, TTL, now=t0)}
    alive = {c.id for c in store.claim(W2, ["default"], 3, TTL, now=t0)}
    alive_before = {i: get(store, i) for i in alive}
    t1 = t0 + sec(1)
    assert store.reap(100, now=t1) == []
    assert store.lapse_leases([W, "nobody"], now=t1) == 3
    assert store.lapse_leases([], now=t1) == 0
    reaped = store.reap(100, now=t1)
    assert {r.id for r in reaped} == dead
    assert {r.worker for r in reaped} == {W}
    assert {get(store, i).state for i in dead} == {JobState.QUEUED}
    assert {i: get(store, i) for i in alive} == alive_before


# -- dedup keys ----------------------------------------------------------------------


def test_dedup_key_returns_the_active_job_while_queued_or_running(store: Store) -> None:
    t0 = store.db_now()
    first = enqueue_one(store, t0, dedup_key="report:42", args={"n": 1})
    assert enqueue_one(store, t0, dedup_key="report:42", args={"n": 2}) == first
    assert all_ids(store) == {first}
    claim_one(store, t0)
    assert enqueue_one(store, t0, dedup_key="report:42", args={"n": 3}) == first
    assert all_ids(store) == {first}
    assert get(store, first).args == {"n": 1}


def test_dedup_key_is_free_again_once_the_job_finishes(store: Store) -> None:
    t0 = store.db_now()
    first = enqueue_one(store, t0, dedup_key="k")
    c = claim_one(store, t0)
    store.complete(W, [(c.id, 1, None)], now=t0)
    second = enqueue_one(store, t0, dedup_key="k")
    assert second != first
    assert store.cancel(second, now=t0) is JobState.CANCELLED
    third = enqueue_one(store, t0, dedup_key="k")
    assert len({first, second, third}) == 3
    assert get(store, third).state is JobState.QUEUED


def test_concurrent_enqueues_with_one_dedup_key_insert_one_job(store: Store) -> None:
    t0 = store.db_now()
    for i in range(10):
        key = f"race:{i}"
        first, second = race(
            partial(store.enqueue, [new_job(dedup_key=key, args={"by": "a"})], now=t0),
            partial(store.enqueue, [new_job(dedup_key=key, args={"by": "b"})], now=t0),
        )
        assert first == second
        assert [j.dedup_key for j in store.list_jobs(limit=100)].count(key) == 1


def test_dedup_keys_collapse_within_one_batch(store: Store) -> None:
    t0 = store.db_now()
    held = enqueue_one(store, t0, dedup_key="held")
    ids = store.enqueue(
        [
            new_job(dedup_key="a", args={"n": 0}),
            new_job(args={"n": 1}),
            new_job(dedup_key="a", args={"n": 2}),
            new_job(dedup_key="held", args={"n": 3}),
            new_job(dedup_key="b", args={"n": 4}),
            new_job(args={"n": 5}),
            new_job(dedup_key="a", args={"n": 6}),
        ],
        now=t0,
    )
    assert ids[0] == ids[2] == ids[6]
    assert ids[3] == held
    assert len({ids[0], ids[1], ids[4], ids[5], held}) == 5
    assert all_ids(store) == {held, ids[0], ids[1], ids[4], ids[5]}
    assert get(store, ids[0]).args == {"n": 0}  # the first in the batch wins
    assert get(store, ids[1]).args == {"n": 1}
    assert get(store, ids[5]).args == {"n": 5}


# -- cancel ----------------------------------------------------------------------------


def test_cancel_of_a_queued_job_is_immediate_and_final(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0)
    assert store.cancel(job_id, now=t0 + sec(1)) is JobState.CANCELLED
    job = get(store, job_id)
    assert job.state is JobState.CANCELLED
    assert close_to(job.finished_at, t0 + sec(1))
    assert store.claim(W, ["default"], 10, TTL, now=t0 + sec(99999)) == []


def test_cancel_of_a_running_job_requests_cancellation(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    assert store.cancel(c.id, now=t0 + sec(1)) is JobState.RUNNING
    job = get(store, c.id)
    assert (job.state, job.cancel_requested, job.locked_by, job.attempt) == (JobState.RUNNING, True, W, 1)
    assert store.heartbeat(W, [(c.id, 1)], TTL, now=t0 + sec(2)) == {c.id: Beat.CANCEL_REQUESTED}
    # asking twice is harmless
    assert store.cancel(c.id, now=t0 + sec(3)) is JobState.RUNNING
    assert store.fail(W, c.id, 1, outcome=Outcome.CANCELLED, error="cancelled", now=t0 + sec(4)) is JobState.CANCELLED


def test_cancel_of_a_finished_job_is_an_invalid_transition(store: Store) -> None:
    t0 = store.db_now()
    done = start_job(store, t0, queue="done")
    store.complete(W, [(done.id, 1, None)], now=t0)
    dead = start_job(store, t0, queue="dead")
    store.fail(W, dead.id, 1, outcome=Outcome.FAILED, error="x", retry=False, now=t0)
    cancelled = enqueue_one(store, t0)
    store.cancel(cancelled, now=t0)
    for job_id in (done.id, dead.id, cancelled):
        before = get(store, job_id)
        with pytest.raises(InvalidTransition):
            store.cancel(job_id, now=t0 + sec(1))
        assert get(store, job_id) == before


def test_cancel_of_an_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.cancel(UNKNOWN_ID)


# -- retry -----------------------------------------------------------------------------


def test_retry_of_a_dead_job_requeues_it_with_an_attempt_left(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=1)
    assert store.fail(W, c.id, 1, outcome=Outcome.FAILED, error="x", now=t0) is JobState.DEAD
    t1 = t0 + sec(10)
    store.retry(c.id, now=t1)
    job = get(store, c.id)
    assert job.state is JobState.QUEUED and job.finished_at is None
    assert job.max_attempts - job.attempts_used >= 1
    assert close_to(job.run_at, t1)
    c2 = claim_one(store, t1)
    assert (c2.id, c2.attempt) == (c.id, 2)
    assert store.fail(W, c.id, 2, outcome=Outcome.FAILED, error="x", now=t1) is JobState.DEAD


def test_retry_of_a_cancelled_job_requeues_it(store: Store) -> None:
    t0 = store.db_now()
    queued = enqueue_one(store, t0, queue="q1")
    store.cancel(queued, now=t0)
    running = start_job(store, t0, queue="q2")
    store.cancel(running.id, now=t0)
    store.fail(W, running.id, 1, outcome=Outcome.CANCELLED, error="cancelled", now=t0)
    for job_id, queue in ((queued, "q1"), (running.id, "q2")):
        assert store.retry(job_id, now=t0 + sec(1)) == queue  # for the caller to announce it on a transport
        job = get(store, job_id)
        assert (job.state, job.cancel_requested) == (JobState.QUEUED, False)
        assert claim_one(store, t0 + sec(1), queues=[queue]).id == job_id
        assert store.heartbeat(W, [(job_id, job.attempt + 1)], TTL, now=t0 + sec(2)) == {job_id: Beat.RENEWED}


def test_retry_of_an_active_or_succeeded_job_is_an_invalid_transition(store: Store) -> None:
    t0 = store.db_now()
    queued = enqueue_one(store, t0, queue="q")
    running = start_job(store, t0, queue="r")
    done = start_job(store, t0, queue="d")
    store.complete(W, [(done.id, 1, None)], now=t0)
    for job_id in (queued, running.id, done.id):
        before = get(store, job_id)
        with pytest.raises(InvalidTransition):
            store.retry(job_id, now=t0)
        assert get(store, job_id) == before


def test_retry_of_an_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.retry(UNKNOWN_ID)


def test_retry_refuses_when_its_dedup_key_is_held_again(store: Store) -> None:
    t0 = store.db_now()
    old = enqueue_one(store, t0, dedup_key="k")
    store.cancel(old, now=t0)
    new = enqueue_one(store, t0, dedup_key="k")
    assert new != old
    with pytest.raises(InvalidTransition):
        store.retry(old, now=t0)
    assert get(store, old).state is JobState.CANCELLED


# -- reads -----------------------------------------------------------------------------


def test_get_job_includes_the_running_attempt_in_the_history(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=3, backoff_base=1.0)
    store.fail(W, c.id, 1, outcome=Outcome.FAILED, error="first", traceback="tb", now=t0 + sec(1))
    t1 = t0 + sec(10)
    claim_one(store, t1, worker=W2)
    job = get(store, c.id)
    assert len(job.attempts) == 2
    first, running = job.attempts
    assert (first.attempt, first.worker, first.outcome, first.error, first.traceback) == (
        1, W, Outcome.FAILED, "first", "tb")
    assert (running.attempt, running.worker, running.outcome, running.finished_at) == (2, W2, None, None)
    assert close_to(running.claimed_at, t1)
    assert store.get_job(UNKNOWN_ID + 1) is None


def test_list_jobs_filters_by_state_queue_and_task(store: Store) -> None:
    t0 = store.db_now()
    a = enqueue_one(store, t0, task="alpha", queue="q1")
    b = enqueue_one(store, t0, task="beta", queue="q1")
    c = enqueue_one(store, t0, task="alpha", queue="q2")
    d = enqueue_one(store, t0, task="beta", queue="q2")
    claim_one(store, t0, queues=["q2"])  # c: the first of q2
    assert [j.id for j in store.list_jobs()] == [d, c, b, a]  # newest first
    assert [j.id for j in store.list_jobs(limit=2)] == [d, c]
    assert [j.id for j in store.list_jobs(state="running")] == [c]
    assert [j.id for j in store.list_jobs(state=JobState.RUNNING)] == [c]  # the enum is a str
    assert [j.id for j in store.list_jobs(state="queued")] == [d, b, a]
    assert [j.id for j in store.list_jobs(queue="q1")] == [b, a]
    assert [j.id for j in store.list_jobs(task="alpha")] == [c, a]
    assert [j.id for j in store.list_jobs(state="queued", queue="q2", task="beta")] == [d]
    assert store.list_jobs(state="dead") == []
    assert store.list_jobs(queue="nope") == []


def test_stats_counts_jobs_by_queue_and_state(store: Store) -> None:
    t0 = store.db_now()
    store.enqueue([new_job(queue="q1") for _ in range(3)] + [new_job(queue="q2") for _ in range(2)], now=t0)
    c = claim_one(store, t0, queues=["q1"])
    store.complete(W, [(c.id, 1, None)], now=t0)
    claim_one(store, t0, queues=["q2"])
    stats = store.stats()
    assert stats.counts == {
        ("q1", "queued"): 2,
        ("q1", "succeeded"): 1,
        ("q2", "queued"): 1,
        ("q2", "running"): 1,
    }
    assert set(stats.oldest_queued) == {"q1", "q2"}
    assert close_to(stats.oldest_queued["q1"], t0)
    assert stats.now >= t0


# -- terminal is final ----------------------------------------------------------------


def test_terminal_jobs_are_never_claimed_or_reaped_again(store: Store) -> None:
    t0 = store.db_now()
    succeeded = start_job(store, t0, queue="s")
    store.complete(W, [(succeeded.id, 1, None)], now=t0)
    dead = start_job(store, t0, queue="d", max_attempts=1)
    store.reap(100, now=t0 + sec(TTL + 1))
    cancelled = enqueue_one(store, t0, queue="c")
    store.cancel(cancelled, now=t0)
    ids = (succeeded.id, dead.id, cancelled)
    assert [get(store, i).state for i in ids] == [JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED]
    before = {i: get(store, i) for i in ids}
    for later in (t0 + sec(TTL + 2), t0 + sec(86400), t0 + sec(10 * 86400)):
        assert store.claim(W, ["s", "d", "c", "default"], 100, TTL, now=later) == []
        assert store.reap(100, now=later) == []
        assert store.heartbeat(W, [(i, 1) for i in ids], TTL, now=later) == {i: Beat.LOST for i in ids}
    assert store.lapse_leases([W], now=t0) == 0
    assert {i: get(store, i) for i in ids} == before


def test_a_running_row_always_holds_a_lease(store: Store) -> None:
    t0 = store.db_now()
    store.enqueue([new_job(lease_ttl=60.0 if i % 2 else None) for i in range(10)], now=t0)
    store.claim(W, ["default"], 10, TTL, now=t0)
    for job in store.list_jobs(state="running"):
        assert job.locked_by == W
        assert job.lease_until is not None and job.lease_until > t0
        assert job.claimed_at is not None


# -- claim_ids: what a transport delivered; the database decides ----------------------
# A transport may deliver any id at any time: twice, late, after the job ran,
# before it is due, to a worker of another queue. Each case must take nothing
# and change nothing; without the state, due or queue condition in the
# statement, one of them would hand a job to a second owner.

GRACE = 5.0


def test_claim_ids_takes_a_queued_due_job_like_claim(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, queue="mail", priority=3, lease_ttl=45.0, timeout=100.0)
    (c,) = rounds.claim_ids(W, [job_id], ["mail"], TTL, now=t0 + sec(1))
    assert (c.id, c.attempt, c.queue, c.priority, c.lease_ttl, c.timeout) == (job_id, 1, "mail", 3, 45.0, 100.0)
    job = get(store, job_id)
    assert (job.state, job.attempt, job.locked_by) == (JobState.RUNNING, 1, W)
    assert close_to(job.lease_until, t0 + sec(46))
    assert close_to(job.claimed_at, t0 + sec(1))


def test_claim_ids_refuses_a_job_someone_holds(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    before = get(store, c.id)
    assert rounds.claim_ids(W2, [c.id], ["default"], TTL, now=t0 + sec(1)) == []
    assert rounds.claim_ids(W, [c.id], ["default"], TTL, now=t0 + sec(1)) == []  # not even its owner
    assert get(store, c.id) == before


@pytest.mark.parametrize("end", ["complete", "dead", "cancelled"])
def test_claim_ids_refuses_a_finished_job(store: Store, end: str) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    if end == "complete":
        store.complete(W, [(c.id, c.attempt, None)], now=t0)
    elif end == "dead":
        store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", retry=False, now=t0)
    else:
        store.cancel(c.id, now=t0)
        store.fail(W, c.id, c.attempt, outcome=Outcome.CANCELLED, error="x", retry=False, now=t0)
    before = get(store, c.id)
    assert before.state in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED)
    assert store.claim_ids(W2, [c.id], ["default"], TTL, now=t0 + sec(1)) == []
    assert get(store, c.id) == before


def test_claim_ids_refuses_a_job_not_yet_due(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, delay=60.0)
    before = get(store, job_id)
    assert store.claim_ids(W, [job_id], ["default"], TTL, now=t0 + sec(59)) == []
    assert get(store, job_id) == before
    assert [c.id for c in store.claim_ids(W, [job_id], ["default"], TTL, now=t0 + sec(61))] == [job_id]


def test_claim_ids_refuses_a_job_of_another_queue(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, queue="mail")
    before = get(store, job_id)
    assert store.claim_ids(W, [job_id], ["default", "images"], TTL, now=t0) == []
    assert get(store, job_id) == before


def test_claim_ids_takes_only_what_it_may_from_a_mixed_batch(store: Store) -> None:
    t0 = store.db_now()
    held = start_job(store, t0)
    free = [enqueue_one(store, t0) for _ in range(3)]
    later = enqueue_one(store, t0, delay=600.0)
    got = store.claim_ids(W2, [held.id, *free, later, UNKNOWN_ID], ["default"], TTL, now=t0 + sec(1))
    assert sorted(c.id for c in got) == free
    assert all(c.attempt == 1 for c in got)
    assert get(store, held.id).locked_by == W


def test_claim_ids_after_reap_is_the_next_attempt(store: Store) -> None:
    """A message republished after the reaper requeued the job claims attempt 2;
    the old attempt's fence then refuses the zombie."""
    t0 = store.db_now()
    c = start_job(store, t0)
    store.reap(100, now=t0 + sec(TTL + 1))
    (c2,) = store.claim_ids(W2, [c.id], ["default"], TTL, now=t0 + sec(TTL + 2))
    assert (c2.id, c2.attempt) == (c.id, 2)
    assert store.complete(W, [(c.id, c.attempt, None)], now=t0 + sec(TTL + 3)) == set()
    assert get(store, c.id).locked_by == W2


def test_claim_ids_one_id_delivered_to_two_workers_runs_once(store: Store) -> None:
    t0 = store.db_now()
    for _ in range(20):  # many rounds: the race must never go both ways
        job_id = enqueue_one(store, t0)
        a, b = race(lambda j=job_id: store.claim_ids(W, [j], ["default"], TTL),  # type: ignore[misc]
                    lambda j=job_id: store.claim_ids(W2, [j], ["default"], TTL))  # type: ignore[misc]
        assert len(a) + len(b) == 1, (a, b)
        job = get(store, job_id)
        assert job.attempt == 1 and job.locked_by == (W if a else W2)


def test_claim_ids_overlapping_batches_do_not_deadlock(store: Store) -> None:
    t0 = store.db_now()
    ids = [enqueue_one(store, t0) for _ in range(40)]
    a, b = race(lambda: store.claim_ids(W, ids, ["default"], TTL),
                lambda: store.claim_ids(W2, list(reversed(ids)), ["default"], TTL))
    assert sorted(c.id for c in a + b) == ids  # every job claimed exactly once


def test_claim_ids_of_nothing_is_nothing(store: Store) -> None:
    assert store.claim_ids(W, [], ["default"], TTL) == []


# -- the sweep's query --------------------------------------------------------------


def test_due_unclaimed_waits_grace_for_a_job_its_enqueue_published(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0)
    assert store.due_unclaimed(["default"], grace=GRACE, limit=10, now=t0 + sec(GRACE - 1)) == []
    (d,) = store.due_unclaimed(["default"], grace=GRACE, limit=10, now=t0 + sec(GRACE + 1))
    assert (d.id, d.queue, d.attempt) == (job_id, "default", 0)
    assert close_to(d.run_at, t0)


def test_due_unclaimed_returns_a_delayed_job_as_soon_as_it_is_due(store: Store) -> None:
    t0 = store.db_now()
    job_id = enqueue_one(store, t0, delay=60.0)
    assert store.due_unclaimed(["default"], grace=GRACE, limit=10, now=t0 + sec(59)) == []
    assert [d.id for d in store.due_unclaimed(["default"], grace=GRACE, limit=10, now=t0 + sec(60.5))] == [job_id]
    short = enqueue_one(store, t0, delay=0.5)  # however short the delay: nothing published it
    assert short in [d.id for d in store.due_unclaimed(["default"], grace=GRACE, limit=10, now=t0 + sec(0.6))]


def test_due_unclaimed_skips_running_finished_and_other_queues(store: Store) -> None:
    t0 = store.db_now()
    running = start_job(store, t0)
    done = start_job(store, t0)
    store.complete(W, [(done.id, done.attempt, None)], now=t0)
    enqueue_one(store, t0, queue="elsewhere")
    waiting = enqueue_one(store, t0)
    later = t0 + sec(GRACE + 1)
    assert [d.id for d in store.due_unclaimed(["default"], grace=GRACE, limit=10, now=later)] == [waiting]
    assert running.id != waiting


def test_due_unclaimed_is_bounded_and_in_claim_order(store: Store) -> None:
    t0 = store.db_now()
    low = [enqueue_one(store, t0) for _ in range(3)]
    high = enqueue_one(store, t0, priority=9)
    got = store.due_unclaimed(["default"], grace=GRACE, limit=2, now=t0 + sec(GRACE + 1))
    assert [d.id for d in got] == [high, low[0]]


def test_due_unclaimed_sees_a_retry_when_its_backoff_ends(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, backoff_base=100.0)
    store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", now=t0)
    run_at = get(store, c.id).run_at
    assert store.due_unclaimed(["default"], grace=GRACE, limit=10, now=run_at - sec(1)) == []
    (d,) = store.due_unclaimed(["default"], grace=GRACE, limit=10, now=run_at + sec(0.5))
    assert (d.id, d.attempt) == (c.id, 1)
    assert claim_one(store, run_at + sec(1)).id == c.id


# -- throughput -----------------------------------------------------------------


def minute_before(store: Store, minutes: int) -> datetime:
    """A minute boundary (UTC) ``minutes`` before the database clock's minute."""
    now = store.db_now()
    return datetime.fromtimestamp((int(now.timestamp()) // 60 - minutes) * 60, tz=UTC)


def no_outcomes(**counts: int) -> dict[Outcome, int]:
    return {**dict.fromkeys(Outcome, 0), **{Outcome(k): n for k, n in counts.items()}}


def test_throughput_counts_each_finished_attempt_in_its_bucket_by_outcome(store: Store) -> None:
    m = minute_before(store, 60)
    runs = iter(range(100))

    def run(at: datetime) -> ClaimedJob:  # a job of its own queue, claimed at ``at``
        return start_job(store, at, queue=f"q{next(runs)}")

    def succeed(at: datetime) -> None:
        c = run(at)
        assert store.complete(W, [(c.id, c.attempt, None)], now=at) == {c.id}

    succeed(m - sec(0.001))  # just before the window
    succeed(m + sec(5))
    succeed(m + sec(59.999))
    succeed(m + sec(60))  # on the edge: the later bucket
    c = run(m + sec(61))
    store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", retry=False, now=m + sec(61))
    c = run(m + sec(90))  # lease until m + 120; the reaper finds it at m + 125
    assert [r.outcome for r in store.reap(10, now=m + sec(125))] == [Outcome.LEASE_EXPIRED]
    c = run(m + sec(130))
    store.fail(W, c.id, c.attempt, outcome=Outcome.CANCELLED, error="stop", now=m + sec(130))
    c = run(m + sec(170))
    store.release(W, c.id, c.attempt, now=m + sec(179.5))
    succeed(m + sec(240))  # the first instant after the window

    got = store.throughput(buckets=4, bucket_seconds=60, now=m + sec(190))

    assert [b.start for b in got] == [m, m + sec(60), m + sec(120), m + sec(180)]
    assert {b.seconds for b in got} == {60}
    assert [b.counts for b in got] == [
        no_outcomes(succeeded=2),
        no_outcomes(succeeded=1, failed=1),
        no_outcomes(lease_expired=1, cancelled=1, released=1),
        no_outcomes(),
    ]


def test_throughput_of_an_empty_window_is_every_bucket_at_zero(store: Store) -> None:
    m = minute_before(store, 10)
    got = store.throughput(buckets=3, bucket_seconds=60, now=m + sec(30))
    assert [b.start for b in got] == [m - sec(120), m - sec(60), m]
    assert all(b.counts == no_outcomes() for b in got)


def test_throughput_buckets_are_aligned_to_the_epoch_and_end_with_now(store: Store) -> None:
    m = minute_before(store, 60)
    five = datetime.fromtimestamp(int(m.timestamp()) // 300 * 300, tz=UTC)
    got = store.throughput(buckets=2, bucket_seconds=300, now=five + sec(299.5))
    assert [b.start for b in got] == [five - sec(300), five]
    on_edge = store.throughput(buckets=2, bucket_seconds=300, now=five + sec(300))
    assert [b.start for b in on_edge] == [five, five + sec(300)]


def test_throughput_reads_the_database_clock_without_now(store: Store) -> None:
    c = start_job(store, store.db_now())
    store.complete(W, [(c.id, c.attempt, None)])
    got = store.throughput(buckets=2, bucket_seconds=3600)  # the attempt is in the last two hours
    assert sum(b.counts[Outcome.SUCCEEDED] for b in got) == 1
    assert got[-1].start <= store.db_now() < got[-1].start + sec(3600)


@pytest.mark.parametrize(("buckets", "bucket_seconds"), [(0, 60), (MAX_BUCKETS + 1, 60), (1, 0),
                                                         (1, MAX_BUCKET_SECONDS + 1)])
def test_throughput_refuses_sizes_out_of_bounds(store: Store, buckets: int, bucket_seconds: int) -> None:
    with pytest.raises(ConfigError, match="throughput"):
        store.throughput(buckets=buckets, bucket_seconds=bucket_seconds)
