"""Scenario: what ``isolation="process"`` costs per job, against ``def`` handlers on threads (issue 45).

A standalone scenario (not in runall's set): run it with a Python that has
this tree's tether (``.venv/bin/python bench/scenarios/isolation.py``). For
each repetition, the two modes take turns: ``--n`` no-op ``def`` jobs are
enqueued, then a burst worker (``--concurrency`` slots) runs them in this
process and stops; **jobs_per_s** is the jobs over the worker's run, and
**per_job_ms** the worker's wall time per job. The figure to read is the
ratio process/thread and the extra milliseconds per job: a child's round
trip (the job sent down a pipe, the result back), and the forks of the
children at the start (one per slot).

    .venv/bin/python bench/scenarios/isolation.py --n 2000 --reps 3
    .venv/bin/python bench/scenarios/isolation.py --url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from tether import JobContext, Tether


def run_once(url: str, mode: str, n: int, concurrency: int) -> float:
    app = Tether(url)
    app.migrate()

    @app.task(name=f"noop_{mode}")
    def noop(ctx: JobContext) -> None:
        return None

    try:
        noop.enqueue_many([{}] * n)
        worker = app.worker(concurrency=concurrency, burst=True, isolation=mode)
        started = time.perf_counter()
        asyncio.run(worker.run())
        return time.perf_counter() - started
    finally:
        app.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="n=500, one repetition")
    p.add_argument("--url", help="a database URL (default: a fresh SQLite file per run)")
    args = p.parse_args()
    if args.quick:
        args.n, args.reps = 500, 1
    took: dict[str, list[float]] = {"thread": [], "process": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for mode in (("thread", "process") if rep % 2 == 0 else ("process", "thread")):
                url = args.url or f"sqlite:///{Path(tmp) / f'{mode}-{rep}.db'}"
                took[mode].append(run_once(url, mode, args.n, args.concurrency))
    rate = {m: args.n / statistics.median(t) for m, t in took.items()}
    per_job = {m: statistics.median(t) / args.n * 1000 for m, t in took.items()}
    for m in took:
        print(f"{m:8s} {rate[m]:9.0f} jobs/s  {per_job[m]:7.3f} ms/job  (runs: "
              f"{', '.join(f'{t:.2f}s' for t in took[m])})")
    print(f"process/thread throughput: {rate['process'] / rate['thread']:.2f}x; "
          f"isolation costs {per_job['process'] - per_job['thread']:.3f} ms per job "
          f"(n={args.n}, concurrency={args.concurrency}, {args.url or 'SQLite'})")


if __name__ == "__main__":
    main()
