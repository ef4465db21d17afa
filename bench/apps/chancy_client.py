"""Chancy's benchmark client: migrate and declare the queue, enqueue (push_many,
push, sync_push), latency producer."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time

from _benchkit import emit, wait_for_lines
from chancy import Chancy, Queue
from chancy_app import JOBS, chancy


async def _setup(args: argparse.Namespace) -> None:
    async with chancy:
        await chancy.migrate()
        # A backlog is continuously available in these scenarios: eager polling
        # (fetch again as soon as a job finishes) is what Chancy's Queue docs
        # suggest for that case; otherwise a worker waits polling_interval
        # between fetches. NOTIFY still wakes idle workers on push.
        await chancy.declare(
            Queue("default", concurrency=args.concurrency, executor=Chancy.Executor.Async,
                  polling_interval=1, eager_polling=True),
            upsert=True,
        )
    emit({"installed": True, "concurrency": args.concurrency})


async def _enqueue(args: argparse.Namespace) -> None:
    extra = json.loads(args.args)
    j = JOBS[args.task].job
    n, batch = args.n, args.batch
    async with chancy:
        cpu0, t0 = time.process_time(), time.perf_counter()
        if args.mode == "bulk":
            async for _ in chancy.push_many([j.with_kwargs(i=k, **extra) for k in range(n)], batch_size=batch):
                pass
        else:
            for k in range(n):
                await chancy.push(j.with_kwargs(i=k, **extra))
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    emit({"mode": args.mode, "n": n, "batch": batch, "seconds": seconds, "cpu_s": cpu})


def _sync_enqueue(args: argparse.Namespace) -> None:
    extra = json.loads(args.args)
    j = JOBS[args.task].job
    with chancy:
        cpu0, t0 = time.process_time(), time.perf_counter()
        for k in range(args.n):
            chancy.sync_push(j.with_kwargs(i=k, **extra))
        seconds = time.perf_counter() - t0
        emit({"mode": "sync", "n": args.n, "seconds": seconds, "cpu_s": time.process_time() - cpu0})


async def _latency(args: argparse.Namespace) -> None:
    j = JOBS["latency"].job
    path = os.environ["BENCH_RECORD"]
    async with chancy:
        await chancy.push(j.with_kwargs(i=-1, t=time.time()))
        wait_for_lines(path, 1, 30)
        sent = []
        for i in range(args.samples):
            time.sleep(args.gap * (0.5 + random.random()))
            t_before = time.time()
            await chancy.push(j.with_kwargs(i=i, t=t_before))
            t_after = time.time()
            sent.append((i, t_before, t_after))
            if not wait_for_lines(path, i + 2, args.timeout):
                break
    emit({"sent": sent})


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--concurrency", type=int, default=10)
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
        asyncio.run(_setup(a))
    elif a.cmd == "enqueue":
        if a.mode == "sync":
            _sync_enqueue(a)
        else:
            asyncio.run(_enqueue(a))
    else:
        asyncio.run(_latency(a))


if __name__ == "__main__":
    main()
