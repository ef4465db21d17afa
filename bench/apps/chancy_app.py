"""Chancy's benchmark app: a Chancy instance and async jobs, run by the
asyncio executor (the queue is declared with it by ``chancy_client.py setup``).

    chancy --app chancy_app.chancy worker start
"""

from __future__ import annotations

import asyncio
import time

from _benchkit import dsn, mark_first, record
from chancy import Chancy, job

chancy = Chancy(dsn())


@job(queue="default")
async def noop(i: int = 0) -> None:
    mark_first()


@job(queue="default")
async def sleepy(i: int = 0, seconds: float = 3600.0) -> None:
    mark_first()
    await asyncio.sleep(seconds)


@job(queue="default")
async def latency(i: int, t: float) -> None:
    record(i, repr(time.time()))


JOBS = {"noop": noop, "sleepy": sleepy, "latency": latency}
