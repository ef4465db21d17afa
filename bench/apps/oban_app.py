"""Oban's (Python) benchmark workers. ``oban start`` resolves a job's worker by
its import path (``oban_app.Noop``), so this module only has to be importable.

    oban start --dsn DSN --queues default:C
"""

from __future__ import annotations

import asyncio
import time

from _benchkit import mark_first, record
from oban import worker


@worker(queue="default")
class Noop:
    async def process(self, job):  # type: ignore[no-untyped-def]
        mark_first()


@worker(queue="default")
class Sleepy:
    async def process(self, job):  # type: ignore[no-untyped-def]
        mark_first()
        await asyncio.sleep(job.args.get("seconds", 3600))


@worker(queue="default")
class Latency:
    async def process(self, job):  # type: ignore[no-untyped-def]
        record(job.args["i"], repr(time.time()))


WORKERS = {"noop": Noop, "sleepy": Sleepy, "latency": Latency}
