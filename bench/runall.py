"""Run every benchmark scenario (or some), then build the summary and the plots.

Called by ``bench/run``; options:

    --quick                 small N, one repetition
    --only NAME             run only this scenario (repeatable)
    --skip NAME             skip this scenario (repeatable)
    --systems a,b           systems for the side-by-side scenarios (default: all)
    --reps N                repetitions (median reported)
    --out DIR               results directory (default bench/results/<date>)
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "scenarios"))
import common as C
import report

SCENARIOS = ["throughput", "enqueue", "latency", "heartbeat", "history", "recovery", "sqlite", "ceiling"]
#: tether-only scenarios of issue 22 (sync handlers; many worker processes)
SCENARIOS += ["sync", "workers"]
#: scenarios whose --system takes the side-by-side systems
SIDE_BY_SIDE = {"throughput", "enqueue", "latency"}
#: issue 22 items 4-6: remote workers, NATS against NOTIFY, the huey anchor (tether only, in bench/run)
SCENARIOS += ["remote", "transports", "huey"]
#: issue 47: spawn to the first finished job, tether --help, tether jobs
SCENARIOS += ["startup"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", action="append", choices=SCENARIOS)
    p.add_argument("--skip", action="append", choices=SCENARIOS, default=[])
    p.add_argument("--systems", default=None, help="comma-separated, e.g. tether,pgqueuer")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    try:
        C.postmaster_pid()
    except Exception as exc:
        sys.exit(f"bench: PostgreSQL at {C.pg_url(C.ADMIN_DB)} is not usable ({exc}); see bench/README.md")
    C.set_out_dir(args.out, quick=args.quick)
    out = C.out_dir()
    systems = [s.strip() for s in args.systems.split(",")] if args.systems else None
    C.log(f"results in {out}")
    failed = []
    started = time.monotonic()
    for name in args.only or SCENARIOS:
        if name in args.skip:
            continue
        argv = ["--out", str(out)]
        if args.quick:
            argv.append("--quick")
        if args.reps:
            argv += ["--reps", str(args.reps)]
        if systems and name in SIDE_BY_SIDE:
            for s in systems:
                argv += ["--system", s]
        if name == "latency" and systems and "tether" in systems:
            argv += ["--system", "tether-sqlite"]
        if name == "sync" and not args.quick:
            argv.append("--pinned")  # where the def handler's extra cost goes: the hand-off across CPUs
        C.log(f"=== {name} {' '.join(argv)}")
        t0 = time.monotonic()
        try:
            importlib.import_module(name).main(argv)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            failed.append(name)
            C.log(f"scenario {name} failed: {exc!r}\n{traceback.format_exc()}")
        C.log(f"=== {name} took {time.monotonic() - t0:.0f} s")
    C.log(f"all scenarios took {time.monotonic() - started:.0f} s")
    C.drop_db(C.SENTINEL_DB)
    report.build(out)
    if failed:
        C.log(f"failed scenarios: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
