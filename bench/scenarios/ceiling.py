"""Scenario 8: the raw-SQL ceiling: pgbench running tether's own claim and complete.

The statements are taken from tether's ``queries.sql`` as its PostgreSQL store
loads them (macros filled), the variants a worker sends (``claim_known``,
``complete_and_claim_known``: by the tasks it has handlers for), with the
parameters bound to pgbench variables, and run by pgbench in prepared mode
with the session settings of the store's round connections (``PGOPTIONS``:
generic plans, no JIT):

    claim K jobs   (tether's claim; the ids and the attempts by id \\gset into variables)
    complete them  (tether's fenced batch complete: a success writes its job row only)

two autocommit statements per transaction, as a worker whose claims take more
than 128 jobs sends them (the complete beside the next claim); and the script a
worker with smaller claims runs ("carry"):

    complete_and_claim  (the previous transaction's K jobs completed and the
                         next K claimed, one statement; the last K stay running)

with no Python in the loop. Jobs are pre-filled with one INSERT ... SELECT
generate_series (the backlog starts at the run's job count and drains to
zero; a claim whose plan sorts the due backlog gets slower with its size).
Reported: jobs/s (tps x K, checked against the succeeded count), PostgreSQL
CPU, commits and WAL per job. K = 1, 10 and 100 (20,000, 50,000 and 100,000
jobs), 8 clients.

    python bench/scenarios/ceiling.py --quick
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

DB = "bench_tether_ceiling"
BATCHES = [1, 10, 100]
#: the tasks a worker's claims name: the prefilled jobs' one task
TASKS = "ARRAY['noop']"
#: the session settings of the store's round connections (store/postgres/connect.py)
ROUND_OPTIONS = "-c plan_cache_mode=force_generic_plan -c jit=off"
PREFILL = """
INSERT INTO tether.jobs (queue, task, args, run_at, max_attempts, created_at)
SELECT 'default', 'noop', jsonb_build_object('i', g), now(), 3, now()
FROM generate_series(1, %(n)s::bigint) AS g
"""


def pgbench_script(claim: str, complete: str, k: int) -> str:
    common = {"worker": "'pgbench'", "now": "NULL", "lease_ttl": "30.0"}
    # (a claim alone carries no finished jobs: its done is NULL, as the store sends it)
    claim_sql = _bind(claim, {**common, "queues": "ARRAY['default']", "limit": str(k), "done": "NULL",
                              "tasks": TASKS})
    complete_sql = _bind(complete, {**common, "ids": ":ids", "done": ":done"})
    # The claim's own WITH writes (its UPDATE), so it cannot be nested in
    # another: its answer (every claimed row) is swapped for the one row \\gset needs.
    head, sep, _ = claim_sql.rpartition("SELECT * FROM claimed")
    if not sep:
        raise ValueError("the claim no longer ends with its 'SELECT * FROM claimed' answer")
    return (
        f"{_one_line(head + f'SELECT {CARRIED} FROM claimed')}\n"
        "\\gset\n"
        f"{_one_line(complete_sql)};\n"
    )


#: what a claim hands its complete: the ids, and the {"<id>": [attempt]}
#: object the fenced complete reads (no results: the jobs are no-ops)
CARRIED = ("coalesce(array_agg(id), '{}') AS ids, "
           "coalesce(jsonb_object_agg(id::text, jsonb_build_array(attempt)), '{}')::text AS done")


def carry_script(complete_and_claim: str, k: int) -> str:
    """complete_and_claim with the previous transaction's claim carried in
    :ids/:done (pgbench -D starts them empty). Its answer is one row per job, and
    \\gset needs one row, so the final SELECT is swapped for one that aggregates
    the claimed ids and, as the store's does, reads the finished jobs (``done``)
    and the waiters' announcement (``woken``, a plain SELECT that runs only
    when read)."""
    common = {"worker": "'pgbench'", "now": "NULL", "lease_ttl": "30.0", "queues": "ARRAY['default']",
              "limit": str(k), "ids": ":ids", "done": ":done", "tasks": TASKS}
    body = _bind(complete_and_claim, common)
    head, sep, _ = body.rpartition("SELECT 0 AS kind")
    if not sep:
        raise ValueError("complete_and_claim no longer ends with its 'SELECT 0 AS kind' answer")
    tail = f"SELECT {CARRIED}, (SELECT count(*) FROM done) AS n, (SELECT count(*) FROM woken) AS w FROM claimed"
    return f"{_one_line(head + tail)}\n\\gset\n"


def _bind(sql: str, values: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            raise KeyError(f"no pgbench value for %({name})s")
        return values[name]
    return re.sub(r"%\((\w+)\)s", sub, sql)


def _one_line(sql: str) -> str:
    """One line for pgbench, without the /* tether:NAME */ tag (pgbench would
    take its :NAME for a variable)."""
    sql = re.sub(r"/\*.*?\*/", "", sql, flags=re.DOTALL)
    return " ".join(line.split("--")[0].strip() for line in sql.splitlines() if line.strip())


def run_one(system: C.System, sql: dict[str, str], k: int, clients: int, tx: int, *, carry: bool = False,
            ) -> dict[str, Any]:
    C.recreate_db(DB)
    C.run_client(system, ["setup"])
    jobs = clients * tx * k
    with C.connect(DB) as c:
        c.execute(PREFILL, {"n": jobs})
    C.settle_db(DB)
    name = f"ceiling-{'carry-' if carry else ''}k{k}"
    script = C.scratch() / f"{name}.sql"
    script.write_text(carry_script(sql["complete_and_claim_known"], k) if carry
                      else pgbench_script(sql["claim_known"], sql["complete"], k))
    argv = [str(C.PGBIN / "pgbench"), "-h", C.PG_HOST, "-p", str(C.PG_PORT), "-U", C.PG_USER, "-n",
            "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(tx), "-f", str(script),
            *(["-D", "ids={}", "-D", "done={}"] if carry else []), DB]
    with C.connect() as admin:
        s0 = C.snapshot(DB, admin)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=3600,
                           env={**os.environ, "PGOPTIONS": ROUND_OPTIONS})
        C.wait_no_backends(DB)
        s1 = C.snapshot(DB, admin)
    (C.scratch() / "logs").mkdir(parents=True, exist_ok=True)
    (C.scratch() / "logs" / f"{name}.log").write_text(f"$ {' '.join(argv)}\n{p.stdout}\n{p.stderr}")
    if p.returncode != 0:
        raise RuntimeError(f"pgbench failed: {p.stderr[-2000:]}")
    m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", p.stdout)
    if not m:
        raise RuntimeError(f"no tps in pgbench output:\n{p.stdout[-2000:]}")
    tps = float(m.group(1))
    with C.connect(DB) as c:
        done, running, queued = c.execute(  # type: ignore[misc]
            "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'running'), "
            "count(*) FILTER (WHERE state = 'queued') FROM tether.jobs").fetchone()
    done, running, queued = int(done), int(running), int(queued)
    # carry: each client's last claim stays running (at most K jobs each), and a
    # claim that met rows other clients had locked took fewer than K, leaving
    # some queued; every job is in one of the three states
    ok = done + running + queued == jobs and running <= clients * k if carry else done == jobs
    return {
        "batch": k, "mode": "carry" if carry else "claim-then-complete", "clients": clients,
        "transactions": clients * tx, "jobs": jobs, "done": done, "ok": ok,
        "tps": tps, "rate": done * tps / (clients * tx),
        "pg_cpu_per_job_ms": 1000 * (s1.pg_cpu - s0.pg_cpu) / max(done, 1),
        "commits_per_job": (s1.commits - s0.commits) / max(done, 1),
        "wal_bytes_per_job": C.wal_bytes(s0, s1) / max(done, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p)
    p.add_argument("--batch", type=int, action="append", help="jobs per claim (repeatable; default 1 10 100)")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--jobs", type=int, default=None,
                   help="jobs per run for K=1 (default 20,000; --quick 4,000); K=10 x2.5 and K=100 x5 that")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    C.available(["tether"]) or sys.exit("tether's bench venv is missing")
    base = C.SYSTEMS["tether"]
    system = C.System(base.name, base.venv, DB, base.worker_argv, base.pending_sql, base.done_sql, env=base.env)
    C.recreate_db(DB)
    sql = C.run_client(system, ["dump-sql", "claim_known", "complete", "complete_and_claim_known"])
    base_jobs = args.jobs or (4000 if args.quick else 20000)
    results: dict[str, Any] = {"clients": args.clients, "statements": sql, "by_batch": {}, "runs": []}
    for k, carry in [(k, carry) for k in args.batch or BATCHES for carry in (False, True)]:
        scale = {1: 1, 10: 2.5}.get(k, 5)
        tx = max(2, int(base_jobs * scale) // (k * args.clients))
        runs = []
        key = f"carry-{k}" if carry else str(k)
        for rep in range(C.reps(args)):
            what = f"complete-and-claim-{k}" if carry else f"claim-{k}-then-complete"
            C.log(f"ceiling: pgbench {what}, {args.clients} clients x {tx} transactions, rep {rep + 1}")
            try:
                r = run_one(system, sql, k, args.clients, tx, carry=carry)
                C.log(f"  {r['rate']:.0f} jobs/s ({r['tps']:.0f} tps), pg {r['pg_cpu_per_job_ms']:.3f} ms/job, "
                      f"{r['commits_per_job']:.3f} commits/job, {r['wal_bytes_per_job']:.0f} WAL B/job")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"batch": k, "mode": "carry" if carry else "claim-then-complete", "ok": False,
                     "error": str(exc)[:2000]}
            r["rep"] = rep
            runs.append(r)
            results["runs"].append(r)
        ok = [r for r in runs if r.get("ok")]
        results["by_batch"][key] = {
            "ok_reps": len(ok),
            **{key: C.median([r[key] for r in ok]) for key in
               ("rate", "tps", "pg_cpu_per_job_ms", "commits_per_job", "wal_bytes_per_job")},
        }
    C.drop_db(DB)
    C.save_raw("ceiling", results)
    return results


if __name__ == "__main__":
    main()
