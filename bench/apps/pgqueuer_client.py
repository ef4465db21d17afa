"""pgqueuer's benchmark client: install, enqueue (bulk, single async with
asyncpg, single sync with psycopg), latency producer."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from _benchkit import client_parser, dsn, emit, latency_loop


def setup(args: argparse.Namespace) -> None:
    pgq = os.path.join(os.path.dirname(sys.executable), "pgq")
    out = subprocess.run([pgq, "install"], env={**os.environ, "PGDSN": dsn()},
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"pgq install failed: {out.stdout}\n{out.stderr}")
    emit({"installed": True})


def _payload(k: int, extra: dict) -> bytes:
    return json.dumps({"i": k, **extra}).encode()


async def _async_enqueue(args: argparse.Namespace, extra: dict) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn())
    q = Queries(AsyncpgDriver(conn))
    n, batch = args.n, args.batch
    cpu0, t0 = time.process_time(), time.perf_counter()
    if args.mode == "bulk":
        for start in range(0, n, batch):
            ks = range(start, min(n, start + batch))
            await q.enqueue([args.task] * len(ks), [_payload(k, extra) for k in ks], [0] * len(ks))
    else:
        for k in range(n):
            await q.enqueue(args.task, _payload(k, extra))
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    await conn.close()
    emit({"mode": args.mode, "n": n, "batch": batch, "seconds": seconds, "cpu_s": cpu})


def _sync_enqueue(args: argparse.Namespace, extra: dict) -> None:
    import psycopg
    from pgqueuer.db import SyncPsycopgDriver
    from pgqueuer.queries import SyncQueries

    with psycopg.connect(dsn(), autocommit=True) as conn:
        q = SyncQueries(SyncPsycopgDriver(conn))
        cpu0, t0 = time.process_time(), time.perf_counter()
        for k in range(args.n):
            q.enqueue(args.task, _payload(k, extra))
        seconds = time.perf_counter() - t0
        emit({"mode": "sync", "n": args.n, "seconds": seconds, "cpu_s": time.process_time() - cpu0})


def enqueue(args: argparse.Namespace) -> None:
    extra = json.loads(args.args)
    if args.mode == "sync":
        _sync_enqueue(args, extra)
    else:
        asyncio.run(_async_enqueue(args, extra))


async def _latency(args: argparse.Namespace) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn())
    q = Queries(AsyncpgDriver(conn))
    await latency_loop(args, lambda i, t: q.enqueue("latency", json.dumps({"i": i, "t": t}).encode()))
    await conn.close()


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
