"""Oban's benchmark client: schema (``oban install``), enqueue (enqueue_many,
Worker.enqueue), latency producer. Oban is async-only: no sync enqueue."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from _benchkit import client_parser, dsn, emit, latency_loop
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
    await latency_loop(args, lambda i, t: w.enqueue({"i": i, "t": t}))
    await pool.close()


def main() -> None:
    p, _ = client_parser()
    a = p.parse_args()
    if a.cmd == "setup":
        setup(a)
    elif a.cmd == "enqueue":
        asyncio.run(_enqueue(a))
    else:
        asyncio.run(_latency(a))


if __name__ == "__main__":
    main()
