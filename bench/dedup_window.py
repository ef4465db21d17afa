"""Micro-benchmark (issue 44): single enqueue with ``dedup_for`` against plain enqueue.

    PYTHONPATH=src python bench/dedup_window.py [sqlite|postgresql] [--n N] [--rounds R]

In this process, one job per call (``task.enqueue``), the modes in turn
within each round so that a drifting machine moves them alike:

- plain:     ``task.enqueue(i=...)``
- key:       ``task.using(dedup_key=<unique>).enqueue(...)`` (today's dedup)
- window:    ``task.using(dedup_key=<unique>, dedup_for="1h").enqueue(...)``
             (the issue's target: <= 1.2x plain)
- hit:       the same, every call a duplicate of a job that ended inside its
             window (the insert conflicts, the holder is looked up)
- expires:   ``task.using(expires="10m").enqueue(...)``

Prints each mode's median calls/s over the rounds and its ratio of time per
call to plain's (the median of the rounds' paired ratios, with their range).
Short on purpose (a shared two-core machine); numbers go in the commit or
report that cites them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import psycopg

import tether

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
PG_URL = PG_ADMIN + "?schema=bench_dedup_window"
MODES = ("plain", "key", "window", "hit", "expires")


def _url(backend: str, scratch: str) -> str:
    if backend == "postgresql":
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS bench_dedup_window CASCADE")
        return PG_URL
    return f"sqlite:///{os.path.join(scratch, 'dedup.db')}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("backend", nargs="?", default="postgresql", choices=["sqlite", "postgresql"])
    p.add_argument("--n", type=int, default=1000, help="calls per mode per round (default 1,000)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        app = tether.Tether(_url(args.backend, scratch))
        app.migrate()

        @app.task(name="hook")
        def hook(ctx: tether.JobContext, i: int = 0) -> None:
            return None

        held = hook.using(dedup_key="held", dedup_for="1h").enqueue()
        app.cancel(held)  # ended: its key stays taken for the hour, every "hit" finds it
        seq = iter(range(10**9))
        calls: dict[str, Callable[[], object]] = {
            "plain": lambda: hook.enqueue(i=1),
            "key": lambda: hook.using(dedup_key=f"k{next(seq)}").enqueue(i=1),
            "window": lambda: hook.using(dedup_key=f"w{next(seq)}", dedup_for="1h").enqueue(i=1),
            "hit": lambda: hook.using(dedup_key="held", dedup_for="1h").enqueue(i=1),
            "expires": lambda: hook.using(expires="10m").enqueue(i=1),
        }
        for call in calls.values():  # warm up: connections, prepared statements
            for _ in range(50):
                call()
        per_call: dict[str, list[float]] = {m: [] for m in MODES}
        for r in range(args.rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                call = calls[mode]
                began = time.perf_counter()
                for _ in range(args.n):
                    call()
                per_call[mode].append((time.perf_counter() - began) / args.n)
        app.close()
    print(f"{args.backend}: {args.n} calls per mode, {args.rounds} rounds")
    for mode in MODES:
        ratios = [t / p for t, p in zip(per_call[mode], per_call["plain"], strict=True)]
        print(f"  {mode:8s} {1 / statistics.median(per_call[mode]):8.0f} calls/s   x plain: "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
