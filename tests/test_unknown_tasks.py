"""Jobs of tasks a worker does not know (issue 17, point 2), on every store.

A claim that names the worker's tasks takes only their jobs: a job of any
other task stays queued with its budget untouched, however many of them wait
ahead. Workers record the tasks they know, so any process can tell which due
jobs no live worker knows (``unknown_tasks``, ``stats().unknown``), and the
unknown-task service ends dead the jobs of a task no worker has known for its
grace period (``bury_unknown``).
"""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

from tether.errors import ConfigError
from tether.model import JobState, WorkerInfo
from tether.store import Store
from tether.worker.unknown import UnknownTasks

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import TTL, W2, Rounds, W, get, new_job, sec

HOUR = 3600.0


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture(params=["sync", "async"])
def rounds(store: Store, request: pytest.FixtureRequest) -> Rounds:
    return Rounds(store, request.param)


def register(store: Store, worker: str, tasks: list[str] | None, queues: tuple[str, ...] = ("default",)) -> None:
    t = store.db_now()
    store.register_worker(WorkerInfo(id=worker, host=worker.split(":")[0], pid=1, proc_start=None, started_at=t,
                                     last_seen=t, queues=list(queues), concurrency=1, tasks=tasks))


def untouched(store: Store, job_id: int) -> None:
    job = get(store, job_id)
    assert (job.state, job.attempt, job.released, job.locked_by) == (JobState.QUEUED, 0, 0, None), job


# -- the claim filter -------------------------------------------------------------


def test_a_claim_naming_tasks_takes_only_their_jobs_and_leaves_the_rest_untouched(
    store: Store, rounds: Rounds
) -> None:
    now = store.db_now()
    # The unknown task's jobs are at the head of the queue: higher priority, older.
    unknown = store.enqueue([new_job("new_task", priority=5) for _ in range(30)], now=now - sec(5))
    known = store.enqueue([new_job("old_task", args={"n": n}) for n in range(3)], now=now)
    claimed = rounds.claim(W, ["default"], 10, TTL, now=now, tasks=["old_task"])
    assert sorted(c.id for c in claimed) == known
    assert {(c.task, c.attempt) for c in claimed} == {("old_task", 1)}
    for job_id in unknown:
        untouched(store, job_id)
    # Without tasks (tools, tests, older workers) a claim still takes any task.
    assert {c.task for c in rounds.claim(W2, ["default"], 5, TTL, now=now)} == {"new_task"}


def test_a_backlog_of_unknown_jobs_ahead_does_not_shorten_a_claim(store: Store, rounds: Rounds) -> None:
    now = store.db_now()
    store.enqueue([new_job("b", priority=9) for _ in range(300)], now=now)
    mine = store.enqueue([new_job("a", args={"n": n}) for n in range(8)], now=now)
    assert [c.id for c in rounds.claim(W, ["default"], 5, TTL, now=now, tasks=["a", "c"])] == mine[:5]
    assert [c.id for c in rounds.claim(W, ["default"], 5, TTL, now=now, tasks=["a"])] == mine[5:]


def test_a_claim_of_several_tasks_and_queues_keeps_claim_order(store: Store, rounds: Rounds) -> None:
    now = store.db_now()
    low = store.enqueue([new_job("x", queue="q1")], now=now - sec(3))
    high = store.enqueue([new_job("y", queue="q2", priority=3)], now=now)
    old = store.enqueue([new_job("y", queue="q1")], now=now - sec(9))
    store.enqueue([new_job("z", queue="q1", priority=9)], now=now - sec(20))
    first = rounds.claim(W, ["q1", "q2"], 2, TTL, now=now, tasks=["x", "y"])
    assert sorted(c.id for c in first) == sorted(high + old)
    assert [c.id for c in rounds.claim(W, ["q1", "q2"], 10, TTL, now=now, tasks=["x", "y"])] == low


def test_complete_and_claim_naming_tasks_claims_only_their_jobs(store: Store, rounds: Rounds) -> None:
    now = store.db_now()
    (first,) = store.enqueue([new_job("a")], now=now - sec(10))
    [c] = rounds.claim(W, ["default"], 1, TTL, now=now, tasks=["a"])
    unknown = store.enqueue([new_job("b", priority=1) for _ in range(5)], now=now)
    mine = store.enqueue([new_job("a") for _ in range(2)], now=now)
    accepted, claimed = rounds.complete_and_claim(W, [(first, c.attempt, None)], ["default"], 10, TTL, now=now,
                                                  tasks=["a"])
    assert accepted == {first}
    assert sorted(j.id for j in claimed) == mine
    for job_id in unknown:
        untouched(store, job_id)


def test_claim_ids_naming_tasks_skips_jobs_of_other_tasks(store: Store) -> None:
    now = store.db_now()
    (a,) = store.enqueue([new_job("a")], now=now)
    (b,) = store.enqueue([new_job("b")], now=now)
    assert [c.id for c in store.claim_ids(W, [a, b], ["default"], TTL, now=now, tasks=["a"])] == [a]
    untouched(store, b)
    assert [c.id for c in store.claim_ids(W2, [b], ["default"], TTL, now=now)] == [b]


# -- what workers know, and what no live worker knows ------------------------------------------


def test_a_worker_records_the_tasks_it_knows(store: Store) -> None:
    register(store, W, ["b", "a"])
    register(store, W2, None)
    found = {w.id: w.tasks for w in store.list_workers()}
    assert found == {W: ["a", "b"], W2: None}


def test_due_jobs_no_live_worker_knows_are_reported_by_queue_and_task(store: Store) -> None:
    now = store.db_now()
    register(store, W, ["a"], queues=("default", "other"))
    store.enqueue([new_job("a"), new_job("typo"), new_job("typo")], now=now - sec(30))
    store.enqueue([new_job("a", queue="elsewhere")], now=now - sec(30))  # no worker serves that queue
    store.enqueue([new_job("later")], now=now - sec(30))
    store.enqueue([new_job("notdue", run_at=now + sec(600))], now=now)
    found = {(u.queue, u.task): u.jobs for u in store.unknown_tasks(now=now)}
    assert found == {("default", "typo"): 2, ("default", "later"): 1, ("elsewhere", "a"): 1}
    assert {(u.queue, u.task): u.jobs for u in store.stats().unknown} == found
    # A worker of an older tether (tasks not recorded) claims any task: it knows them all.
    register(store, W2, None)
    assert {(u.queue, u.task) for u in store.unknown_tasks(now=now)} == {("elsewhere", "a")}


def test_only_live_workers_count_for_what_is_known(store: Store) -> None:
    now = store.db_now()
    register(store, W, ["a"])
    (job_id,) = store.enqueue([new_job("a")], now=now)
    assert store.unknown_tasks(now=now) == []
    # silent for longer than the live window: no longer counts
    assert [u.task for u in store.unknown_tasks(now=now + sec(120))] == ["a"]
    store.stop_worker(W)
    [u] = store.unknown_tasks(now=now)
    assert (u.queue, u.task, u.jobs) == ("default", "a", 1)
    untouched(store, job_id)


# -- the typo case: bury after the grace --------------------------------------------------------


def test_bury_ends_dead_only_jobs_of_tasks_no_worker_knew_for_the_grace(store: Store) -> None:
    t0 = store.db_now()
    register(store, W, ["a"])
    (typo,) = store.enqueue([new_job("typo")], now=t0)
    (known,) = store.enqueue([new_job("a")], now=t0)
    (other_queue,) = store.enqueue([new_job("typo", queue="theirs")], now=t0)
    # Within the grace nothing is buried, even jobs no worker knows.
    assert store.bury_unknown(["default"], grace=HOUR, limit=10, now=t0 + sec(HOUR / 2)) == []
    untouched(store, typo)
    # The worker that knows "a" beats on: seen within the grace, a's job lives.
    later = t0 + sec(HOUR + 60)
    store.heartbeat(W, [], TTL, now=t0 + sec(HOUR))
    [b] = store.bury_unknown(["default"], grace=HOUR, limit=10, now=later)
    assert (b.id, b.queue, b.task) == (typo, "default", "typo")
    job = get(store, typo)
    assert (job.state, job.attempt, job.released) == (JobState.DEAD, 0, 0)
    assert job.last_error == b.error and "'typo'" in b.error and "unknown_task_grace" in b.error
    untouched(store, known)
    untouched(store, other_queue)  # not the caller's queue
    # Once no worker that knows "a" has been seen for the grace, its jobs go too.
    gone = store.bury_unknown(["default"], grace=HOUR, limit=10, now=t0 + sec(2 * HOUR + 1))
    assert [g.id for g in gone] == [known]


def test_a_stopped_worker_seen_within_the_grace_still_protects_its_tasks(store: Store) -> None:
    t0 = store.db_now()
    register(store, W, ["a"])
    store.stop_worker(W)  # a deploy: the new workers stopped for a moment
    (job_id,) = store.enqueue([new_job("a")], now=t0 - sec(2 * HOUR))
    assert store.bury_unknown(["default"], grace=HOUR, limit=10, now=t0 + sec(60)) == []
    untouched(store, job_id)
    assert [u.task for u in store.unknown_tasks(now=t0)] == ["a"]  # but it is shown: no *live* worker knows it


def test_a_retried_buried_job_runs_once_a_worker_knows_its_task(store: Store) -> None:
    t0 = store.db_now()
    (job_id,) = store.enqueue([new_job("late")], now=t0 - sec(2 * HOUR))
    assert [b.id for b in store.bury_unknown(["default"], grace=HOUR, limit=10)] == [job_id]
    store.retry(job_id)
    [c] = store.claim(W, ["default"], 1, TTL, tasks=["late"])
    assert (c.id, c.attempt) == (job_id, 1)


# -- the service ---------------------------------------------------------------------------


def test_the_service_logs_each_unknown_task_by_name_and_buries_past_the_grace(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    t0: datetime = store.db_now()
    register(store, W, ["a"])
    (old,) = store.enqueue([new_job("typo_task")], now=t0 - sec(2 * HOUR))
    # due a second ago: a run_at of exactly t0 can fall a rounding step after the
    # service's own now on SQLite, whose clock moves in milliseconds
    (fresh,) = store.enqueue([new_job("new_task")], now=t0 - sec(1))
    service = UnknownTasks(store, ["default"], grace=HOUR)
    with caplog.at_level(logging.WARNING, logger="tether.unknown_tasks"):
        unknown, buried = service.run_once()
    assert {u.task for u in unknown} == {"typo_task", "new_task"}
    assert buried == 1 and get(store, old).state is JobState.DEAD
    untouched(store, fresh)
    text = caplog.text
    assert "task 'new_task' on queue 'default'" in text and "no live worker knows" in text
    assert f"job {old} (task 'typo_task'" in text


def test_the_service_with_no_grace_never_buries(store: Store) -> None:
    (old,) = store.enqueue([new_job("typo_task")], now=store.db_now() - sec(10 * HOUR))
    unknown, buried = UnknownTasks(store, ["default"], grace=None).run_once()
    assert [u.task for u in unknown] == ["typo_task"] and buried == 0
    untouched(store, old)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("grace", [0, 5.0, -1, float("inf"), float("nan")])
def test_a_grace_too_short_to_outlast_a_deploy_is_refused(store: Store, grace: float) -> None:
    with pytest.raises(ConfigError, match="unknown_task_grace"):
        UnknownTasks(store, ["default"], grace=grace)
