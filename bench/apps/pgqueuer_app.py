"""pgqueuer's benchmark app, the factory ``pgq run`` takes (1.6 wants an async
context manager; the README's plain coroutine is refused with a message that
shows this shape): an asyncpg connection, a PgQueuer, and async entrypoints.

    PGDSN=... pgq run pgqueuer_app:main --batch-size B --max-concurrent-tasks C
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from _benchkit import dsn, mark_first, record
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(dsn())
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        mark_first()

    @pgq.entrypoint("sleepy")
    async def sleepy(job: Job) -> None:
        mark_first()
        await asyncio.sleep(json.loads(job.payload or b"{}").get("seconds", 3600))

    @pgq.entrypoint("latency")
    async def latency(job: Job) -> None:
        record(json.loads(job.payload or b"{}")["i"], repr(time.time()))

    try:
        yield pgq
    finally:
        await connection.close()
