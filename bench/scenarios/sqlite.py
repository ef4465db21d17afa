"""Scenario 7: tether embedded on SQLite: throughput with 1, 2 and 4 worker
processes on one database file (WAL mode, synchronous=NORMAL: tether's default).

Same method as the PostgreSQL throughput scenario: N no-op jobs bulk-enqueued
first, then the workers start; the clock runs from the first handler to the
moment nothing is queued or running (polled every 20 ms with a read-only
SQLite connection). Reported: jobs/s and worker CPU per job.

    python bench/scenarios/sqlite.py --quick
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

WORKERS = [1, 2, 4]


def run_one(n: int, workers: int, concurrency: int, tag: str, *, task: str = "noop",
            cpus: str | None = None) -> dict[str, Any]:
    """``task``: the jobs' task (``noop_sync``: ``def`` handlers); ``cpus``: the workers' CPUs (taskset)."""
    path = C.scratch() / "sqlite-bench.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    system = C.tether_sqlite(path)
    C.run_client(system, ["setup"])
    enq = C.run_client(system, ["enqueue", "--mode", "bulk", "--n", str(n), "--batch", "1000", "--task", task])
    marks = C.fresh_dir(f"marks-{tag}")
    t_spawn = time.time()
    w = C.spawn_workers(system, workers, concurrency, extra_env={"BENCH_MARK_DIR": str(marks)}, tag=f"-{tag}",
                        cpus=cpus)
    try:
        if C.wait_first_mark(marks, w, timeout=120) is None:
            raise RuntimeError(f"no job started (workers alive: {w.alive()}); see {C.scratch() / 'logs'}")
        w1 = w.cpu()
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        deadline = time.monotonic() + max(120.0, n / 50)
        while True:
            t_q = time.time()
            (pending,) = db.execute(system.pending_sql).fetchone()
            if not pending:
                t_done = t_q
                break
            if time.monotonic() > deadline or not w.alive():
                raise RuntimeError(f"jobs still pending at the deadline (workers alive: {w.alive()})")
            time.sleep(0.02)
        (done,) = db.execute(system.done_sql).fetchone()
        db.close()
        w2 = w.cpu()
    finally:
        total_cpu = w.stop()
    t_first = min(C.first_marks(marks))
    return {
        "workers": workers, "concurrency": concurrency, "n": n, "done": int(done), "ok": int(done) == n,
        "prefill_rate": n / enq["seconds"], "seconds": t_done - t_first, "rate": n / (t_done - t_first),
        "rate_from_spawn": n / (t_done - t_spawn), "worker_cpu_per_job_ms": 1000 * (w2 - w1) / n,
        "worker_cpu_total_s": total_cpu, "worker_cpu_total_per_job_ms": 1000 * total_cpu / n,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, default_n=20000)
    p.add_argument("--workers", type=int, action="append", help="worker processes (repeatable; default 1 2 4)")
    p.add_argument("--concurrency", type=int, default=10, help="per worker (default 10)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n = args.n or (2000 if args.quick else 20000)
    C.available(["tether"]) or sys.exit("tether's bench venv is missing")
    results: dict[str, Any] = {"n": n, "concurrency": args.concurrency, "by_workers": {}, "runs": []}
    for k in args.workers or WORKERS:
        runs = []
        for rep in range(C.reps(args)):
            C.log(f"sqlite {k} worker(s) x c{args.concurrency} n={n} rep {rep + 1}")
            try:
                r = run_one(n, k, args.concurrency, f"sqlite-{k}w-r{rep}")
                C.log(f"  {r['rate']:.0f} jobs/s, worker {r['worker_cpu_per_job_ms']:.3f} ms/job, done {r['done']}/{n}")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"workers": k, "ok": False, "error": str(exc)[:2000]}
            r["rep"] = rep
            runs.append(r)
            results["runs"].append(r)
        ok = [r for r in runs if r.get("ok")]
        results["by_workers"][str(k)] = {"ok_reps": len(ok), "rate": C.median([r["rate"] for r in ok]),
                                         "rate_from_spawn": C.median([r["rate_from_spawn"] for r in ok]),
                                         "worker_cpu_per_job_ms": C.median([r["worker_cpu_per_job_ms"] for r in ok])}
    C.save_raw("sqlite", results)
    return results


if __name__ == "__main__":
    main()
