"""Benchmark (issue 45): ``tether worker --processes 2`` against one process, CPU-bound ``def`` handlers.

    PYTHONPATH=src python bench/processes.py [--jobs N] [--rounds R] [--ms 50] [-c 1] [--sqlite]

Each job runs a pure-Python loop of about ``--ms`` milliseconds (its length
calibrated in this process at start, and sent as the job's argument, so both
modes run the same work). For each round, the two modes take turns (the order
flipped each round, so a drifting machine moves them alike): N jobs are
enqueued, then a real ``tether worker --burst -c C`` (one process) or
``tether worker --burst --processes 2 -c C`` (a supervisor and two worker
processes) drains them. Two figures per mode:

- **jobs/s**: N over the span from the first job's claim to the last one's
  end, read from the jobs' own timestamps (what the workers did, without
  their start-up);
- **wall**: seconds from the worker's spawn until it exits (start-up
  included: the supervisor, then each child imports the app).

The figure to read is the ratio 2 processes / 1 (the issue's target: >= 1.7
on a 2-core machine), as the median of the rounds' paired ratios with their
range. On a shared, loaded machine a round's ratio moves with whatever else
runs: read the range. The app is this module (``processes:app``); the worker
runs it from bench/ with src/ on its path, on PostgreSQL (schema
``bench_processes``) or, with ``--sqlite``, a SQLite file.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import psycopg

import tether

PG_ADMIN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "bench_processes"
PG_URL = f"{PG_ADMIN}?schema={SCHEMA}"
HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

def spin_for(loops: int) -> int:
    """The CPU-bound work: a pure-Python loop (the GIL held throughout)."""
    total = 0
    for i in range(loops):
        total = (total + i * i) % 1_000_003
    return total


def spin(ctx: tether.JobContext, loops: int) -> int:
    return spin_for(loops)


def make_app(url: str) -> tether.Tether:
    made = tether.Tether(url)
    made.task(name="processes.spin")(spin)
    return made


#: what the workers run (``processes:app``)
app = make_app(os.environ.get("TETHER_DATABASE_URL", PG_URL))


def calibrate(ms: float) -> int:
    """Loops that take about ``ms`` here (the fastest of a few tries: the machine's load only slows it)."""
    probe = 200_000
    best = min(_timed(probe) for _ in range(5))
    return max(1, int(probe * ms / 1000 / best))


def _timed(loops: int) -> float:
    t0 = time.perf_counter()
    spin_for(loops)
    return time.perf_counter() - t0


class Bench:
    def __init__(self, url: str, concurrency: int) -> None:
        self.url = url
        self.concurrency = concurrency
        self.app = make_app(url)
        #: each run's jobs per worker process, most first
        self.shares: list[list[int]] = []
        #: CPU seconds per job of the worker's processes (supervisor and children included), by mode
        self.cpu: dict[int, list[float]] = {1: [], 2: []}
        #: each run's seconds from the first claim to the last worker process's first
        self.stagger: list[float] = []

    def fresh(self) -> None:
        if self.url.startswith("postgresql"):
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        else:
            self.app.close()
            Path(self.url.removeprefix("sqlite:///")).unlink(missing_ok=True)
            self.app = make_app(self.url)
        self.app.migrate()

    def run(self, processes: int, n: int, loops: int) -> tuple[float, float, float]:
        """(jobs/s over the jobs' own span, jobs/s once every worker process
        had claimed its first job, the worker's wall time from spawn to exit)."""
        self.fresh()
        ids = self.app.enqueue_many("processes.spin", [{"loops": loops}] * n)
        env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{SRC}", "TETHER_DATABASE_URL": self.url}
        argv = [sys.executable, "-m", "tether", "worker", "--app", "processes:app", "-c", str(self.concurrency),
                "--burst", "--log-level", "warning", *(["--processes", str(processes)] if processes > 1 else [])]
        t0, cpu0 = time.perf_counter(), _children_cpu()
        proc = subprocess.run(argv, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - t0
        self.cpu[processes].append((_children_cpu() - cpu0) / n)
        if proc.returncode != 0:
            raise SystemExit(f"the worker exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
        runs = []  # (worker, claimed, finished) of each job's attempt
        for job_id in ids:
            job = self.app.get_job(job_id)
            if job is None or job.state is not tether.JobState.SUCCEEDED or job.attempts[-1].finished_at is None:
                raise SystemExit(f"job {job_id} did not succeed: {job}")
            att = job.attempts[-1]
            runs.append((att.worker, att.claimed_at, att.finished_at))
        by_worker: dict[str, list[datetime]] = {}
        for worker, claimed, _ in runs:
            by_worker.setdefault(worker, []).append(claimed)
        self.shares.append(sorted((len(v) for v in by_worker.values()), reverse=True))
        first = min(claimed for _, claimed, _ in runs)
        last = max(finished for _, _, finished in runs if finished is not None)
        all_up = max(min(v) for v in by_worker.values())  # the last worker process's first claim
        self.stagger.append((all_up - first).total_seconds())
        after = sum(1 for _, claimed, _ in runs if claimed >= all_up)
        return n / (last - first).total_seconds(), after / (last - all_up).total_seconds(), wall


def _children_cpu() -> float:
    """User + system CPU of this process's waited-for children and their own (the supervisor's workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _loop_cpu(loops: int) -> float:
    """CPU seconds of one job's loop alone, here (the least of a few)."""
    best = math.inf
    for _ in range(5):
        t0 = time.process_time()
        spin_for(loops)
        best = min(best, time.process_time() - t0)
    return best


def _spread(values: list[float], fmt: str = ".3g") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=120)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ms", type=float, default=50.0, help="each job's loop, in milliseconds (calibrated here)")
    p.add_argument("-c", "--concurrency", type=int, default=1, help="slots per worker process")
    p.add_argument("--sqlite", action="store_true", help="a SQLite file instead of PostgreSQL")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}" if args.sqlite else PG_URL
        bench = Bench(url, args.concurrency)
        loops = calibrate(args.ms)
        rate: dict[int, list[float]] = {1: [], 2: []}
        steady: dict[int, list[float]] = {1: [], 2: []}
        wall: dict[int, list[float]] = {1: [], 2: []}
        for r in range(args.rounds):
            for processes in ((1, 2) if r % 2 == 0 else (2, 1)):
                jobs_per_s, up_per_s, took = bench.run(processes, args.jobs, loops)
                rate[processes].append(jobs_per_s)
                steady[processes].append(up_per_s)
                wall[processes].append(took)
        bench.app.close()
    load = os.getloadavg()[0]
    ratio = [b / a for a, b in zip(rate[1], rate[2], strict=True)]
    steady_ratio = [b / a for a, b in zip(steady[1], steady[2], strict=True)]
    wall_ratio = [a / b for a, b in zip(wall[1], wall[2], strict=True)]
    stagger = [x for i, x in enumerate(bench.stagger) if len(bench.shares[i]) > 1]
    print(f"{args.jobs} jobs of ~{args.ms:g} ms ({loops:,} loops), -c {args.concurrency}, "
          f"{'SQLite' if args.sqlite else 'PostgreSQL'}, {args.rounds} rounds, load average {load:.2f} at the end")
    for processes in (1, 2):
        print(f"  {processes} process(es): {_spread(rate[processes])} jobs/s; all up: {_spread(steady[processes])} "
              f"jobs/s; wall {_spread(wall[processes])} s")
    cpu_ms = {m: [x * 1000 for x in bench.cpu[m]] for m in (1, 2)}
    extra = statistics.median(cpu_ms[2]) - statistics.median(cpu_ms[1])
    print(f"  CPU per job (the worker's processes, start-up included): 1 process {_spread(cpu_ms[1])} ms, "
          f"2 {_spread(cpu_ms[2])} ms (the supervisor and a second worker: {extra:+.2g} ms a job); "
          f"the loop alone here {_loop_cpu(loops) * 1000:.3g} ms")
    print(f"  jobs per worker process, each run: {' '.join('/'.join(map(str, x)) for x in bench.shares)}; the "
          f"second process's first claim {_spread(stagger or [0.0], '.2f')} s after the first's")
    print(f"  --processes 2 / one process: {_spread(ratio, '.2f')} on the jobs' span (target >= 1.7); "
          f"{_spread(steady_ratio, '.2f')} once both run; {_spread(wall_ratio, '.2f')} on wall time (start-up "
          "included)")


if __name__ == "__main__":
    main()
