"""procrastinate's benchmark app: an App on the psycopg 3 connector and async tasks.

    procrastinate --app=procrastinate_app.app worker --concurrency C
"""

from __future__ import annotations

import asyncio
import time

import procrastinate
from _benchkit import dsn, mark_first, record

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn()))


@app.task(name="noop")
async def noop(i: int = 0) -> None:
    mark_first()


@app.task(name="sleepy")
async def sleepy(i: int = 0, seconds: float = 3600.0) -> None:
    mark_first()
    await asyncio.sleep(seconds)


@app.task(name="latency")
async def latency(i: int, t: float) -> None:
    record(i, repr(time.time()))
