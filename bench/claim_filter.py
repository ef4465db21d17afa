"""Micro-benchmark: does naming the worker's tasks slow its claims?

    PYTHONPATH=src python bench/claim_filter.py [sqlite|postgresql] [unknown_backlog]

For each case, a fresh queue of KNOWN due jobs of task "known" (and, where
said, a backlog of jobs of task "other" at the head of the queue: higher
priority), then ROUNDS claims of LIMIT jobs each, timed one by one; prints
the median and p90 per claim. Cases:

- any:      claim without tasks (the statement before the filter existed)
- known:    claim naming ["known"], no other jobs
- backlog:  claim naming ["known"], UNKNOWN jobs of "other" ahead of them
- 5 tasks:  claim naming 5 tasks, each with its own backlog (each pair's walk
            may lock up to LIMIT rows on PostgreSQL; the best LIMIT are taken)

Short on purpose (a shared two-core machine): a few thousand jobs, no
sustained load. Numbers go in the commit or report that cites them.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from tether.model import NewJob
from tether.store import Store, open_store

PG_URL = "postgresql://postgres@127.0.0.1:5432/test?schema=bench_claim_filter"
KNOWN, ROUNDS, LIMIT = 2000, 30, 50


def _jobs(task: str, n: int, priority: int = 0) -> list[NewJob]:
    return [NewJob(task=task, args_json=json.dumps({"n": i}), priority=priority) for i in range(n)]


def _fresh(url: str) -> Store:
    store = open_store(url)
    if _migrated(store):  # left by an interrupted run
        store.destroy()
    store.migrate()
    return store


def _migrated(store: Store) -> bool:
    try:
        store.check_schema()
    except Exception:
        return False
    return True


def _case(url: str, name: str, fill: Callable[[Store], None], tasks: list[str] | None) -> None:
    store = _fresh(url)
    try:
        fill(store)
        times = []
        for _ in range(ROUNDS):
            t = time.perf_counter()
            got = store.claim("bench:1:w", ["default"], LIMIT, 30.0, tasks=tasks)
            times.append((time.perf_counter() - t) * 1000)
            assert len(got) == LIMIT, (name, len(got))
        times.sort()
        print(f"{store.backend:10} {name:34} median {statistics.median(times):6.2f} ms  "
              f"p90 {times[int(len(times) * 0.9)]:6.2f} ms")
    finally:
        store.destroy()
        store.close()


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    unknown = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    url = PG_URL if backend == "postgresql" else f"sqlite:///{tempfile.mkdtemp()}/bench.db"

    def known(store: Store) -> None:
        store.enqueue(_jobs("known", KNOWN))

    def backlog(store: Store) -> None:
        for start in range(0, unknown, 5000):
            store.enqueue(_jobs("other", min(5000, unknown - start), priority=5))
        known(store)

    def five(store: Store) -> None:
        for i in range(5):
            store.enqueue(_jobs(f"known{i}", KNOWN))

    _case(url, "any task", known, None)
    _case(url, "known task", known, ["known"])
    _case(url, f"known task, {unknown} unknown ahead", backlog, ["known"])
    _case(url, "5 known tasks, each with a backlog", five, [f"known{i}" for i in range(5)])


if __name__ == "__main__":
    main()
