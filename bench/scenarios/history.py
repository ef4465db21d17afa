"""Scenario 5: reaper and claim cost as finished history grows (tether).

Finished rows are generated straight into tether's schema (one
``INSERT ... SELECT generate_series`` for jobs, one for their attempt rows;
98% succeeded, 1% dead, 1% cancelled), grown step by step to 10 k, 100 k, 1 M
and 10 M rows (``--quick``: 10 k and 100 k), with VACUUM ANALYZE after each
step. At each size tether's own store (the internal seam its tests use) times,
on a fresh backlog of queued jobs:

- claim (10 jobs per call) and the fenced batch complete that follows;
- an idle reap (nothing lapsed: the common tick);
- a reap of 100 lapsed leases (the database clock moved past their TTL);

and EXPLAIN (ANALYZE, BUFFERS) of the claim and reap statements is saved in
``plans/``, with a check that they walk the partial indexes (``jobs_claim_idx``,
``jobs_reap_idx``) rather than the history.

    python bench/scenarios/history.py --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

SIZES = [10_000, 100_000, 1_000_000, 10_000_000]
QUICK_SIZES = [10_000, 100_000]
DB = "bench_tether_history"

GROW_JOBS = """
INSERT INTO tether.jobs (queue, task, args, state, priority, run_at, attempt, max_attempts,
                         claimed_at, created_at, finished_at, last_error)
SELECT 'default', 'noop', jsonb_build_object('i', g),
       CASE WHEN g %% 100 = 0 THEN 'dead' WHEN g %% 100 = 1 THEN 'cancelled' ELSE 'succeeded' END,
       0, ts, 1, 3, ts, ts, ts + interval '5 ms',
       CASE WHEN g %% 100 = 0 THEN 'ValueError: boom' END
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g,
     LATERAL (SELECT now() - interval '30 days' + g * interval '10 ms' AS ts) AS t
"""
GROW_ATTEMPTS = """
INSERT INTO tether.attempts (job_id, attempt, worker, claimed_at, finished_at, outcome, error)
SELECT id, 1, 'history', claimed_at, finished_at,
       CASE state WHEN 'succeeded' THEN 'succeeded' WHEN 'dead' THEN 'failed' ELSE 'cancelled' END,
       last_error
FROM tether.jobs WHERE id > %(after)s AND state IN ('succeeded', 'dead', 'cancelled')
"""


def grow(to_rows: int, have: int) -> tuple[int, float]:
    t0 = time.monotonic()
    with C.connect(DB) as c:
        (max_id,) = c.execute("SELECT coalesce(max(id), 0) FROM tether.jobs").fetchone()  # type: ignore[misc]
        c.execute(GROW_JOBS, {"lo": have + 1, "hi": to_rows})
        c.execute(GROW_ATTEMPTS, {"after": max_id})
        c.execute("VACUUM (ANALYZE) tether.jobs")
        c.execute("VACUUM (ANALYZE) tether.attempts")
    return to_rows, time.monotonic() - t0


def uses(plan: str, index: str) -> bool:
    return index in plan


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p)
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="history sizes (rows)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    system = C.SYSTEMS["tether"]
    system = C.System(system.name, system.venv, DB, system.worker_argv, system.pending_sql, system.done_sql,
                      env=system.env)
    C.available(["tether"]) or sys.exit("tether's bench venv is missing")
    C.recreate_db(DB)
    C.run_client(system, ["setup"])
    plans = C.out_dir() / "plans"
    plans.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"sizes": sizes, "claim_batch": 10, "expired_per_reap": 100, "by_size": {}}
    have = 0
    for size in sizes:
        C.log(f"history: growing to {size:,} finished rows")
        have, secs = grow(size, have)
        with C.connect(DB) as c:
            (rel_bytes,) = c.execute("SELECT pg_total_relation_size('tether.jobs')").fetchone()  # type: ignore[misc]
        r = C.run_client(system, ["probe"], log_to=C.scratch() / "logs" / f"history-{size}.log")
        with C.connect(DB) as c:  # the probe's leftovers must not count as history
            c.execute("DELETE FROM tether.jobs WHERE state IN ('queued', 'running')")
        for name in ("claim_plan", "reap_idle_plan", "reap_plan"):
            (plans / f"{name.removesuffix('_plan')}-{size}.txt").write_text(r[name] + "\n")
        entry = {
            "rows": size, "generate_s": secs, "jobs_table_mb": rel_bytes / 2**20,
            "claim_ms_p50": C.percentile(r["claim_ms"], 50), "claim_ms_p99": C.percentile(r["claim_ms"], 99),
            "complete_ms_p50": C.percentile(r["complete_ms"], 50),
            "reap_idle_ms_p50": C.percentile(r["reap_idle_ms"], 50),
            "reap_idle_ms_p99": C.percentile(r["reap_idle_ms"], 99),
            "reap_100_ms_p50": C.percentile(r["reap_ms"], 50), "reaped": r["reaped"],
            "claim_explain_ms": r["claim_explain_ms"], "reap_idle_explain_ms": r["reap_idle_explain_ms"],
            "reap_explain_ms": r["reap_explain_ms"],
            "claim_uses_partial_index": uses(r["claim_plan"], "jobs_claim_idx"),
            "reap_uses_partial_index": uses(r["reap_idle_plan"], "jobs_reap_idx")
            and uses(r["reap_plan"], "jobs_reap_idx"),
        }
        results["by_size"][str(size)] = entry
        C.log(f"  claim p50 {entry['claim_ms_p50']:.2f} ms (server {entry['claim_explain_ms']:.2f}), "
              f"idle reap p50 {entry['reap_idle_ms_p50']:.2f} ms, reap of 100 {entry['reap_100_ms_p50']:.2f} ms, "
              f"partial indexes: claim {entry['claim_uses_partial_index']}, reap {entry['reap_uses_partial_index']}")
    C.drop_db(DB)
    C.save_raw("history", results)
    return results


if __name__ == "__main__":
    main()
