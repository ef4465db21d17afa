"""procrastinate's benchmark client: schema, enqueue (batch_defer_async, defer,
defer_async), latency producer."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time

from _benchkit import emit, wait_for_lines
from procrastinate_app import app


def setup(args: argparse.Namespace) -> None:
    with app.open():
        app.schema_manager.apply_schema()
    emit({"installed": True})


async def _async(args: argparse.Namespace, extra: dict) -> None:
    task = app.tasks[args.task]
    n, batch = args.n, args.batch
    async with app.open_async():
        cpu0, t0 = time.process_time(), time.perf_counter()
        if args.mode == "bulk":
            for start in range(0, n, batch):
                await task.batch_defer_async(*({"i": k, **extra} for k in range(start, min(n, start + batch))))
        else:
            for k in range(n):
                await task.defer_async(i=k, **extra)
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    emit({"mode": args.mode, "n": n, "batch": batch, "seconds": seconds, "cpu_s": cpu})


def enqueue(args: argparse.Namespace) -> None:
    extra = json.loads(args.args)
    if args.mode != "sync":
        asyncio.run(_async(args, extra))
        return
    task = app.tasks[args.task]
    with app.open():
        cpu0, t0 = time.process_time(), time.perf_counter()
        for k in range(args.n):
            task.defer(i=k, **extra)
        seconds = time.perf_counter() - t0
        emit({"mode": "sync", "n": args.n, "seconds": seconds, "cpu_s": time.process_time() - cpu0})


async def _latency(args: argparse.Namespace) -> None:
    task = app.tasks["latency"]
    path = os.environ["BENCH_RECORD"]
    async with app.open_async():
        await task.defer_async(i=-1, t=time.time())
        wait_for_lines(path, 1, 30)
        sent = []
        for i in range(args.samples):
            time.sleep(args.gap * (0.5 + random.random()))
            t_before = time.time()
            await task.defer_async(i=i, t=t_before)
            t_after = time.time()
            sent.append((i, t_before, t_after))
            if not wait_for_lines(path, i + 2, args.timeout):
                break
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
        enqueue(a)
    else:
        asyncio.run(_latency(a))


if __name__ == "__main__":
    main()
