"""Benchmark: finding and acting on many jobs on PostgreSQL (issue 43).

    PYTHONPATH=src python bench/many_jobs.py [FINISHED] [QUEUED]

Defaults are the issue's 1,000,000 finished and 100,000 queued jobs; on a
shared machine run it smaller (e.g. 200000 20000). The rows are made in SQL
(generate_series) in a schema of its own, then ANALYZEd. It reports:

- search: the first page (100) of an indexed filter (tags, meta), of a state
  and task filter, and their counts, median of 5, in ms (target < 50 ms);
- cancel_many of the queued jobs of one queue, while a worker claims and
  completes no-op jobs of another queue: its throughput during the bulk
  action as a ratio to before;
- delete_many of the finished jobs.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import psycopg

from tether import Tether
from tether.search import JobFilter

ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
SCHEMA = "bench_many_jobs"


def fill(finished: int, queued: int) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as c:
        c.execute(f"""
            INSERT INTO {SCHEMA}.jobs (queue, task, args, state, run_at, created_at, finished_at, meta, tags, attempt,
                                     max_attempts)
            SELECT 'billing', 'sync', jsonb_build_object('invoice', g), 'succeeded', now(), now() - interval '1 day',
                   now() - interval '1 hour', jsonb_build_object('customer', g %% 1000),
                   CASE WHEN g %% 100 = 0 THEN '["eu","rare"]'::jsonb ELSE '["eu"]'::jsonb END, 1, 3
            FROM generate_series(1, %s) AS g""", (finished,))
        c.execute(f"""
            INSERT INTO {SCHEMA}.jobs (queue, task, args, state, run_at, created_at, tags, max_attempts)
            SELECT 'bulk', 'sync', jsonb_build_object('invoice', g), 'queued', now() + interval '1 day', now(),
                   '["deploy-42"]'::jsonb, 3
            FROM generate_series(1, %s) AS g""", (queued,))
        c.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")  # as autovacuum would: merges the GIN pending lists


def timed(call: object, n: int = 5) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()  # type: ignore[operator]
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main() -> None:
    finished = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    queued = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    with psycopg.connect(ADMIN, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    app = Tether(f"{ADMIN}?schema={SCHEMA}")
    app.migrate()
    noop = app.task(name="noop", queue="busy")(lambda ctx: None)
    t0 = time.perf_counter()
    fill(finished, queued)
    print(f"filled {finished:,} finished + {queued:,} queued in {time.perf_counter() - t0:.1f} s")
    for label, filters in (("tags=['rare']", {"tags": ["rare"]}), ("meta={'customer': 7}", {"meta": {"customer": 7}}),
                           ("state=succeeded task=sync", {"state": "succeeded", "task": "sync"}),
                           ("tags=['deploy-42'] (queued)", {"tags": ["deploy-42"]})):
        page = timed(lambda f=filters: app.jobs(limit=100, **f))  # type: ignore[misc]
        count = timed(lambda f=filters: app.count_jobs(**f), 3)  # type: ignore[misc]
        print(f"search {label:32s} first page {page:7.1f} ms   count {count:8.1f} ms")
    # a worker claiming no-op jobs of another queue, before and during the bulk cancel
    noop.enqueue_many([{} for _ in range(200_000)])
    done = {"n": 0}
    stop = threading.Event()

    def on_done(*_: object) -> None:
        done["n"] += 1

    app.on("job.succeeded")(on_done)
    worker = app.worker(queues=["busy"], concurrency=20)
    thread = threading.Thread(target=lambda: __import__("asyncio").run(worker.run()), daemon=True)
    thread.start()
    time.sleep(3)
    n0, t0 = done["n"], time.perf_counter()
    time.sleep(5)
    before = (done["n"] - n0) / (time.perf_counter() - t0)
    n0, t0 = done["n"], time.perf_counter()
    cancelled = app.cancel_many(queue="bulk")
    took = time.perf_counter() - t0
    during = (done["n"] - n0) / took
    worker.stop()
    thread.join(30)
    stop.set()
    print(f"cancel_many: {cancelled:,} queued jobs in {took:.1f} s; the other queue's worker: {before:.0f} jobs/s "
          f"before, {during:.0f} jobs/s during (ratio {during / before:.2f})")
    t0 = time.perf_counter()
    deleted = app.delete_many(state="succeeded", task="sync")
    print(f"delete_many: {deleted:,} finished jobs in {time.perf_counter() - t0:.1f} s")
    assert app.store.count_jobs(JobFilter.of({"task": "sync", "state": "succeeded"})) == 0
    app.close()
    with psycopg.connect(ADMIN, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


if __name__ == "__main__":
    main()
