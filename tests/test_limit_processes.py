"""Queue limits with real worker processes (``tests/proc_app.py``): four
worker processes at concurrency 10 each, on a real SQLite file, PostgreSQL and
PostgreSQL through PgBouncer, work a queue whose limits
(``app.configure_queue``) are far below their 40 slots. A sampler in this
process reads the database every few milliseconds and must never see more of
the queue's jobs running than the limit, nor two jobs of one exclusive key,
even when one worker is SIGKILLed mid-run (its jobs stay running, and count,
until the reaper ends them). The rate limit is judged from the attempts
audit: no window of the period holds more starts than the rate."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tether import JobState, Tether
from tether.model import NewJob
from tether.store import Store

from .test_migrations import raw_sql
from .test_processes import Workers, job, wait_for

pytestmark = pytest.mark.processes

LIMIT = 5


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


class Sampler:
    """Reads, every couple of milliseconds on a connection of its own, how many
    jobs of the queue are running and the most running jobs of any one
    exclusive key; keeps the peaks."""

    def __init__(self, db_url: str, queue: str) -> None:
        self.db_url, self.queue = db_url, queue
        self.peak = self.key_peak = self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with raw_sql(self.db_url) as (run, prefix):
            sql = (f"SELECT (SELECT count(*) FROM {prefix}jobs WHERE state = 'running' AND queue = '{self.queue}'), "
                   f"(SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM {prefix}jobs "
                   f"WHERE state = 'running' AND exclusive_key IS NOT NULL GROUP BY exclusive_key) AS k)")
            while not self.stop.is_set():
                running, per_key = run(sql)[0]
                self.peak, self.key_peak = max(self.peak, running), max(self.key_peak, per_key)
                self.samples += 1
                time.sleep(0.002)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def test_four_workers_of_ten_never_run_more_than_the_queues_limit(
    workers: Workers, store: Store, producer: Tether, db_url: str,
) -> None:
    producer.configure_queue("limited", concurrency=LIMIT)
    procs = [workers.start(T_QUEUES="limited", T_CONC=10) for _ in range(4)]
    for p in procs:
        workers.wait_started(p)
    sampler = Sampler(db_url, "limited")
    try:
        plain = store.enqueue([NewJob(task="sleepy", args_json=json.dumps({"seconds": 0.15}), queue="limited")
                               for _ in range(40)])
        keyed = store.enqueue([NewJob(task="sleepy", args_json=json.dumps({"seconds": 0.1}), queue="limited",
                                      exclusive_key=f"customer:{i % 2}") for i in range(8)])
        # one worker dies mid-run, holding jobs: they keep their slots until the reaper frees them
        wait_for(lambda: sum(bool(workers.started(i)) for i in plain) >= 10, 30, "ten jobs started")
        procs[0].send_signal(signal.SIGKILL)
        for job_id in plain + keyed:
            assert producer.wait(job_id, timeout=60).state is JobState.SUCCEEDED
    finally:
        sampler.close()
    assert sampler.samples > 100
    assert sampler.peak == LIMIT, f"peak {sampler.peak} running of a limit of {LIMIT} in {sampler.samples} samples"
    assert sampler.key_peak == 1
    # the audit agrees: at no instant were more than LIMIT attempts open (half-open intervals)
    events: list[tuple[float, int]] = []
    for job_id in plain + keyed:
        for a in job(store, job_id).attempts:
            assert a.finished_at is not None
            events += [(a.claimed_at.timestamp(), 1), (a.finished_at.timestamp(), -1)]
    open_now = peak = 0
    for _, delta in sorted(events):  # at a tie the finish (-1) sorts first
        open_now += delta
        peak = max(peak, open_now)
    assert peak <= LIMIT


def test_a_rate_limit_holds_in_every_window_across_worker_processes(
    workers: Workers, store: Store, producer: Tether,
) -> None:
    producer.configure_queue("metered", rate=(4, "2s"))
    for p in [workers.start(T_QUEUES="metered", T_CONC=10) for _ in range(4)]:
        workers.wait_started(p)
    ids = store.enqueue([NewJob(task="sleepy", args_json=json.dumps({"seconds": 0.01}), queue="metered")
                         for _ in range(12)])
    for job_id in ids:
        assert producer.wait(job_id, timeout=60).state is JobState.SUCCEEDED
    starts = sorted(a.claimed_at for i in ids for a in job(store, i).attempts)
    assert len(starts) == 12
    for i, t in enumerate(starts):
        in_window = [s for s in starts[i:] if s < t + timedelta(seconds=2)]
        assert len(in_window) <= 4, f"{len(in_window)} starts within 2 s of {t}"
    # and it did not simply run them one by one: twelve jobs took at least two whole windows
    assert starts[-1] - starts[0] >= timedelta(seconds=4)
