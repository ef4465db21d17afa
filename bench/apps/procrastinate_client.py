"""procrastinate's benchmark client: schema, enqueue (batch_defer_async, defer,
defer_async), latency producer."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from _benchkit import client_parser, emit, latency_loop
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
    async with app.open_async():
        await latency_loop(args, lambda i, t: task.defer_async(i=i, t=t))


def main() -> None:
    p, _ = client_parser()
    a = p.parse_args()
    if a.cmd == "setup":
        setup(a)
    elif a.cmd == "enqueue":
        enqueue(a)
    else:
        asyncio.run(_latency(a))


if __name__ == "__main__":
    main()
