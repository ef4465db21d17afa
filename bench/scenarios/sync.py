"""Scenario: ``def`` handlers beside ``async def`` ones (tether only).

The same N pre-enqueued no-op jobs, run by one worker process whose handlers
are ``async def`` (task ``noop``: a task on the event loop) or plain ``def``
(task ``noop_sync``: a call on the worker's handler threads, its outcome
handed back to the loop in batches), on PostgreSQL and on SQLite, at
concurrency 10 and 50. Within each repetition the two kinds run back to back,
their order alternating, so that the ratio sync/async compares runs made a
few seconds apart. Measured as the throughput scenario measures (PostgreSQL:
``throughput.run_one``; SQLite: ``sqlite.run_one``): jobs/s from the first
handler to the last job done, from spawn too, and worker CPU per job.

Reported per backend and concurrency: each kind's medians and the median of
the per-repetition ratios sync/async (jobs/s; worker CPU per job).

``--pinned`` adds both kinds again with the worker process on one CPU
(``taskset -c``, every thread of it; PostgreSQL still on any): the ratio
there is what a ``def`` handler costs beside an ``async def`` one without the
hand-offs between the loop's thread and a handler thread crossing CPUs.

    python bench/scenarios/sync.py --quick
    python bench/scenarios/sync.py --backend postgres --concurrency 10 --n 20000 --reps 3
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
import sqlite as sqlite_scenario
import throughput

BACKENDS = ["postgres", "sqlite"]
CONCURRENCY = [10, 50]
#: handler kind -> tether_app task
TASKS = {"async": "noop", "sync": "noop_sync"}
#: --pinned: the same kinds with the worker process on one CPU (every thread of it)
PINNED = {"async-1cpu": "noop", "sync-1cpu": "noop_sync"}
#: the last CPU this process may use
PIN_CPU = str(max(os.sched_getaffinity(0)))
FIGURES = ["rate", "rate_from_spawn", "worker_cpu_per_job_ms", "worker_cpu_total_per_job_ms"]


def run_kind(backend: str, kind: str, n: int, conc: int, tag: str) -> dict[str, Any]:
    task, cpus = (TASKS[kind], None) if kind in TASKS else (PINNED[kind], PIN_CPU)
    if backend == "postgres":
        return throughput.run_one(C.SYSTEMS["tether"], n, 1, conc, tag, task=task, cpus=cpus)
    return sqlite_scenario.run_one(n, 1, conc, tag, task=task, cpus=cpus)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, default_n=20000)
    p.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable (default: both)")
    p.add_argument("--concurrency", type=int, action="append", help="repeatable (default: 10 50)")
    p.add_argument("--pinned", action="store_true",
                   help="also run each kind with the worker process on one CPU (taskset): what the hand-off "
                        "between the loop's thread and the handler threads costs across CPUs")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n = args.n or (5000 if args.quick else 20000)
    C.available(["tether"]) or sys.exit("tether's bench venv is missing")
    backends, concs = args.backend or BACKENDS, args.concurrency or CONCURRENCY
    kinds = [*TASKS, *(PINNED if args.pinned else {})]
    results: dict[str, Any] = {"n": n, "backends": backends, "concurrency": concs, "configs": {}, "runs": [],
                               "pinned_cpu": PIN_CPU if args.pinned else None}
    for backend in backends:
        for conc in concs:
            key = f"{backend} c{conc}"
            runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
            ratios: dict[str, list[dict[str, float | None]]] = {"": [], "-1cpu": []}
            for rep in range(C.reps(args)):
                speed = C.speed_probe()
                this: dict[str, dict[str, Any]] = {}
                for kind in C.rotated(kinds, rep):
                    C.log(f"sync {key} {kind} handlers n={n} rep {rep + 1}")
                    try:
                        r = run_kind(backend, kind, n, conc, f"sync-{backend}-c{conc}-{kind}-r{rep}")
                        C.log(f"  {r['rate']:.0f} jobs/s ({r['rate_from_spawn']:.0f} from spawn), worker "
                              f"{r['worker_cpu_per_job_ms']:.4f} ms/job, done {r['done']}/{n}")
                    except Exception as exc:
                        C.log(f"  FAILED: {exc}")
                        r = {"ok": False, "error": str(exc)[:2000]}
                    r.update({"backend": backend, "concurrency": conc, "kind": kind, "rep": rep,
                              "speed_probe_ms": speed})
                    this[kind] = r
                    runs[kind].append(r)
                    results["runs"].append(r)
                for pin in ratios:
                    if all(this.get(k + pin, {}).get("ok") for k in TASKS):
                        ratios[pin].append({fig: ratio(this["sync" + pin].get(fig), this["async" + pin].get(fig))
                                            for fig in FIGURES})
            summary: dict[str, Any] = {}
            for kind, rs in runs.items():
                ok = [r for r in rs if r.get("ok")]
                summary[kind] = {"ok_reps": len(ok), "reps": len(rs),
                                 **{fig: C.median([r.get(fig) for r in ok]) for fig in FIGURES}}
            summary["sync_over_async"] = {fig: C.median([x[fig] for x in ratios[""]]) for fig in FIGURES}
            if args.pinned:
                summary["pinned_sync_over_async"] = {fig: C.median([x[fig] for x in ratios["-1cpu"]])
                                                     for fig in FIGURES}
            results["configs"][key] = summary
            ra = summary["sync_over_async"]["rate"]
            C.log(f"sync {key}: sync/async jobs/s {ra:.2f}" if ra else f"sync {key}: no ratio")
    C.drop_db(C.SYSTEMS["tether"].db)
    C.save_raw("sync", results)
    return results


if __name__ == "__main__":
    main()
