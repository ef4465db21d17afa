"""Benchmark (issue 42): workflows and batches against plain jobs, on PostgreSQL.

    PYTHONPATH=src python bench/flows.py [--jobs N] [--rounds R] [--processes 1,4]

Three figures, each a ratio to its plain-job counterpart measured in the same
run, the two interleaved (order flipped each round) so a drifting machine
moves them alike:

- batch throughput: N no-op jobs as the members of one batch with an
  on_complete callback, against the same N plain jobs (enqueue_many), each
  drained by a real ``tether worker --burst --processes P`` (timed from its
  spawn until it exits: the callback, released by the last member's ending,
  is claimed in that run). Every member's ending counts its batch down, over
  up to 16 shard rows, so the counting must not serialize the workers (the
  issue's target: >= 0.8x plain, with 1 and 4 processes);
- chain latency: with an idle worker running, a 3-step chain from
  ``app.chain(...)`` to its last step's end (``app.wait``), against one job's
  enqueue-to-end (target: <= 3x);
- a 1,000-step workflow enqueued in one call, against ``enqueue_many`` of
  1,000 plain jobs (one transaction each).

Prints medians with their range. The app is this module (``flows:app``); the
worker runs it from bench/ with src/ on its path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

import tether

PG_ADMIN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "bench_flows"
URL = f"{PG_ADMIN}?schema={SCHEMA}"
HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

app = tether.Tether(os.environ.get("TETHER_DATABASE_URL", URL))


@app.task(name="flows.noop")
def noop(ctx: tether.JobContext) -> None:
    return None


@app.task(name="flows.done")
def done(ctx: tether.JobContext) -> None:
    return None


def _fresh() -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    app.migrate()


def _worker(processes: int, *, burst: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{SRC}", "TETHER_DATABASE_URL": URL}
    argv = [sys.executable, "-m", "tether", "worker", "--app", "flows:app", "-c", "10",
            "--processes", str(processes), "--log-level", "warning"]
    return subprocess.Popen([*argv, "--burst"] if burst else argv, cwd=HERE, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _drained(processes: int) -> float:
    """Seconds from a burst worker's spawn until it exits, all jobs done."""
    t0 = time.perf_counter()
    w = _worker(processes, burst=True)
    if w.wait(600) != 0:
        raise SystemExit(f"the burst worker exited {w.returncode}")
    took = time.perf_counter() - t0
    left = app.count_jobs(state=["queued", "running", "waiting"])
    if left:
        raise SystemExit(f"{left} job(s) left after the burst worker exited")
    return took


def _plain(n: int, processes: int) -> float:
    _fresh()
    for start in range(0, n, 1000):
        noop.enqueue_many([{}] * min(1000, n - start))
    return n / _drained(processes)


def _batch(n: int, processes: int) -> float:
    _fresh()
    with app.batch(on_complete=done.spec()) as batch:
        batch.add_many(noop, [{}] * n)
    took = _drained(processes)
    assert app.get_job(batch.callbacks["on_complete"]).state is tether.JobState.SUCCEEDED  # type: ignore[union-attr]
    return (n + 1) / took


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} [{min(values):.3g}-{max(values):.3g}]"


def throughput(n: int, rounds: int, processes: int) -> None:
    plain: list[float] = []
    batched: list[float] = []
    for r in range(rounds):
        for kind in (("plain", "batch") if r % 2 == 0 else ("batch", "plain")):
            (plain if kind == "plain" else batched).append(
                _plain(n, processes) if kind == "plain" else _batch(n, processes))
    ratios = [b / p for b, p in zip(batched, plain, strict=True)]
    print(f"{n:,} jobs, {processes} process(es): plain {_spread(plain)} jobs/s, batch {_spread(batched)} jobs/s; "
          f"batch/plain {_spread(ratios)} (target >= 0.8)")


def latency(samples: int) -> None:
    _fresh()
    w = _worker(1, burst=False)
    try:
        app.wait(noop.enqueue(), timeout=30)  # the worker is up
        one: list[float] = []
        chain: list[float] = []
        for i in range(samples):
            for kind in (("one", "chain") if i % 2 == 0 else ("chain", "one")):
                t0 = time.perf_counter()
                if kind == "one":
                    app.wait(noop.enqueue(), timeout=30)
                    one.append(time.perf_counter() - t0)
                else:
                    run = app.chain(noop.spec(), noop.spec(), noop.spec())
                    app.wait(max(run.jobs.values()), timeout=30)
                    chain.append(time.perf_counter() - t0)
                time.sleep(0.05)  # idle between samples: the latency of a worker that was waiting
    finally:
        w.terminate()
        w.wait(30)
    print(f"idle latency: one job {_spread([x * 1000 for x in one])} ms, 3-step chain "
          f"{_spread([x * 1000 for x in chain])} ms; chain/one {statistics.median(chain) / statistics.median(one):.2f} "
          f"(target <= 3)")


def enqueue_big(rounds: int) -> None:
    _fresh()
    wf_s: list[float] = []
    many_s: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        noop.enqueue_many([{}] * 1000)
        many_s.append(time.perf_counter() - t0)
        wf = app.workflow("big")
        prev = None
        for i in range(1000):
            prev = wf.add(noop.spec(), after=[prev] if prev is not None else [], name=f"step-{i}")
        t0 = time.perf_counter()
        wf.enqueue()
        wf_s.append(time.perf_counter() - t0)
    print(f"1,000 steps in one call: workflow {_spread([x * 1000 for x in wf_s])} ms, enqueue_many of 1,000 "
          f"{_spread([x * 1000 for x in many_s])} ms; ratio {statistics.median(wf_s) / statistics.median(many_s):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--processes", default="1,4")
    p.add_argument("--samples", type=int, default=20)
    args = p.parse_args()
    for processes in (int(x) for x in args.processes.split(",")):
        throughput(args.jobs, args.rounds, processes)
    latency(args.samples)
    enqueue_big(args.rounds)
    app.close()


if __name__ == "__main__":
    main()
