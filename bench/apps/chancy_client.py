"""Chancy's benchmark client: migrate and declare the queue, enqueue (push_many,
push, sync_push), latency producer."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from _benchkit import client_parser, emit, latency_loop
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
    async with chancy:
        await latency_loop(args, lambda i, t: chancy.push(j.with_kwargs(i=i, t=t)))


def main() -> None:
    p, _ = client_parser(setup_concurrency=True)
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
