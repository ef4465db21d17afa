"""tether's benchmark app: the tasks every tether scenario runs.

The database comes from ``TETHER_DATABASE_URL`` (PostgreSQL or SQLite) and the
transport from ``TETHER_TRANSPORT`` (default: the database's), as for any tether app; workers run it with ``python -m tether worker --app tether_app:app``.
"""

from __future__ import annotations

import asyncio
import os
import time

from _benchkit import mark_first, record

from tether import JobContext, Tether

app = Tether(
    lease_ttl=float(os.environ.get("BENCH_LEASE_TTL", 30)),
    heartbeat_interval=float(os.environ.get("BENCH_HEARTBEAT", 10)),
    reaper_interval=float(os.environ.get("BENCH_REAPER", 10)),
    transport=os.environ.get("TETHER_TRANSPORT") or None,
)


@app.task(name="noop")
async def noop(ctx: JobContext, i: int = 0) -> None:
    mark_first()


@app.task(name="noop_sync")
def noop_sync(ctx: JobContext, i: int = 0) -> None:
    """A plain ``def`` no-op (run on the worker's thread pool): the embedded
    anchor scenario, beside huey's sync handlers."""
    mark_first()


@app.task(name="sleepy")
async def sleepy(ctx: JobContext, seconds: float = 3600.0, i: int = 0) -> None:
    """A long-running job: holds its lease (and so its heartbeats) until cancelled."""
    mark_first()
    await asyncio.sleep(seconds)


@app.task(name="latency")
async def latency(ctx: JobContext, i: int, t: float) -> None:
    record(i, repr(time.time()))


@app.task(name="crashy", max_attempts=5)
async def crashy(ctx: JobContext, i: int, hold: float = 3600.0) -> None:
    """Recovery scenario: the first attempt records itself and hangs until its
    worker is SIGKILLed; a later attempt records itself and returns."""
    record(i, ctx.attempt, os.getpid(), repr(time.time()), ctx.job_id)
    if ctx.attempt == 1:
        await asyncio.sleep(hold)


@app.task(name="tx_noop")
async def tx_noop(ctx: JobContext, i: int = 0) -> None:
    """Transactions scenario: a no-op whose success is written by ctx.transaction()
    (the fenced completion in the handler's own transaction), not by the reporter."""
    mark_first()
    async with ctx.transaction():
        pass


@app.task(name="tx_row")
async def tx_row(ctx: JobContext, i: int = 0) -> None:
    """Transactions scenario: one row of the handler's own, committed with its success."""
    mark_first()
    async with ctx.transaction() as conn:
        await conn.execute("INSERT INTO bench_effects (job_id, attempt) VALUES (%s, %s)", (ctx.job_id, ctx.attempt))
