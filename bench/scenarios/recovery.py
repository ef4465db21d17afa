"""Scenario 6: recovery time after SIGKILL, over many kills (tether on PostgreSQL).

``lease`` mode: two workers run; a job is enqueued whose first attempt records
itself and hangs; the driver SIGKILLs the worker holding it and measures until
the job's second attempt starts on the survivor. The dead worker is restarted
only after that (so the restart's own reconciliation never shortcuts the lease
path). Reported: kill -> reaped (the attempt row's ``finished_at``, database
clock: when the job became claimable again) and kill -> handler restarted, as
distributions, against the bound ``lease_ttl + reaper_interval``.

``restart`` mode: one worker; SIGKILL it and start a new one at once on the
same host: start-up reconciliation should recover the job immediately.

Timers default to lease 4 s, heartbeat 1 s, reaper 2 s (bound 6 s) so that many
kills fit in minutes; ``--lease/--heartbeat/--reaper`` change them.

    python bench/scenarios/recovery.py --quick
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

DB = "bench_tether_recovery"


def read_records(path: Path) -> list[tuple[int, int, int, float, int]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            i, attempt, pid, t, job_id = line.split()
            out.append((int(i), int(attempt), int(pid), float(t), int(job_id)))
    return out


def wait_record(path: Path, i: int, min_attempt: int, timeout: float) -> tuple[int, int, int, float, int] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in read_records(path):
            if rec[0] == i and rec[1] >= min_attempt:
                return rec
        time.sleep(0.005)
    return None


def run(mode: str, kills: int, lease: float, hb: float, reaper: float) -> dict[str, Any]:
    base = C.SYSTEMS["tether"]
    system = C.System(base.name, base.venv, DB, base.worker_argv, base.pending_sql, base.done_sql, env=base.env)
    C.recreate_db(DB)
    C.run_client(system, ["setup"])
    record = C.scratch() / f"recovery-{mode}.txt"
    record.unlink(missing_ok=True)
    env = {"BENCH_RECORD": str(record), "BENCH_LEASE_TTL": str(lease), "BENCH_HEARTBEAT": str(hb),
           "BENCH_REAPER": str(reaper)}
    nworkers = 2 if mode == "lease" else 1
    workers = {k: C.spawn_workers(system, 1, 2, extra_env=env, tag=f"-rec-{mode}-{k}") for k in range(nworkers)}
    bound = lease + reaper
    samples: list[dict[str, Any]] = []
    try:
        time.sleep(1.5)
        for i in range(kills):
            _enqueue_crashy(system, i, env)
            first = wait_record(record, i, 1, 30)
            if first is None:
                raise RuntimeError(f"kill {i}: the job never started")
            victim = next((k for k, w in workers.items() if first[2] in w.pids), None)
            if victim is None:
                raise RuntimeError(f"kill {i}: pid {first[2]} is none of our workers")
            time.sleep(0.2 + (i % 10) * lease / 10)  # kill at varied points of the heartbeat cycle
            t_kill = time.time()
            workers[victim].stop(signal.SIGKILL)
            if mode == "restart":
                workers[victim] = C.spawn_workers(system, 1, 2, extra_env=env, tag=f"-rec-{mode}-{victim}")
            again = wait_record(record, i, 2, bound + 30)
            s: dict[str, Any] = {"i": i, "ok": again is not None}
            if again is not None:
                s["restart_s"] = again[3] - t_kill
                with C.connect(DB) as c:
                    row = c.execute(
                        "SELECT extract(epoch FROM finished_at)::float8, outcome FROM tether.attempts "
                        "WHERE job_id = %s AND attempt = 1", (first[4],)).fetchone()
                if row:
                    s["reaped_s"], s["outcome"] = row[0] - t_kill, row[1]
            samples.append(s)
            C.log(f"  kill {i + 1}/{kills}: reaped after {s.get('reaped_s', float('nan')):.2f} s, "
                  f"handler restarted after {s.get('restart_s', float('nan')):.2f} s")
            if mode == "lease":
                workers[victim] = C.spawn_workers(system, 1, 2, extra_env=env, tag=f"-rec-{mode}-{victim}")
                time.sleep(1.0)
    finally:
        for w in workers.values():
            w.stop(signal.SIGKILL)
        C.drop_db(DB)
    out: dict[str, Any] = {"mode": mode, "kills": kills, "lease_ttl_s": lease, "heartbeat_s": hb,
                           "reaper_s": reaper, "bound_s": bound, "samples": samples}
    for key in ("reaped_s", "restart_s"):
        xs = [s[key] for s in samples if key in s]
        out[key] = {"p50": C.percentile(xs, 50), "p90": C.percentile(xs, 90), "p99": C.percentile(xs, 99),
                    "max": max(xs) if xs else None, "n": len(xs)}
    p99 = out["restart_s"]["p99"]
    out["within_bound_plus_1s"] = p99 is not None and p99 <= bound + 1.0
    out["ok"] = all(s["ok"] for s in samples) and len(samples) == kills
    return out


def _enqueue_crashy(system: C.System, i: int, env: dict[str, str]) -> None:
    C.run_client(system, ["enqueue", "--mode", "sync", "--n", "1", "--task", "crashy",
                          "--args", '{"hold": 3600}', "--start", str(i)], extra_env=env)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p)
    p.add_argument("--kills", type=int, default=None, help="kills per mode (default 50; --quick 5)")
    p.add_argument("--mode", action="append", choices=["lease", "restart"], help="default: both")
    p.add_argument("--lease", type=float, default=4.0)
    p.add_argument("--heartbeat", type=float, default=1.0)
    p.add_argument("--reaper", type=float, default=2.0)
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    kills = args.kills or (5 if args.quick else 50)
    results: dict[str, Any] = {"modes": {}}
    for mode in args.mode or ["lease", "restart"]:
        C.log(f"recovery ({mode}): {kills} kills, lease {args.lease}s, heartbeat {args.heartbeat}s, "
              f"reaper {args.reaper}s")
        try:
            r = run(mode, kills, args.lease, args.heartbeat, args.reaper)
            C.log(f"  restart p50 {r['restart_s']['p50']:.2f} s, p99 {r['restart_s']['p99']:.2f} s, "
                  f"max {r['restart_s']['max']:.2f} s (bound {r['bound_s']:.1f} s); "
                  f"reaped p99 {r['reaped_s']['p99'] if r['reaped_s']['p99'] is not None else float('nan'):.2f} s")
        except Exception as exc:
            C.log(f"  FAILED: {exc}")
            r = {"mode": mode, "ok": False, "error": str(exc)[:2000]}
        results["modes"][mode] = r
    C.save_raw("recovery", results)
    return results


if __name__ == "__main__":
    main()
