"""Micro-benchmark: exclusive keys as users shape them, run by one worker.

    PYTHONPATH=src python bench/key_shapes.py [sqlite|postgresql] [SHAPE N]...

One worker (``app.worker(concurrency=10, burst=True)``, in this process, a
``def`` no-op handler) drains a fresh database; prints jobs/s and how many
jobs each database claim took. Shapes (N: how many):

- bursts N:  N keys with 10 jobs each, each key's jobs enqueued together
             (a burst of events per customer: the usual shape)
- one N:     N jobs of one key (every job waits for the one before it)
- lane N:    N jobs on a queue with ``concurrency=1`` and no key (one lane,
             the tool for running everything one at a time)

Default: bursts 2000, one 300, one 3000, lane 3000. A run stops after
SECONDS and reports what it finished. Short on purpose (a shared two-core
machine); numbers go in the commit or report that cites them.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import threading
import time

import psycopg

import tether

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
PG_URL = PG_ADMIN + "?schema=bench_key_shapes"
SECONDS = 20.0
DEFAULT = [("bursts", 2000), ("one", 300), ("one", 3000), ("lane", 3000)]


def _url(backend: str, scratch: str) -> str:
    if backend == "postgresql":
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS bench_key_shapes CASCADE")
        return PG_URL
    path = os.path.join(scratch, "keys.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return f"sqlite:///{path}"


def run(backend: str, shape: str, n: int, scratch: str) -> str:
    app = tether.Tether(_url(backend, scratch))

    @app.task(name="noop")
    def noop(ctx: tether.JobContext, i: int = 0) -> None:
        return None

    app.migrate()
    if shape == "bursts":
        for k in range(n):
            noop.using(exclusive_key=f"customer:{k}").enqueue_many([{"i": i} for i in range(10)])
        total = 10 * n
    elif shape == "one":
        noop.using(exclusive_key="one").enqueue_many([{} for _ in range(n)])
        total = n
    else:
        app.configure_queue("default", concurrency=1)
        noop.enqueue_many([{} for _ in range(n)])
        total = n
    worker = app.worker(concurrency=10, burst=True)
    timer = threading.Timer(SECONDS, worker.stop)
    timer.start()
    started = time.perf_counter()
    asyncio.run(worker.run())
    took = time.perf_counter() - started
    timer.cancel()
    counts = worker.counts
    app.close()
    per_claim = counts["claimed"] / max(1, counts["db_claims"])
    return (f"{backend:10} {shape:6} {n:>6,}: {counts['succeeded']:>6,} of {total:,} jobs in {took:5.1f} s, "
            f"{counts['succeeded'] / took:7,.0f} jobs/s, {per_claim:5.2f} jobs a claim")


def main() -> None:
    args = sys.argv[1:]
    backend = args.pop(0) if args and args[0] in ("sqlite", "postgresql") else "postgresql"
    shapes = [(args[i], int(args[i + 1])) for i in range(0, len(args), 2)] or DEFAULT
    with tempfile.TemporaryDirectory() as scratch:
        for shape, n in shapes:
            print(run(backend, shape, n, scratch), flush=True)


if __name__ == "__main__":
    main()
