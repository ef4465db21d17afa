"""Workers leave jobs of tasks they do not know (issue 17, point 2), as real
processes on one queue: a rolling deploy (an old worker whose app lacks a new
task beside a new one that has it) and two apps sharing a queue. Every job
runs once, on a worker that knows its task, as attempt 1: no budget spent."""

from __future__ import annotations

import signal

import pytest

from tether import JobState, Outcome
from tether.store import Store

from .test_processes import Workers, enqueue, finished, job, wait_for, workers

__all__ = ["workers"]  # the fixture, imported for these tests
pytestmark = pytest.mark.processes


def _ran_once_on(store: Store, workers: Workers, job_id: int, pid: int) -> None:
    j = job(store, job_id)
    assert (j.state, j.attempt, j.released) == (JobState.SUCCEEDED, 1, 0), j
    assert isinstance(j.result, dict) and j.result["pid"] == pid, j
    assert [(a.attempt, a.outcome) for a in j.attempts] == [(1, Outcome.SUCCEEDED)], j.attempts
    assert workers.started(job_id) == [(1, pid)]


def test_rolling_deploy_old_workers_leave_a_new_tasks_jobs_to_the_new_ones(workers: Workers, store: Store) -> None:
    old = workers.start(T_APP="old")
    workers.wait_started(old)
    # The new code's producers enqueue the new task before any new worker runs:
    # its jobs sit at the head of the queue, ahead of work the old worker knows.
    fresh = [enqueue(store, "fresh") for _ in range(12)]
    known = [enqueue(store, "sleepy", seconds=0) for _ in range(6)]
    wait_for(lambda: all(finished(store, j) for j in known), 20, "the old worker to run the tasks it knows")
    for j in known:
        _ran_once_on(store, workers, j, old.pid)
    for j in fresh:
        waiting = job(store, j)
        assert (waiting.state, waiting.attempt, waiting.released) == (JobState.QUEUED, 0, 0), waiting
    assert [(u.queue, u.task, u.jobs) for u in store.stats().unknown] == [("default", "fresh", 12)]

    new = workers.start()  # the deployed code: it knows `fresh`
    workers.wait_started(new)
    wait_for(lambda: all(finished(store, j) for j in fresh), 20, "the new worker to run the new task's jobs")
    for j in fresh:
        _ran_once_on(store, workers, j, new.pid)
    assert store.stats().unknown == []
    registered = {w.pid: w.tasks for w in store.list_workers(live_only=True)}
    assert registered[new.pid] is not None and "fresh" in registered[new.pid]
    assert registered[old.pid] is not None and "fresh" not in registered[old.pid] and "sleepy" in registered[old.pid]

    old.send_signal(signal.SIGTERM)  # the deploy ends: the old worker goes
    assert old.wait(timeout=15) == 0, workers.log(old)
    assert "unknown task" not in workers.log(old) and "released for a worker" not in workers.log(old)


def test_two_apps_on_one_queue_each_run_only_their_own_tasks(workers: Workers, store: Store) -> None:
    alpha = workers.start(T_APP="alpha")
    beta = workers.start(T_APP="beta")
    workers.wait_started(alpha)
    workers.wait_started(beta)
    jobs = [(enqueue(store, task), task) for _ in range(10) for task in ("alpha_only", "beta_only")]
    wait_for(lambda: all(finished(store, j) for j, _ in jobs), 30, "both apps to run their jobs")
    for j, task in jobs:
        _ran_once_on(store, workers, j, alpha.pid if task == "alpha_only" else beta.pid)
    assert store.stats().unknown == []
