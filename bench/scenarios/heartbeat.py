"""Scenario 4: heartbeat cost with 1, 100, 1,000 and 10,000 long-running jobs in flight.

J sleeping jobs are bulk-enqueued; W worker processes (1 for J = 1, else
``--workers``, default 2) each take J/W of them and hold them. Once all J are
running, the driver waits out PostgreSQL's lazy statistics flush (11 s: an idle
backend publishes its counters within 10 s), then measures a window: database
statements (``xact_commit``: tether runs in autocommit, one statement is one
commit), PostgreSQL and worker CPU, WAL bytes. The window ends with SIGKILL
(no graceful release of thousands of jobs), and the closing counters are read
after every connection is gone. tether runs with short timers so a window holds
many ticks (heartbeat 1 s, lease 10 s, reaper 2 s by default); the claim of a
statement-per-worker-per-tick design is that ``statements_per_worker_per_tick``
stays flat from J = 1 to 10,000.

Peers can be measured too (``--system pgqueuer`` ...) with their default timers.

    python bench/scenarios/heartbeat.py --quick
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

LEVELS = [1, 100, 1000, 10000]
STATS_FLUSH_WAIT = 11.0


def run_one(system: C.System, jobs: int, workers: int, window: float, hb: float, lease: float,
            reaper: float) -> dict[str, Any]:
    workers = 1 if jobs == 1 else workers
    per_worker = -(-jobs // workers)
    C.recreate_db(system.db)
    setup_args = ["setup"] + (["--concurrency", str(per_worker)] if system.setup_takes_concurrency else [])
    C.run_client(system, setup_args)
    C.run_client(system, ["enqueue", "--mode", "bulk", "--n", str(jobs), "--task", "sleepy",
                          "--args", '{"seconds": 3600}'])
    C.settle_db(system.db)
    env = {"BENCH_HEARTBEAT": str(hb), "BENCH_LEASE_TTL": str(lease), "BENCH_REAPER": str(reaper)}
    w = C.spawn_workers(system, workers, per_worker, extra_env=env, tag=f"-hb{jobs}")
    out: dict[str, Any] = {"system": system.name, "jobs": jobs, "workers": workers, "window_s": window}
    try:
        t0 = time.monotonic()
        with C.connect(system.db) as pc:
            while True:
                (running,) = pc.execute(system.running_sql).fetchone()  # type: ignore[misc]
                if running >= jobs:
                    break
                if time.monotonic() - t0 > 300 or not w.alive():
                    raise RuntimeError(f"only {running}/{jobs} jobs running (workers alive: {w.alive()})")
                time.sleep(0.2)
        out["ramp_s"] = time.monotonic() - t0
        time.sleep(STATS_FLUSH_WAIT)
        with C.connect() as admin, C.Sentinel() as sentinel:
            a = C.snapshot(system.db, admin)
            wa = w.cpu()
            time.sleep(window / 2)
            conns = C.backends(system.db, admin)
            time.sleep(window / 2)
            wb = w.cpu()
            b_cpu = C.pg_cpu()
            t_end = time.time()
            with C.connect(system.db) as pc:
                (running_end,) = pc.execute(system.running_sql).fetchone()  # type: ignore[misc]
            w.stop(signal.SIGKILL)
        C.wait_no_backends(system.db)
        b = C.snapshot(system.db)
    finally:
        w.stop(signal.SIGKILL)
    secs = t_end - a.t
    raw_commits = b.commits - a.commits - 1  # minus our running-count probe
    commits = sentinel.correct(raw_commits, conns)
    out.update({
        "running_at_end": int(running_end),
        "ok": int(running_end) == jobs,
        # jobs that were no longer running at the end of the window (a worker that
        # could not renew a lease in time fences itself off the job)
        "lost": jobs - int(running_end),
        "connections": conns,
        "raw_statements_per_s": raw_commits / secs,
        "catchup_commits_per_idle_connection": sentinel.catchup,
        "statements_per_s": commits / secs,
        "statements_per_worker_per_s": commits / secs / workers,
        "worker_cpu_pct_per_worker": 100 * (wb - wa) / secs / workers,
        "pg_cpu_pct": 100 * (b_cpu - a.pg_cpu) / secs,
        "wal_bytes_per_s": C.wal_bytes(a, b) / secs,
    })
    if system.name == "tether":
        out["heartbeat_s"] = hb
        out["statements_per_worker_per_tick"] = out["statements_per_worker_per_s"] * hb
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, systems=C.ALL_SYSTEMS)
    p.add_argument("--jobs", type=int, action="append", help="jobs in flight (repeatable; default 1 100 1000 10000)")
    p.add_argument("--workers", type=int, default=2, help="worker processes when jobs > 1 (default 2)")
    p.add_argument("--window", type=float, default=None, help="measured seconds (default 60; --quick 15)")
    p.add_argument("--heartbeat", type=float, default=1.0, help="tether heartbeat_interval (default 1 s)")
    p.add_argument("--lease", type=float, default=10.0, help="tether lease_ttl (default 10 s)")
    p.add_argument("--reaper", type=float, default=2.0, help="tether reaper_interval (default 2 s)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    window = args.window or (15.0 if args.quick else 60.0)
    systems = C.available(args.system or ["tether"])
    results: dict[str, Any] = {"levels": args.jobs or LEVELS, "window_s": window, "workers": args.workers,
                               "timers": {"heartbeat_s": args.heartbeat, "lease_ttl_s": args.lease,
                                          "reaper_s": args.reaper}, "systems": {}, "runs": []}
    for name in systems:
        system = C.SYSTEMS[name]
        results["systems"][name] = {"levels": {}}
        for jobs in args.jobs or LEVELS:
            runs = []
            for rep in range(args.reps or 1):  # the counts are steady: one run unless asked
                C.log(f"heartbeat {name} jobs={jobs} rep {rep + 1}")
                try:
                    r = run_one(system, jobs, args.workers, window, args.heartbeat, args.lease, args.reaper)
                    C.log(f"  {r['statements_per_worker_per_s']:.2f} statements/s per worker, worker CPU "
                          f"{r['worker_cpu_pct_per_worker']:.2f}% each, PG CPU {r['pg_cpu_pct']:.2f}%, "
                          f"{r['wal_bytes_per_s']:.0f} WAL B/s (ramp {r['ramp_s']:.1f}s)")
                except Exception as exc:
                    C.log(f"  FAILED: {exc}")
                    r = {"system": name, "jobs": jobs, "ok": False, "error": str(exc)[:2000]}
                r["rep"] = rep
                runs.append(r)
                results["runs"].append(r)
            # a run that lost jobs still measured its statements: keep it, show the loss
            ok = [r for r in runs if "statements_per_s" in r]
            keys = ["lost", "statements_per_s", "statements_per_worker_per_s", "worker_cpu_pct_per_worker", "pg_cpu_pct",
                    "wal_bytes_per_s", "statements_per_worker_per_tick"]
            results["systems"][name]["levels"][str(jobs)] = {
                "workers": 1 if jobs == 1 else args.workers, "ok_reps": len(ok),
                **{k: C.median([r[k] for r in ok if k in r]) for k in keys},
            }
        C.drop_db(system.db)
    C.save_raw("heartbeat", results)
    return results


if __name__ == "__main__":
    main()
