"""Scenario 9: tether's transports side by side: NATS JetStream, NOTIFY, polling.

The same tether, the same app, only ``TETHER_TRANSPORT`` changes:

- ``notify``: PostgreSQL LISTEN/NOTIFY wakes idle workers (the default);
- ``poll``: workers poll the database (2 s on PostgreSQL, 0.2 s on SQLite);
- ``nats``: enqueue publishes each job id to NATS JetStream after the commit;
  workers claim exactly the delivered jobs (``claim_ids``) and ack afterwards.

Two figures per transport, measured by the existing scenarios' code:

- idle-queue latency, enqueue call -> handler start, p50/p99 (``latency.py``);
  on PostgreSQL and on SQLite (where NOTIFY does not exist);
- throughput of N pre-enqueued no-op jobs, one worker at concurrency 10
  (``throughput.py``), PostgreSQL only. With NATS the worker's first round
  still claims from the database (its start-up backstop), then takes the rest
  by message.

Needs a NATS server with JetStream (``BENCH_NATS_URL``, default
nats://127.0.0.1:4222); each run uses a stream of its own, deleted afterwards.

    python bench/scenarios/transports.py --quick
    python bench/scenarios/transports.py --samples 300 --n 5000
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
import latency
import throughput

NATS_URL = os.environ.get("BENCH_NATS_URL", "nats://127.0.0.1:4222")
TRANSPORTS = ["nats", "notify", "poll"]


def transport_env(kind: str, prefix: str) -> dict[str, str]:
    if kind == "nats":
        return {"TETHER_TRANSPORT": f"{NATS_URL}?prefix={prefix}"}
    return {"TETHER_TRANSPORT": kind}


def drop_stream(prefix: str) -> None:
    """Delete a run's stream, from tether's own venv (it has nats-py)."""
    code = ("import sys; from tether.transport.nats import NatsTransport as T; "
            "t = T(sys.argv[1], prefix=sys.argv[2]); t.destroy(); t.close()")
    subprocess.run([C.SYSTEMS["tether"].python, "-c", code, NATS_URL, prefix], capture_output=True, timeout=30)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, default_n=5000)
    p.add_argument("--samples", type=int, default=None, help="latency samples per run (default 300; --quick 40)")
    p.add_argument("--gap", type=float, default=0.1, help="mean idle seconds between latency samples")
    p.add_argument("--transport", action="append", choices=TRANSPORTS, help="default: all")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n = args.n or (1000 if args.quick else 5000)
    samples = args.samples or (40 if args.quick else 300)
    kinds = args.transport or TRANSPORTS
    results: dict[str, Any] = {"n": n, "samples": samples, "nats": NATS_URL, "latency": {}, "throughput": {}}
    for kind in kinds:
        for variant in ("tether", "tether-sqlite"):
            if variant == "tether-sqlite" and kind == "notify":
                continue  # SQLite has no NOTIFY
            label = f"{variant}-{kind}"
            prefix = f"bench_{secrets.token_hex(4)}"
            C.log(f"latency {label}: {samples} samples")
            try:
                r = latency.run_one(variant, samples, args.gap, env=transport_env(kind, prefix), label=label)
                C.log(f"  p50 {r['from_call']['p50']:.2f} ms, p99 {r['from_call']['p99']:.2f} ms "
                      f"({r['samples']}/{samples})")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"system": label, "ok": False, "error": str(exc)[:2000]}
            finally:
                drop_stream(prefix)
            r.pop("raw_ms_from_call", None)
            results["latency"][label] = r
        label = f"tether-{kind}"
        runs = []
        for rep in range(C.reps(args)):
            prefix = f"bench_{secrets.token_hex(4)}"
            C.log(f"throughput {label}: {n} jobs, 1 worker x 10 (rep {rep + 1})")
            try:
                r = throughput.run_one(C.SYSTEMS["tether"], n, 1, 10, f"tr-{label}-{rep}",
                                       env=transport_env(kind, prefix))
                C.log(f"  {r['rate']:.0f} jobs/s")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"ok": False, "error": str(exc)[:2000]}
            finally:
                drop_stream(prefix)
            runs.append(r)
        results["throughput"][label] = {"summary": throughput.summarize(runs), "runs": runs}
    C.save_raw("transports", results)
    return results


if __name__ == "__main__":
    main()
