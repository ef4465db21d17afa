"""Micro-benchmark: does a claim slow down as the queued backlog grows?

    PYTHONPATH=src python bench/claim_backlog.py [sqlite|postgresql] [SIZES...]

For each backlog size (default 1,000, 10,000 and 100,000 queued due jobs of
one queue) and each shape of claim, a fresh database, then ROUNDS claims of
LIMIT jobs, timed one by one; prints the median per claim. Shapes:

- known:     the worker's claim (it names its tasks)
- any:       ``Store.claim`` without tasks (an API caller, a client sending none)
- limited:   the worker's claim on a queue with ``concurrency`` set
- sweep:     ``due_unclaimed`` (the NATS sweep), 500 at a time
- key:       the worker's claim when the backlog is jobs of one exclusive key,
             one of them running, and LIMIT keyless jobs wait behind them

A flat row is the target: every shape but "key" is. (The "key" row walks
past the held key's queued jobs, one by one, on both backends: about 0.7 us
a job on SQLite and 1 us on PostgreSQL.)

Short on purpose (a shared two-core machine). Numbers go in the commit or
report that cites them.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from claim_filter import _fresh  # a migrated store, cleared of an interrupted run's

from tether.model import NewJob, QueueLimits
from tether.store import Store

PG_URL = "postgresql://postgres@127.0.0.1:5432/test?schema=bench_claim_backlog"
ROUNDS, LIMIT, W = 20, 10, "bench:1:w"


def _jobs(n: int, **options: object) -> list[NewJob]:
    return [NewJob(task="t", args_json=json.dumps({"n": i}), **options) for i in range(n)]  # type: ignore[arg-type]


def _fill(store: Store, n: int, **options: object) -> None:
    for start in range(0, n, 5000):
        store.enqueue(_jobs(min(5000, n - start), **options))


def _time(url: str, size: int, fill: Callable[[Store, int], None], call: Callable[[Store], int]) -> float:
    store = _fresh(url)
    try:
        fill(store, size)
        times = []
        for _ in range(ROUNDS):
            t = time.perf_counter()
            assert call(store) > 0
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)
    finally:
        store.destroy()
        store.close()


def _limited(store: Store, n: int) -> None:
    store.set_limits(QueueLimits("default", concurrency=n))
    _fill(store, n)


def _keyed(store: Store, n: int) -> None:
    _fill(store, n, exclusive_key="k")
    _fill(store, ROUNDS * LIMIT)
    store.claim(W, ["default"], 1, 30.0, tasks=["t"])  # the key's first job runs: the rest wait


SHAPES: dict[str, tuple[Callable[[Store, int], None], Callable[[Store], int]]] = {
    "known": (_fill, lambda s: len(s.claim(W, ["default"], LIMIT, 30.0, tasks=["t"]))),
    "any": (_fill, lambda s: len(s.claim(W, ["default"], LIMIT, 30.0))),
    "limited": (_limited, lambda s: len(s.claim(W, ["default"], LIMIT, 30.0, tasks=["t"]))),
    "sweep": (_fill, lambda s: len(s.due_unclaimed(["default"], grace=0.0, limit=500))),
    "key": (_keyed, lambda s: len(s.claim(W, ["default"], LIMIT, 30.0, tasks=["t"]))),
}


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    sizes = [int(a) for a in sys.argv[2:]] or [1000, 10_000, 100_000]
    url = PG_URL if backend == "postgresql" else f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    print(f"{backend}: median ms per claim of {LIMIT} (sweep: of 500), by queued backlog")
    print(f"{'shape':10}" + "".join(f"{size:>12,}" for size in sizes))
    for name, (fill, call) in SHAPES.items():
        print(f"{name:10}" + "".join(f"{_time(url, size, fill, call):12.2f}" for size in sizes), flush=True)


if __name__ == "__main__":
    main()
