"""Retention under load (issue 20): pruning a large backlog of finished jobs
while workers run, and what it costs their claims; both in one run.

Setup: ``--finished`` finished jobs (succeeded, finished eight days ago, one
attempt row each) written with one INSERT ... SELECT generate_series, and a
backlog of queued jobs. Then two phases of ``--seconds`` each, on the same
database: ``threads`` clients loop ``complete_and_claim`` rounds of
``--batch`` jobs (a worker's usual statement) over a fresh backlog of
``--queued`` jobs (a phase ends early if its clients drain it), first alone, then beside a
``Pruner`` ticking back to back (statements of ``--limit`` jobs). Reported:
jobs/s and the median and 99th percentile round in each phase, and the
pruner's rows/s. The full size is a million finished rows:

    PYTHONPATH=src python bench/scenarios/retention.py                       # 1,000,000 finished rows
    PYTHONPATH=src python bench/scenarios/retention.py --finished 200000 --seconds 5   # quick
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import threading
import time

import psycopg
from store_rounds import rounds

from tether.model import JobState, NewJob
from tether.store import open_store
from tether.store.postgres.store import PostgresStore
from tether.worker.pruner import Pruner


def backlog(store: PostgresStore, n: int) -> None:
    for _ in range(0, n, 10_000):
        store.enqueue([NewJob(task="t", args_json="{}", queue="bench") for _ in range(10_000)])


def report(name: str, rate: float, took: list[float]) -> None:
    took.sort()
    p99 = took[int(len(took) * 0.99)] if took else float("nan")
    print(f"{name:>16}: {rate:8.0f} jobs/s, round median {statistics.median(took) * 1e3:.2f} ms, "
          f"p99 {p99 * 1e3:.2f} ms ({len(took)} rounds)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--finished", type=int, default=1_000_000)
    p.add_argument("--queued", type=int, default=200_000)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--limit", type=int, default=1000)
    a = p.parse_args()
    schema = f"bench_retention_{secrets.token_hex(4)}"
    store = open_store(f"{a.url}?schema={schema}")
    assert isinstance(store, PostgresStore)
    store.migrate()
    try:
        with psycopg.connect(a.url, autocommit=True) as admin:
            started = time.monotonic()
            admin.execute(f"""
                WITH j AS (
                    INSERT INTO "{schema}".jobs (queue, task, args, state, run_at, attempt, max_attempts,
                                                  claimed_at, created_at, finished_at)
                    SELECT 'bench', 't', '{{}}', 'succeeded', now() - interval '8 days', 1, 3,
                           now() - interval '8 days', now() - interval '8 days',
                           now() - interval '8 days' + g * interval '1 millisecond'
                    FROM generate_series(1, %s) AS g
                    RETURNING id, claimed_at, finished_at
                )
                INSERT INTO "{schema}".attempts (job_id, attempt, worker, claimed_at, finished_at, outcome)
                SELECT id, 1, 'old', claimed_at, finished_at, 'succeeded' FROM j""", (a.finished,))
            backlog(store, a.queued)
            admin.execute(f'VACUUM ANALYZE "{schema}".jobs')
            admin.execute(f'VACUUM ANALYZE "{schema}".attempts')
            print(f"setup: {a.finished} finished and {a.queued} queued jobs in {time.monotonic() - started:.1f}s",
                  flush=True)
        took: list[float] = []
        rate = rounds(store, a.threads, a.batch, a.seconds, took)
        report("without pruning", rate, took)
        backlog(store, a.queued)  # the same backlog again: the first phase drained its own
        pruner = Pruner(store, {JobState.SUCCEEDED: 7 * 86400.0}, limit=a.limit, max_rounds=1)
        stop = threading.Event()

        def prune() -> None:
            while not stop.is_set() and sum(pruner.tick().values()) > 0:
                pass

        t = threading.Thread(target=prune)
        started = time.monotonic()
        t.start()
        took = []
        rate = rounds(store, a.threads, a.batch, a.seconds, took)
        pruned_in_phase = pruner.total
        stop.set()
        t.join()
        report("while pruning", rate, took)
        print(f"pruner: {pruned_in_phase} rows while the clients ran, {pruner.total} in all in "
              f"{time.monotonic() - started:.1f}s ({pruner.total / (time.monotonic() - started):.0f} rows/s)",
              flush=True)
    finally:
        store.destroy()
        store.close()


if __name__ == "__main__":
    main()
