"""The conformance suite for queue limits and exclusive keys (issue 20), on
every backend (the ``store`` fixture as in test_conformance.py): concurrency
and rate limits (``set_limits``, read by the claim statements themselves) and
exclusive keys, through every claim path (claim, claim with known tasks,
complete_and_claim sync and async, claim_ids, complete_and_claim_ids). Nothing sleeps: clocks are
moved with ``now=``. On PostgreSQL, racing claimers on threads check that the
limit holds across concurrent transactions, which is what claim_room's lock is
for (one statement's snapshot alone would let two claims overrun it)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tether.errors import ConfigError
from tether.model import ClaimedJob, JobState, QueueLimits
from tether.store import Store

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import TTL, W2, Rounds, W, get, new_job, sec

Q = "limited"


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture(params=["sync", "async"])
def rounds(store: Store, request: pytest.FixtureRequest) -> Rounds:
    return Rounds(store, request.param)


def running(store: Store, queue: str = Q) -> int:
    return store.stats().counts.get((queue, JobState.RUNNING), 0)


def fill(store: Store, n: int, now: object, queue: str = Q, **options: object) -> list[int]:
    return store.enqueue([new_job(queue=queue, args={"i": i}, **options) for i in range(n)], now=now)  # type: ignore[arg-type]


def test_limits_are_stored_read_back_and_lifted(store: Store) -> None:
    assert store.queue_limits() == []
    store.set_limits(QueueLimits(Q, concurrency=5, rate_limit=100, rate_period=60))
    store.set_limits(QueueLimits("other", concurrency=2))
    assert store.queue_limits() == [QueueLimits("limited", 5, 100, 60.0, 0, 0), QueueLimits("other", 2, None, None)]
    store.set_paused(Q, True)  # pausing keeps the limits, and setting limits keeps the pause
    store.set_limits(QueueLimits(Q, concurrency=3))
    assert store.paused_queues() == [Q]
    assert store.queue_limits()[0] == QueueLimits(Q, 3, None, None)
    store.set_limits(QueueLimits(Q))
    store.set_limits(QueueLimits("other"))
    assert store.queue_limits() == []


@pytest.mark.parametrize("bad", [
    QueueLimits(Q, concurrency=0), QueueLimits(Q, concurrency=-1), QueueLimits(Q, concurrency=2.5),  # type: ignore[arg-type]
    QueueLimits(Q, rate_limit=10), QueueLimits(Q, rate_period=60), QueueLimits(Q, rate_limit=0, rate_period=60),
    QueueLimits(Q, rate_limit=10, rate_period=0), QueueLimits("bad queue!", concurrency=1),
])
def test_bad_limits_are_refused_and_change_nothing(store: Store, bad: QueueLimits) -> None:
    store.set_limits(QueueLimits(Q, concurrency=4))
    with pytest.raises(ConfigError):
        store.set_limits(bad)
    assert store.queue_limits() == [QueueLimits(Q, 4, None, None)]


def test_concurrency_caps_running_jobs_through_every_claim_path(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=3))
    fill(store, 10, t0)
    first = rounds.claim(W, [Q], 10, TTL, now=t0)
    assert len(first) == 3
    assert rounds.claim(W2, [Q], 10, TTL, now=t0) == []
    assert rounds.claim(W2, [Q], 10, TTL, now=t0, tasks=["t"]) == []
    # one finishes: exactly one more may start, in the same round trip as the completion
    done, more = rounds.complete_and_claim(W, [(first[0].id, first[0].attempt, None)], [Q], 10, TTL, now=t0)
    assert done == {first[0].id} and len(more) == 1
    assert running(store) == 3
    # the limit is per queue: another queue's jobs are claimed beside it, up to the claim's own limit
    fill(store, 4, t0, queue="free")
    both = rounds.claim(W2, [Q, "free"], 10, TTL, now=t0)
    assert [c.queue for c in both] == ["free"] * 4


def test_concurrency_holds_for_a_worker_that_names_its_tasks(store: Store) -> None:
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=4))
    store.enqueue([new_job(task=t, queue=Q) for t in ("a", "b", "c") for _ in range(3)], now=t0)
    got = store.claim(W, [Q], 50, TTL, now=t0, tasks=["a", "b", "c"])
    assert len(got) == 4  # not 4 per task
    assert [c.task for c in got] == ["a", "a", "a", "b"]  # claim order kept


def test_a_dead_workers_jobs_count_until_the_reaper_ends_them(store: Store) -> None:
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=2))
    fill(store, 4, t0)
    assert len(store.claim(W, [Q], 10, 5.0, now=t0)) == 2
    later = t0 + sec(60)  # W is gone: its leases lapsed, but its jobs are still running rows
    assert store.claim(W2, [Q], 10, TTL, now=later) == []
    assert len(store.reap(100, now=later)) == 2
    assert len(store.claim(W2, [Q], 10, TTL, now=later)) == 2


def test_a_raised_limit_makes_room_and_a_lowered_one_starts_nothing_new(store: Store) -> None:
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=1))
    fill(store, 6, t0)
    assert len(store.claim(W, [Q], 10, TTL, now=t0)) == 1
    store.set_limits(QueueLimits(Q, concurrency=4))
    assert len(store.claim(W, [Q], 10, TTL, now=t0)) == 3
    store.set_limits(QueueLimits(Q, concurrency=2))  # 4 running: they go on, none starts
    assert store.claim(W, [Q], 10, TTL, now=t0) == []
    assert running(store) == 4
    store.set_limits(QueueLimits(Q))
    assert len(store.claim(W, [Q], 10, TTL, now=t0)) == 2


def test_rate_limits_starts_in_any_window_not_running_jobs(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, rate_limit=3, rate_period=60))
    fill(store, 10, t0)
    got = rounds.claim(W, [Q], 2, TTL, now=t0)
    assert len(got) == 2
    done, more = rounds.complete_and_claim(W, [(c.id, c.attempt, None) for c in got], [Q], 10, TTL, now=t0 + sec(30))
    assert len(done) == 2 and len(more) == 1  # finished jobs still count: 3 started in the window
    assert rounds.claim(W, [Q], 10, TTL, now=t0 + sec(59)) == []
    assert store.queue_limits(now=t0 + sec(59))[0].started == 3
    # the two from t0 leave the window at t0 + 60: two more; the one from t0 + 30 still counts
    assert len(rounds.claim(W, [Q], 10, TTL, now=t0 + sec(61))) == 2
    assert rounds.claim(W, [Q], 10, TTL, now=t0 + sec(89)) == []
    assert len(rounds.claim(W, [Q], 10, TTL, now=t0 + sec(91))) == 1


def test_rate_and_concurrency_together_take_the_smaller_room(store: Store) -> None:
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=2, rate_limit=3, rate_period=60))
    fill(store, 10, t0)
    a = store.claim(W, [Q], 10, TTL, now=t0)
    assert len(a) == 2
    store.complete(W, [(c.id, c.attempt, None) for c in a], now=t0)
    assert len(store.claim(W, [Q], 10, TTL, now=t0)) == 1  # rate: 3 - 2
    assert running(store) == 1


def test_an_exclusive_key_runs_one_job_at_a_time(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    keyed = [store.enqueue([new_job(queue=Q, exclusive_key="customer:42", priority=p)], now=t0)[0]
             for p in (5, 3, 1)]
    other_key = store.enqueue([new_job(queue=Q, exclusive_key="customer:7")], now=t0)[0]
    free = fill(store, 2, t0)
    got = {c.id for c in rounds.claim(W, [Q], 10, TTL, now=t0)}
    assert got == {keyed[0], other_key, *free}  # the best job of each key, and every job without one
    assert get(store, keyed[0]).exclusive_key == "customer:42"
    listed = {j.id: j.exclusive_key for j in store.list_jobs(queue=Q, limit=100)}
    assert listed[keyed[1]] == "customer:42" and listed[free[0]] is None
    assert rounds.claim(W2, [Q], 10, TTL, now=t0) == []
    done, more = rounds.complete_and_claim(W, [(keyed[0], 1, None)], [Q], 10, TTL, now=t0)
    assert done == {keyed[0]} and [c.id for c in more] == [keyed[1]]


def test_a_claim_of_keyed_jobs_takes_one_job_of_each_of_as_many_keys_as_it_asks_for(store: Store,
                                                                                    rounds: Rounds) -> None:
    """Each key's jobs enqueued together (a burst per customer, the usual
    shape): a claim of 10 takes the first job of 10 keys. Only a key's first
    queued, due job is a candidate. On PostgreSQL every job of a free key
    passed, the claim's LIMIT filled with a few keys' bursts, and only one job
    of each was kept: a claim of 10 over bursts of 5 took 2."""
    t0 = store.db_now()
    jobs = [new_job(queue=Q, exclusive_key=f"customer:{k}", args={"n": n}) for k in range(30) for n in range(5)]
    ids = store.enqueue(jobs, now=t0)
    firsts = ids[::5]
    got = rounds.claim(W, [Q], 10, TTL, now=t0)
    assert [c.id for c in got] == firsts[:10]
    got = rounds.claim(W2, [Q], 10, TTL, now=t0, tasks=["t"])  # the held keys' jobs are passed over
    assert [c.id for c in got] == firsts[10:20]
    assert [c.id for c in store.claim_ids(W2, ids[1:5] + firsts[20:22], [Q], TTL, now=t0)] == firsts[20:22]
    # the next job of a key is its first once the one before it ends
    done, more = rounds.complete_and_claim(W, [(firsts[0], 1, None)], [Q], 10, TTL, now=t0)
    assert done == {firsts[0]} and [c.id for c in more] == [ids[1], *firsts[22:30]]


def test_a_job_recovered_or_released_keeps_its_place_in_its_keys_order(store: Store) -> None:
    """The reaper and a graceful release keep the job's run_at (it was due
    before its claim): it comes back first in its key's claim order. With
    run_at set to now, a recovered job went behind the jobs of its key enqueued
    after it (a user's walkthrough: job 4 of key k, killed, ran after job 5)."""
    t0 = store.db_now()
    first, second = (store.enqueue([new_job(exclusive_key="k")], now=t0 + sec(i))[0] for i in range(2))
    later = t0 + sec(60)
    (c,) = store.claim(W, ["default"], 10, 5.0, now=later)
    assert c.id == first
    store.reap(100, now=later + sec(30))  # its lease lapsed
    (again,) = store.claim(W2, ["default"], 10, TTL, now=later + sec(30))
    assert again.id == first and again.attempt == 2
    store.release(W2, again.id, again.attempt, now=later + sec(31))  # a shutdown hands it back
    (third,) = store.claim(W, ["default"], 10, TTL, now=later + sec(32))
    assert third.id == first and third.attempt == 3
    assert get(store, second).state is JobState.QUEUED


def test_an_exclusive_key_is_freed_by_the_reaper_with_the_lease(store: Store) -> None:
    t0 = store.db_now()
    a, b = (store.enqueue([new_job(exclusive_key="k")], now=t0)[0] for _ in range(2))
    assert [c.id for c in store.claim(W, ["default"], 10, 5.0, now=t0)] == [a]
    later = t0 + sec(60)
    assert store.claim(W2, ["default"], 10, TTL, now=later) == []
    store.reap(100, now=later)  # a goes back to queued (attempts left); b is next in line by id
    got = store.claim(W2, ["default"], 10, TTL, now=later)
    assert len(got) == 1 and got[0].id in (a, b)


def test_complete_and_claim_ids_frees_the_slot_and_key_its_own_successes_end(store: Store, rounds: Rounds) -> None:
    """The successes riding with a claim of delivered ids end before it, as far
    as limits and keys go: a queue at its limit, or a key held, by the very
    jobs the statement completes, has room again for that claim. A success
    refused by its fence (another worker's attempt) frees nothing."""
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=1))
    a, b, c = fill(store, 3, t0)
    (first,) = store.claim_ids(W, [a], [Q], TTL, now=t0)
    assert store.claim_ids(W, [b], [Q], TTL, now=t0) == []  # at its limit
    # W2's success for W's job is refused, and frees no room
    assert rounds.complete_and_claim_ids(W2, [(a, first.attempt, None)], [b], [Q], TTL, now=t0) == (set(), [])
    done, more = rounds.complete_and_claim_ids(W, [(a, first.attempt, None)], [b, c], [Q], TTL, now=t0)
    assert done == {a} and [j.id for j in more] == [b]  # a's slot, and only one
    assert running(store) == 1
    k1, k2 = (store.enqueue([new_job(exclusive_key="k")], now=t0)[0] for _ in range(2))
    (held,) = store.claim_ids(W, [k1], ["default"], TTL, now=t0)
    assert store.claim_ids(W, [k2], ["default"], TTL, now=t0) == []  # k is held
    done, more = rounds.complete_and_claim_ids(W, [(k1, held.attempt, None)], [k2], ["default"], TTL, now=t0)
    assert done == {k1} and [j.id for j in more] == [k2]


def test_claim_ids_obeys_limits_and_keys(store: Store) -> None:
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=2))
    ids = fill(store, 4, t0)
    keyed = [store.enqueue([new_job(exclusive_key="k")], now=t0)[0] for _ in range(2)]
    got = store.claim_ids(W, ids, [Q], TTL, now=t0)
    assert [c.id for c in got] == ids[:2]
    assert store.claim_ids(W, ids, [Q], TTL, now=t0) == []
    assert [c.id for c in store.claim_ids(W, keyed, ["default"], TTL, now=t0)] == [keyed[0]]
    assert store.claim_ids(W2, keyed, ["default"], TTL, now=t0) == []


def test_limits_hold_against_racing_claimers(store: Store, backend: str) -> None:
    """Eight threads, each a worker of its own, claim and complete as fast as
    they can on one limited queue; a sampler reads the running count between.
    No claim may ever leave more running than the limit, and keyed jobs never
    run two at a time (the unique index would refuse it: an error here)."""
    if backend.startswith("http"):
        pytest.skip("the HTTP store hands claims to a store tested here directly; threads over HTTP add nothing")
    t0 = store.db_now()
    store.set_limits(QueueLimits(Q, concurrency=3))
    fill(store, 150, t0)
    fill(store, 30, t0, exclusive_key="one")
    peak = samples = 0

    def sample(finished: threading.Event) -> None:
        nonlocal peak, samples
        counts = store.stats().counts
        peak, samples = max(peak, counts.get((Q, JobState.RUNNING), 0)), samples + 1
        if counts.get((Q, JobState.QUEUED), 0) == 0:
            finished.set()

    race_claimers(store, Q, t0, sample)
    assert 1 <= peak <= 3, (peak, samples)
    assert store.stats().counts.get((Q, JobState.SUCCEEDED), 0) == 180


def race_claimers(store: Store, queue: str, now: object, sample: Callable[[threading.Event], None]) -> None:
    """Eight threads, each a worker of its own, complete and claim (two at a
    time) on ``queue`` as fast as they can, while ``sample(finished)`` is
    called between on this thread; once it sets ``finished``, each thread
    stops at its first empty claim. Any thread's error fails the test."""
    errors: list[BaseException] = []
    finished = threading.Event()

    def worker(name: str) -> Callable[[], None]:
        def run() -> None:
            held: list[ClaimedJob] = []
            try:
                for _ in range(2000):
                    done = [(c.id, c.attempt, None) for c in held]
                    _, held = store.complete_and_claim(name, done, [queue], 2, TTL, now=now)  # type: ignore[arg-type]
                    if not held and finished.is_set():
                        return
            except BaseException as exc:  # reported below
                errors.append(exc)
        return run

    threads = [threading.Thread(target=worker(f"w{i}")) for i in range(8)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        sample(finished)
    for t in threads:
        t.join()
    assert not errors, errors
