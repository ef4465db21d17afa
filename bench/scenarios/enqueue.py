"""Scenario 2: enqueue throughput: single (one job per call, sync and async) and bulk.

Each system's client runs in its own venv and times only its enqueue loop (the
connection is opened before the clock starts); no worker runs. Bulk uses the
system's own bulk API in batches of 1,000 (tether ``enqueue_many``, pgqueuer
``enqueue`` with lists, procrastinate ``batch_defer_async``, Oban
``enqueue_many``, Chancy ``push_many``). Single: tether ``enqueue`` /
``enqueue_async``, pgqueuer ``SyncQueries.enqueue`` (psycopg) / ``Queries.enqueue``
(asyncpg), procrastinate ``defer`` / ``defer_async``, Oban ``Worker.enqueue``
(async only), Chancy ``sync_push`` / ``push``. Also reported: client CPU,
PostgreSQL CPU, commits and WAL bytes per job.

    python bench/scenarios/enqueue.py --system tether --quick
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

MODES = ["bulk", "sync", "async"]


def run_one(system: C.System, mode: str, n: int, tag: str, warmup: int = 0) -> dict[str, Any]:
    C.recreate_db(system.db)
    C.run_client(system, ["setup"], log_to=C.scratch() / "logs" / f"{tag}-setup.log")
    C.settle_db(system.db)
    with C.connect() as admin:
        s0 = C.snapshot(system.db, admin)
        warm = ["--warmup", str(warmup)] if warmup and system.name == "tether" else []
        r = C.run_client(system, ["enqueue", "--mode", mode, "--n", str(n), "--batch", "1000", *warm],
                         log_to=C.scratch() / "logs" / f"{tag}.log")
        C.wait_no_backends(system.db)
        s1 = C.snapshot(system.db, admin)
    with C.connect(system.db) as c:
        (pending,) = c.execute(system.pending_sql).fetchone()  # type: ignore[misc]
    return {
        "system": system.name, "mode": mode, "n": n, "ok": bool(pending),
        "seconds": r["seconds"], "rate": n / r["seconds"],
        "client_cpu_per_job_ms": 1000 * r["cpu_s"] / n,
        "pg_cpu_per_job_ms": 1000 * (s1.pg_cpu - s0.pg_cpu) / n,
        "commits_per_job": (s1.commits - s0.commits) / n,
        "wal_bytes_per_job": C.wal_bytes(s0, s1) / n,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, systems=C.ALL_SYSTEMS)
    p.add_argument("--mode", action="append", choices=MODES, help="default: all three")
    p.add_argument("--n-bulk", type=int, default=None, help="jobs per bulk run (default 50,000; --quick 5,000)")
    p.add_argument("--n-single", type=int, default=None, help="jobs per single run (default 5,000; --quick 1,000)")
    p.add_argument("--warmup", type=int, default=0,
                   help="tether: calls made before the clock starts (the same mode, not counted)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n_bulk = args.n_bulk or (5000 if args.quick else 50000)
    n_single = args.n_single or (1000 if args.quick else 5000)
    systems = C.available(args.system or C.ALL_SYSTEMS)
    results: dict[str, Any] = {"n_bulk": n_bulk, "n_single": n_single, "batch": 1000, "systems": {}, "runs": []}
    # Interleaved as in the throughput scenario: every system in turn per repetition.
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for mode in args.mode or MODES:
        n = n_bulk if mode == "bulk" else n_single
        for rep in range(C.reps(args)):
            for name in C.rotated(systems, rep):
                system = C.SYSTEMS[name]
                if mode not in system.modes:
                    continue
                C.log(f"enqueue {name} {mode} n={n} rep {rep + 1}")
                speed = C.speed_probe()
                try:
                    r = run_one(system, mode, n, f"enq-{name}-{mode}-r{rep}", args.warmup)
                    C.log(f"  {r['rate']:.0f} jobs/s, client {r['client_cpu_per_job_ms']:.3f} ms/job, "
                          f"pg {r['pg_cpu_per_job_ms']:.3f} ms/job, {r['commits_per_job']:.3f} commits/job, "
                          f"speed probe {speed:.1f} ms")
                except Exception as exc:
                    C.log(f"  FAILED: {exc}")
                    r = {"system": name, "mode": mode, "n": n, "ok": False, "error": str(exc)[:2000]}
                r["rep"] = rep
                r["speed_probe_ms"] = speed
                runs.setdefault((name, mode), []).append(r)
                results["runs"].append(r)
    for name in systems:
        system = C.SYSTEMS[name]
        results["systems"][name] = {"notes": system.notes, "modes": {}}
        for mode in args.mode or MODES:
            if mode not in system.modes:
                results["systems"][name]["modes"][mode] = {"unsupported": True}
                continue
            done = runs[name, mode]
            ok = [r for r in done if r.get("ok")]
            results["systems"][name]["modes"][mode] = {
                "n": n_bulk if mode == "bulk" else n_single, "reps": len(done), "ok_reps": len(ok),
                **{k: C.median([r[k] for r in ok]) for k in
                   ("rate", "client_cpu_per_job_ms", "pg_cpu_per_job_ms", "commits_per_job", "wal_bytes_per_job")},
            }
        C.drop_db(system.db)
    C.save_raw("enqueue", results)
    return results


if __name__ == "__main__":
    main()
