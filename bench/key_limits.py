"""Micro-benchmark (issue 44): claims with per-key limits against plain claims.

    PYTHONPATH=src python bench/key_limits.py [sqlite|postgresql] [--n N] [--keys K] [--rounds R]

In this process, one worker's rounds at the store (``complete_and_claim``:
the previous batch's successes and the next claim of ``--batch`` jobs, as a
worker's loop sends them), draining N queued no-op jobs per mode, the modes
in turn within each round so that a drifting machine moves them alike:

- plain:     jobs without a limit key
- keyed:     each job with one of K limit keys, no pattern matching them
             (the column's cost when nothing is configured)
- limited:   each job with one of K limit keys, all matched by a pattern
             with concurrency 3 and a rate of 1,000 a second per key (the
             issue's target: <= 1.3x plain at 1,000 keys)

Jobs are enqueued round-robin over the keys (N / K of each), so limits do
not hold the drain back: what is measured is what the limit costs a claim.
Prints each mode's median jobs/s over the rounds and its ratio of time per
job to plain's (the median of the rounds' paired ratios, with their range).
Short on purpose (a shared two-core machine); numbers go in the commit or
report that cites them, with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import psycopg

from tether.model import KeyLimits, NewJob
from tether.store import Store, open_store

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
PG_URL = PG_ADMIN + "?schema=bench_key_limits"
MODES = ("plain", "keyed", "limited")
WORKER = "bench-host:1:w1"


def _url(backend: str, scratch: str) -> str:
    if backend == "postgresql":
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS bench_key_limits CASCADE")
        return PG_URL
    return f"sqlite:///{os.path.join(scratch, 'keys.db')}"


def _fill(store: Store, mode: str, n: int, keys: int) -> None:
    prefix = {"plain": None, "keyed": "free", "limited": "shop"}[mode]
    jobs = [NewJob(task="noop", args_json="{}", queue=mode,
                   limit_key=None if prefix is None else f"{prefix}:{i % keys}") for i in range(n)]
    for start in range(0, n, 5000):
        store.enqueue(jobs[start:start + 5000])


def _drain(store: Store, queue: str, batch: int) -> int:
    done: list[tuple[int, int, str | None]] = []
    taken = 0
    while True:
        _, claimed = store.complete_and_claim(WORKER, done, [queue], batch, 60.0)
        if not claimed:
            return taken
        taken += len(claimed)
        done = [(c.id, c.attempt, None) for c in claimed]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("backend", nargs="?", default="postgresql", choices=["sqlite", "postgresql"])
    p.add_argument("--n", type=int, default=5000, help="jobs per mode per round (default 5,000)")
    p.add_argument("--keys", type=int, default=1000, help="distinct limit keys (default 1,000)")
    p.add_argument("--batch", type=int, default=10, help="jobs per claim (default 10)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-rate", action="store_true", help="the pattern with concurrency only")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        store = open_store(_url(args.backend, scratch))
        store.migrate()
        rate = (None, None) if args.no_rate else (1000, 1.0)
        store.set_key_limits(KeyLimits("shop:*", 3, *rate))
        for mode in MODES:  # warm up: connections, prepared statements
            _fill(store, mode, 200, args.keys)
            _drain(store, mode, args.batch)
        per_job: dict[str, list[float]] = {m: [] for m in MODES}
        for r in range(args.rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                _fill(store, mode, args.n, args.keys)
                began = time.perf_counter()
                taken = _drain(store, mode, args.batch)
                per_job[mode].append((time.perf_counter() - began) / taken)
                assert taken == args.n, (mode, taken)
        store.close()
    load = os.getloadavg()
    print(f"{args.backend}: {args.n} jobs per mode over {args.keys} keys, claims of {args.batch}, "
          f"{args.rounds} rounds; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for mode in MODES:
        ratios = [t / p for t, p in zip(per_job[mode], per_job["plain"], strict=True)]
        print(f"  {mode:8s} {1 / statistics.median(per_job[mode]):8.0f} jobs/s   x plain: "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
