"""Scenario: transactions (issue 19), tether only, PostgreSQL.

1. Enqueue on the caller's connection against tether's own single enqueue, in
   the same client process, the modes in turn per round: one job per
   transaction, committed by the caller (``task.using(connection=conn)
   .enqueue(...)`` then ``conn.commit()``), against ``task.enqueue(...)``
   (autocommit on tether's pool); and each with an application row beside the
   job (the caller: one transaction for both; tether's own: the row on an
   autocommit connection, then the enqueue: two commits).
2. Fenced transactional completion against plain completion: a worker (in the
   client process, concurrency 10) runs n no-op ``async def`` jobs whose
   success the reporter writes (batched, carried by claims), or that
   ``async with ctx.transaction()`` writes in the handler's own transaction
   (an empty block, and a block that inserts one row). Each run on an emptied
   jobs table; jobs/s from the enqueue to the last success.

Short runs only (seconds each): a reading of the ratios, not a full benchmark.

    python bench/scenarios/transactions.py --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

DB = "bench_tether_tx"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p)
    p.add_argument("--n-enqueue", type=int, default=None, help="jobs per enqueue mode (default 4,000; --quick 1,000)")
    p.add_argument("--n-complete", type=int, default=None, help="jobs per completion run (default 5,000; --quick 2,000)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n_enqueue = args.n_enqueue or (1000 if args.quick else 4000)
    n_complete = args.n_complete or (2000 if args.quick else 5000)
    system = dataclasses.replace(C.SYSTEMS["tether"], db=DB)
    # The working tree this script lives in, whatever the venv's editable install points at.
    env = {"PYTHONPATH": f"{C.APPS}:{C.REPO / 'src'}"}
    C.recreate_db(DB)
    C.run_client(system, ["setup"], extra_env=env, log_to=C.scratch() / "logs" / "tx-setup.log")
    speed = C.speed_probe()
    C.log(f"transactions: enqueue, {n_enqueue} jobs per mode (speed probe {speed:.1f} ms)")
    enq = C.run_client(system, ["tx-enqueue", "--n", str(n_enqueue), "--rounds", "10"], extra_env=env,
                       log_to=C.scratch() / "logs" / "tx-enqueue.log")
    for mode, r in enq["modes"].items():
        C.log(f"  {mode:16s} {r['rate']:7.0f} jobs/s  client {r['client_cpu_per_job_ms']:.3f} ms/job")
    C.log(f"transactions: completion, {n_complete} jobs per run, {C.reps(args)} rep(s)")
    comp = C.run_client(system, ["tx-complete", "--n", str(n_complete), "--reps", str(C.reps(args))],
                        extra_env=env, log_to=C.scratch() / "logs" / "tx-complete.log")
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for r in comp["runs"]:
        by_mode.setdefault(r["mode"], []).append(r)
    completion = {mode: {"rate": C.median([r["rate"] for r in runs]),
                         "process_cpu_per_job_ms": C.median([r["process_cpu_per_job_ms"] for r in runs]),
                         "reps": len(runs)} for mode, runs in by_mode.items()}
    for mode, r in completion.items():
        C.log(f"  {mode:8s} {r['rate']:7.0f} jobs/s  process {r['process_cpu_per_job_ms']:.3f} ms/job")
    C.drop_db(DB)
    results = {"speed_probe_ms": speed, "enqueue": enq, "completion": completion, "completion_runs": comp["runs"]}
    C.save_raw("transactions", results)
    return results


if __name__ == "__main__":
    main()
