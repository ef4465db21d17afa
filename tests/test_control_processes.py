"""Job control with real worker processes (``tests/proc_app.py``) on a real
SQLite file, PostgreSQL, and PostgreSQL through PgBouncer: a producer in this
process waits for results the workers write (on PostgreSQL woken by the
finish NOTIFY, which crosses processes), and pausing a queue stops every
worker's claims until it is resumed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import JobFailed, JobState, Tether
from tether.store import Store

from .test_processes import Workers, enqueue, job, wait_for

pytestmark = pytest.mark.processes


@pytest.fixture
def workers(db_url: str, store: Store, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(db_url, tmp_path)
    yield w
    w.close()


@pytest.fixture
def producer(db_url: str, store: Store) -> Iterator[Tether]:
    app = Tether(db_url)
    yield app
    app.close()


def test_a_producer_waits_for_results_written_by_worker_processes(
    workers: Workers, store: Store, producer: Tether,
) -> None:
    for _ in range(2):
        workers.wait_started(workers.start())
    ids = [enqueue(store, "sleepy", seconds=0.2) for _ in range(6)]
    for job_id in ids:
        done = producer.wait(job_id, timeout=30)
        assert done.state is JobState.SUCCEEDED and done.result["attempt"] == 1
    bad = enqueue(store, "suicide", max_attempts=1)  # kills its worker: dead once the reaper has it
    with pytest.raises(JobFailed, match="lease expired"):
        producer.wait(bad, timeout=30)


def test_pausing_a_queue_stops_every_workers_claims_until_it_is_resumed(
    workers: Workers, store: Store, producer: Tether,
) -> None:
    procs = [workers.start(T_QUEUES="default,emails") for _ in range(2)]
    for p in procs:
        workers.wait_started(p)
    first = enqueue(store, "sleepy", queue="emails", seconds=1.0)
    wait_for(lambda: workers.started(first), 15, "a worker to start the first job")
    producer.pause("emails")
    held = [enqueue(store, "sleepy", queue="emails", seconds=0.1) for _ in range(4)]
    other = enqueue(store, "sleepy", queue="default", seconds=0.1)
    assert producer.wait(other, timeout=30).state is JobState.SUCCEEDED  # other queues go on
    assert producer.wait(first, timeout=30).state is JobState.SUCCEEDED  # the running job finished
    time.sleep(1.0)  # many claim rounds of both workers
    assert [job(store, i).state for i in held] == [JobState.QUEUED] * 4
    assert not any(workers.started(i) for i in held)
    producer.resume("emails")
    for i in held:
        assert producer.wait(i, timeout=30).state is JobState.SUCCEEDED
