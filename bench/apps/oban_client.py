"""Oban's benchmark client: schema (``oban install``), enqueue (enqueue_many,
Worker.enqueue), latency producer. Oban is async-only: no sync enqueue."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time

from _benchkit import dsn, emit, wait_for_lines
from oban import Oban
from oban_app import WORKERS


def setup(args: argparse.Namespace) -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "oban")
    out = subprocess.run([exe, "install", "--dsn", dsn()], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"oban install failed: {out.stdout}\n{out.stderr}")
    emit({"installed": True})


async def _client() -> tuple[Oban, object]:
    pool = await Oban.create_pool(dsn())
    return Oban(pool=pool), pool


async def _enqueue(args: argparse.Namespace) -> None:
    extra = json.loads(args.args)
    oban, pool = await _client()
    w = WORKERS[args.task]
    n, batch = args.n, args.batch
    cpu0, t0 = time.process_time(), time.perf_counter()
    if args.mode == "bulk":
        for start in range(0, n, batch):
            await oban.enqueue_many([w.new({"i": k, **extra}) for k in range(start, min(n, start + batch))])
    elif args.mode == "async":
        for k in range(n):
            await w.enqueue({"i": k, **extra})
    else:
        raise SystemExit("oban has no synchronous enqueue")
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    await pool.close()
    emit({"mode": args.mode, "n": n, "batch": batch, "seconds": seconds, "cpu_s": cpu})


async def _latency(args: argparse.Namespace) -> None:
    _, pool = await _client()
    w = WORKERS["latency"]
    path = os.environ["BENCH_RECORD"]
    await w.enqueue({"i": -1, "t": time.time()})
    wait_for_lines(path, 1, 30)
    sent = []
    for i in range(args.samples):
        time.sleep(args.gap * (0.5 + random.random()))
        t_before = time.time()
        await w.enqueue({"i": i, "t": t_before})
        t_after = time.time()
        sent.append((i, t_before, t_after))
        if not wait_for_lines(path, i + 2, args.timeout):
            break
    await pool.close()
    emit({"sent": sent})


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup")
    e = sub.add_parser("enqueue")
    e.add_argument("--mode", choices=["bulk", "sync", "async"], required=True)
    e.add_argument("--n", type=int, required=True)
    e.add_argument("--batch", type=int, default=1000)
    e.add_argument("--task", default="noop")
    e.add_argument("--args", default="{}")
    la = sub.add_parser("latency")
    la.add_argument("--samples", type=int, default=100)
    la.add_argument("--gap", type=float, default=0.1)
    la.add_argument("--timeout", type=float, default=15.0)
    a = p.parse_args()
    if a.cmd == "setup":
        setup(a)
    elif a.cmd == "enqueue":
        asyncio.run(_enqueue(a))
    else:
        asyncio.run(_latency(a))


if __name__ == "__main__":
    main()
