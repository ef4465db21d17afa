"""Scenario 3: idle-queue latency, enqueue -> handler start, p50/p99.

One worker (concurrency 10) waits on an empty queue; the system's client
enqueues one job at a time (single async or sync call), sleeping a random
0.5-1.5 x ``--gap`` between jobs and waiting for the handler of the previous
job first, so the queue is idle every time. The handler appends the wall-clock
time it started to a file; latency is handler start minus the moment the
enqueue call began (``from_call``; ``from_commit`` counts from its return).
tether runs twice: on PostgreSQL (LISTEN/NOTIFY) and on SQLite (polling,
0.2 s by default).

    python bench/scenarios/latency.py --system tether --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

VARIANTS = [*C.ALL_SYSTEMS, "tether-sqlite"]


def system_for(variant: str) -> C.System:
    if variant == "tether-sqlite":
        return C.tether_sqlite(C.scratch() / "latency.db")
    return C.SYSTEMS[variant]


def run_one(variant: str, samples: int, gap: float, *, env: dict[str, str] | None = None,
            label: str | None = None) -> dict[str, Any]:
    """``env`` reaches the worker and the client (e.g. TETHER_TRANSPORT); ``label``
    names the run's files when one variant runs several ways."""
    system = system_for(variant)
    label = label or variant
    if system.is_postgres:
        C.recreate_db(system.db)
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(system.dsn.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
    setup_args = ["setup"] + (["--concurrency", "10"] if system.setup_takes_concurrency else [])
    C.run_client(system, setup_args, log_to=C.scratch() / "logs" / f"lat-{variant}-setup.log")
    record = C.scratch() / f"latency-{label}.txt"
    record.unlink(missing_ok=True)
    env = {**(env or {}), "BENCH_RECORD": str(record)}
    w = C.spawn_workers(system, 1, 10, extra_env=env, tag=f"-lat-{label}")
    try:
        time.sleep(1.0)  # let the worker start listening
        r = C.run_client(system, ["latency", "--samples", str(samples), "--gap", str(gap)], extra_env=env,
                         log_to=C.scratch() / "logs" / f"lat-{label}.log", timeout=samples * 20 + 120)
    finally:
        w.stop()
    handled: dict[int, float] = {}
    for line in record.read_text().splitlines():
        i, t = line.split()[:2]
        handled[int(i)] = float(t)
    from_call, from_commit = [], []
    for i, t_before, t_after in r["sent"]:
        if i in handled:
            from_call.append(1000 * (handled[i] - t_before))
            from_commit.append(1000 * (handled[i] - t_after))
    out: dict[str, Any] = {"system": label, "samples": len(from_call), "sent": len(r["sent"]),
                           "ok": len(from_call) == samples}
    for name, xs in (("from_call", from_call), ("from_commit", from_commit)):
        out[name] = {f"p{p}": C.percentile(xs, p) for p in (50, 90, 99)}
        out[name]["max"] = max(xs) if xs else None
        out[name]["mean"] = sum(xs) / len(xs) if xs else None
    out["raw_ms_from_call"] = [round(x, 3) for x in from_call]
    if system.is_postgres:
        C.drop_db(system.db)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, systems=VARIANTS)
    p.add_argument("--samples", type=int, default=None, help="jobs per system (default 500; --quick 50)")
    p.add_argument("--gap", type=float, default=0.1, help="mean idle seconds between jobs (default 0.1)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    samples = args.samples or (50 if args.quick else 500)
    variants = args.system or VARIANTS
    variants = [v for v in variants if v == "tether-sqlite" or v in C.available([v])]
    results: dict[str, Any] = {"samples": samples, "gap_s": args.gap, "systems": {}}
    for v in variants:
        C.log(f"latency {v}: {samples} samples")
        try:
            r = run_one(v, samples, args.gap)
            C.log(f"  p50 {r['from_call']['p50']:.2f} ms, p99 {r['from_call']['p99']:.2f} ms "
                  f"({r['samples']}/{samples} samples)")
        except Exception as exc:
            C.log(f"  FAILED: {exc}")
            r = {"system": v, "ok": False, "error": str(exc)[:2000]}
        results["systems"][v] = r
    C.save_raw("latency", results)
    return results


if __name__ == "__main__":
    main()
