"""Scenario 1: processing throughput of N pre-enqueued no-op jobs.

For each system: one worker process at concurrency 10, 50 and 100, then 2 and 4
worker processes (concurrency 10 each). Each run starts from a fresh database:
set up, bulk-enqueue N jobs, VACUUM ANALYZE + CHECKPOINT, then start the
workers and poll (one cheap EXISTS every 20 ms) until nothing is queued or
running. Reported per run:

- ``rate``: N / (last job done - first handler started); the first handler
  writes a marker file, so interpreter start-up and imports are not counted;
  ``rate_from_spawn`` counts them too;
- ``worker_cpu_per_job_ms`` and ``pg_cpu_per_job_ms`` over the same window
  (/proc); ``worker_cpu_total_s`` from rusage, start-up and shutdown included;
- ``commits_per_job`` (pg_stat_database.xact_commit, our polls subtracted) and
  ``wal_bytes_per_job`` (pg_current_wal_lsn), from worker spawn until every
  connection closed;
- whole-process figures: ``rate_from_spawn`` (N / from the workers' spawn until
  the database shows every job finished), ``worker_cpu_total_per_job_ms`` (the
  worker processes' whole-life CPU: the rusage ``wait4`` returns, start-up and
  shutdown included) and ``pg_cpu_total_per_job_ms`` (the server's CPU from
  before the spawn until every connection closed), summed in
  ``cpu_total_per_job_ms``.

    python bench/scenarios/throughput.py --system tether --n 2000 --reps 1
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

CONFIGS = [(1, 10), (1, 50), (1, 100), (2, 10), (4, 10)]  # (worker processes, concurrency each)
POLL = 0.02


def config_name(workers: int, concurrency: int) -> str:
    return f"{workers}w x c{concurrency}"


Watch = Callable[[Any], None]


def wait_drained(system: C.System, w: C.Workers, n: int, admin: Any, watch: Watch | None = None) -> tuple[float, int]:
    """Poll ``system.pending_sql`` every POLL seconds until nothing is queued or
    running; returns when it first saw that (wall clock) and how many polls it
    sent. ``watch(admin)`` runs after each poll that still saw work."""
    polls = 0
    deadline = time.monotonic() + max(120.0, n / 50)
    with C.connect(system.db) as pc:
        while True:
            t_q = time.time()
            (pending,) = pc.execute(system.pending_sql).fetchone()  # type: ignore[misc]
            polls += 1
            if not pending:
                return t_q, polls
            if watch is not None:
                watch(admin)
            if time.monotonic() > deadline or not w.alive():
                raise RuntimeError(f"{system.name}: jobs still pending at the deadline (workers alive: {w.alive()})")
            time.sleep(POLL)


def after_exit(system: C.System) -> tuple[C.Snap, int]:
    """Once the workers exited: the closing snapshot (taken when every
    connection closed, so their counters are flushed) and the jobs succeeded."""
    C.wait_no_backends(system.db)
    s3 = C.snapshot(system.db)
    with C.connect(system.db) as c:
        (done,) = c.execute(system.done_sql).fetchone()  # type: ignore[misc]
    return s3, int(done)


def run_one(system: C.System, n: int, workers: int, concurrency: int, tag: str,
            env: dict[str, str] | None = None, *, task: str = "noop",
            watch: Watch | None = None, cpus: str | None = None) -> dict[str, Any]:
    """``env`` reaches the workers and the client (e.g. TETHER_TRANSPORT);
    ``task``: the jobs' task (tether: ``noop_sync`` for ``def`` handlers);
    ``cpus``: the workers' CPUs (``taskset -c``; None: wherever the kernel puts them);
    ``watch(admin)`` is called at each poll while the jobs run, on the driver's
    admin connection (e.g. to sample pg_stat_activity)."""
    db = system.db
    C.recreate_db(db)
    setup_args = ["setup"] + (["--concurrency", str(concurrency)] if system.setup_takes_concurrency else [])
    C.run_client(system, setup_args, extra_env=env, log_to=C.scratch() / "logs" / f"{tag}-setup.log")
    enq_args = ["enqueue", "--mode", "bulk", "--n", str(n), "--batch", "1000"] + (
        ["--task", task] if task != "noop" else [])
    enq = C.run_client(system, enq_args, extra_env=env, log_to=C.scratch() / "logs" / f"{tag}-prefill.log")
    C.settle_db(db)
    marks = C.fresh_dir(f"marks-{tag}")
    with C.connect() as admin, C.Sentinel() as sentinel:
        s0 = C.snapshot(db, admin)
        t_spawn = time.time()
        w = C.spawn_workers(system, workers, concurrency, extra_env={**(env or {}), "BENCH_MARK_DIR": str(marks)},
                            tag=f"-{tag}", cpus=cpus)
        out: dict[str, Any] = {"system": system.name, "workers": workers, "concurrency": concurrency, "n": n,
                               "prefill_rate": n / enq["seconds"]}
        try:
            if C.wait_first_mark(marks, w, timeout=120) is None:
                raise RuntimeError(f"{system.name}: no job started (workers alive: {w.alive()}); "
                                   f"see {C.scratch() / 'logs'}")
            s1 = C.snapshot(db, admin)
            w1 = w.cpu()
            conns = C.backends(db, admin)
            t_done, polls = wait_drained(system, w, n, admin, watch)
            w2 = w.cpu()
            s2 = C.snapshot(db, admin)
        finally:
            rusage_cpu = w.stop()
            t_exit = time.time()
    s3, done = after_exit(system)
    t_first = min(C.first_marks(marks))
    window = t_done - t_first
    # Not corrected for catch-up transactions (see common.Sentinel): busy
    # connections take none, so subtracting per connection would overcorrect;
    # the sentinel's count is kept as a noise indicator (0 on a quiet server).
    commits = (s3.commits - s0.commits) - polls
    out.update({
        "done": int(done),
        "ok": int(done) == n,
        "seconds": window,
        "rate": n / window,
        "rate_from_spawn": n / (t_done - t_spawn),
        "startup_s": t_first - t_spawn,
        "worker_cpu_s": w2 - w1,
        "pg_cpu_s": s2.pg_cpu - s1.pg_cpu,
        "worker_cpu_total_s": rusage_cpu,
        "pg_cpu_total_s": s3.pg_cpu - s0.pg_cpu,
        "worker_cpu_total_per_job_ms": 1000 * rusage_cpu / n,
        "pg_cpu_total_per_job_ms": 1000 * (s3.pg_cpu - s0.pg_cpu) / n,
        "cpu_total_per_job_ms": 1000 * (rusage_cpu + s3.pg_cpu - s0.pg_cpu) / n,
        "t_spawn": t_spawn,
        "t_done": t_done,
        "t_exit": t_exit,
        "worker_cpu_per_job_ms": 1000 * (w2 - w1) / n,
        "pg_cpu_per_job_ms": 1000 * (s2.pg_cpu - s1.pg_cpu) / n,
        "cpu_per_job_ms": 1000 * ((w2 - w1) + (s2.pg_cpu - s1.pg_cpu)) / n,
        "catchup_commits_per_idle_connection": sentinel.catchup,
        "connections": conns,
        "commits": commits,
        "commits_per_job": commits / n,
        "wal_bytes": C.wal_bytes(s0, s3),
        "wal_bytes_per_job": C.wal_bytes(s0, s3) / n,
    })
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each figure over the repetitions that finished."""
    ok = [r for r in runs if r.get("ok")]
    keys = ["rate", "rate_from_spawn", "worker_cpu_per_job_ms", "pg_cpu_per_job_ms", "cpu_per_job_ms",
            "worker_cpu_total_per_job_ms", "pg_cpu_total_per_job_ms", "cpu_total_per_job_ms",
            "commits_per_job", "wal_bytes_per_job", "startup_s"]
    out: dict[str, Any] = {"reps": len(runs), "ok_reps": len(ok)}
    for k in keys:
        out[k] = C.median([r[k] for r in ok])
    if not ok and runs:
        out["error"] = runs[-1].get("error")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, systems=C.ALL_SYSTEMS, default_n=20000)
    p.add_argument("--config", action="append", default=None, metavar="WxC",
                   help="worker processes x concurrency, e.g. 1x10 (repeatable; default: 1x10 1x50 1x100 2x10 4x10)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n = args.n or (2000 if args.quick else 20000)
    configs = ([tuple(int(x) for x in c.lower().split("x")) for c in args.config] if args.config else CONFIGS)
    systems = C.available(args.system or C.ALL_SYSTEMS)
    results: dict[str, Any] = {"n": n, "configs": [config_name(*c) for c in configs], "systems": {}, "runs": []}
    # Interleaved: each repetition runs every system in turn (the order
    # rotating), so a machine whose speed drifts over minutes (a shared host)
    # slows every system alike instead of whichever ran in its slow spell.
    runs: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for workers, conc in configs:
        for rep in range(C.reps(args)):
            for name in C.rotated(systems, rep):
                system = C.SYSTEMS[name]
                tag = f"tp-{name}-{workers}x{conc}-r{rep}"
                C.log(f"throughput {name} {config_name(workers, conc)} n={n} rep {rep + 1}")
                speed = C.speed_probe()
                try:
                    r = run_one(system, n, workers, conc, tag)
                    C.log(f"  {r['rate']:.0f} jobs/s, worker {r['worker_cpu_per_job_ms']:.3f} ms/job, "
                          f"pg {r['pg_cpu_per_job_ms']:.3f} ms/job; whole process {r['rate_from_spawn']:.0f} "
                          f"jobs/s, {r['cpu_total_per_job_ms']:.3f} ms/job; {r['commits_per_job']:.2f} commits/job, "
                          f"{r['wal_bytes_per_job']:.0f} WAL B/job, done {r['done']}/{n}, speed probe {speed:.1f} ms")
                except Exception as exc:  # a peer that breaks must not stop the others
                    C.log(f"  FAILED: {exc}")
                    r = {"system": name, "workers": workers, "concurrency": conc, "n": n, "ok": False,
                         "error": str(exc)[:2000]}
                r["rep"] = rep
                r["speed_probe_ms"] = speed
                runs.setdefault((name, workers, conc), []).append(r)
                results["runs"].append(r)
    for name in systems:
        results["systems"][name] = {"notes": C.SYSTEMS[name].notes, "configs": {
            config_name(workers, conc): summarize(runs[name, workers, conc]) for workers, conc in configs}}
        C.drop_db(C.SYSTEMS[name].db)
    C.save_raw("throughput", results)
    return results


if __name__ == "__main__":
    main()
