"""The worker under test in a chaos run: ``python -m tether.chaos.workerproc``.

Everything comes from the environment the driver sets: the database URL, the
timers, the history directory and the failpoints. The handlers sleep, report
progress (a heartbeat), fail on request, and hit the failpoints that sit
inside a handler: mid-handler, and after the side effect but before complete.
The transactional tasks (``effects.TX_TASKS``, for I7) write their one effect
row inside ``ctx.transaction()`` (on PostgreSQL waiting there a little, so that faults
also land between the write and its commit).
The workflow steps and batch callbacks (``flows.STEP_TASK``, ``CALLBACK_TASK``,
for I9) record their start first.
The app also declares a one-second schedule, so every worker runs a scheduler
and the checker can judge I6.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

from ..app import Tether
from ..context import JobContext
from ..worker import failpoints
from .collect import DYNAMIC_TASK, TICK_CRON, TICK_QUEUE, TICK_TASK
from .config import QUEUE
from .effects import TX_TASKS, Effects
from .flows import CALLBACK_TASK, MEMBER_TASK, STEP_TASK, Starts
from .limits_check import LIMITED_QUEUE

SYNC_TASK = "tether.chaos.work"
ASYNC_TASK = "tether.chaos.work_async"


def build_app() -> Tether:
    app = Tether(
        os.environ["TETHER_DATABASE_URL"],
        lease_ttl=float(os.environ["TETHER_CHAOS_TTL"]),
        heartbeat_interval=float(os.environ["TETHER_CHAOS_HB"]),
        reaper_interval=float(os.environ["TETHER_CHAOS_REAPER"]),
        transport=os.environ.get("TETHER_CHAOS_TRANSPORT") or None,
    )

    @app.task(name=SYNC_TASK, queue=QUEUE)
    def work(ctx: JobContext, ms: int, fail: bool = False) -> dict[str, Any]:
        steps = max(1, ms // 50)
        for i in range(steps):
            if i == steps // 2 and failpoints.ARMED:
                failpoints.hit("mid_handler")
            if i % 4 == 3:
                ctx.progress(i / steps)  # a heartbeat too; raises StaleAttempt if the job was lost
            # Event.wait, not time.sleep: under libfaketime (the skew fault) Python's
            # time.sleep fails with EINVAL; and this way a cancel wakes us at once.
            if ctx.wait_cancelled(ms / steps / 1000):
                ctx.raise_if_cancelled()
        if fail:
            raise RuntimeError("planned failure")
        if failpoints.ARMED:
            failpoints.hit("after_side_effect")
        return {"attempt": ctx.attempt, "pid": os.getpid()}

    @app.task(name=ASYNC_TASK, queue=QUEUE)
    async def work_async(ctx: JobContext, ms: int, fail: bool = False) -> dict[str, Any]:
        if failpoints.ARMED:
            failpoints.hit("mid_handler")
        await asyncio.sleep(ms / 1000)
        if fail:
            raise RuntimeError("planned failure")
        if failpoints.ARMED:
            failpoints.hit("after_side_effect")
        return {"attempt": ctx.attempt, "pid": os.getpid()}

    effects = Effects(os.environ["TETHER_DATABASE_URL"])
    # How long a job waits inside its block: on PostgreSQL a share of its run,
    # so that kills, stops and partitions land between the write and its
    # commit. Not on SQLite: there the block holds the one write lock, and a
    # worker stopped inside it stalls every other writer (reapers included)
    # until it resumes, which no recovery bound survives; the failpoints
    # inside the block still kill a worker between the write and the commit.
    def in_block(ms: int) -> float:
        return 0.0 if effects.backend == "sqlite" else min(ms // 4, 100) / 1000

    @app.task(name=TX_TASKS[0], queue=QUEUE)
    def effect(ctx: JobContext, ms: int, fail: bool = False) -> dict[str, Any]:
        inside = in_block(ms)
        if ctx.wait_cancelled((ms / 1000) - inside):
            ctx.raise_if_cancelled()
        with ctx.transaction() as conn:
            conn.execute(effects.insert, (ctx.job_id, ctx.attempt, ctx.worker_id))
            if failpoints.ARMED:
                failpoints.hit("mid_handler")
            if ctx.wait_cancelled(inside):
                ctx.raise_if_cancelled()  # rolls the effect back
            if fail:
                raise RuntimeError("planned failure")  # rolls the effect back
            if failpoints.ARMED:
                failpoints.hit("after_side_effect")  # written, not committed: must not land
        return {"attempt": ctx.attempt, "pid": os.getpid()}

    @app.task(name=TX_TASKS[1], queue=QUEUE)
    async def effect_async(ctx: JobContext, ms: int, fail: bool = False) -> dict[str, Any]:
        inside = in_block(ms)
        await asyncio.sleep((ms / 1000) - inside)
        async with ctx.transaction() as conn:
            if effects.backend == "sqlite":
                conn.execute(effects.insert, (ctx.job_id, ctx.attempt, ctx.worker_id))
            else:
                await conn.execute(effects.insert, (ctx.job_id, ctx.attempt, ctx.worker_id))
            await asyncio.sleep(inside)
            if fail:
                raise RuntimeError("planned failure")
            if failpoints.ARMED:
                failpoints.hit("after_side_effect")
        return {"attempt": ctx.attempt, "pid": os.getpid()}

    starts = Starts(os.environ["TETHER_DATABASE_URL"])

    @app.task(name=STEP_TASK, queue=QUEUE)
    def step(ctx: JobContext, ms: int, fail: bool = False) -> dict[str, Any]:
        """A workflow step (I9): records its start and what it read of its dependencies, first thing."""
        starts.record(ctx.job_id, ctx.attempt, ctx.worker_id, ctx.upstream_states)
        return work(ctx, ms, fail)

    @app.task(name=CALLBACK_TASK, queue=QUEUE)
    def callback(ctx: JobContext, ms: int, fail: bool = False) -> dict[str, Any]:
        """A batch callback (I9): records its start, first thing."""
        starts.record(ctx.job_id, ctx.attempt, ctx.worker_id, None)
        return work(ctx, ms, fail)

    @app.task(name=MEMBER_TASK, queue=QUEUE)
    async def member(ctx: JobContext, ms: int, fail: bool = False, grow: bool = False) -> dict[str, Any]:
        """A batch member: short; it hits the handler's failpoint for one job in
        eight (the worker's after_claim for every one), so that two hundred of them
        at once do not keep every worker dying (the fault schedule injects a kill
        or a stop only while two workers are healthy). With ``grow`` it adds a
        member to its batch first (ctx.batch.add; I9: the callbacks wait for it)."""
        if grow:
            await asyncio.to_thread(ctx.batch.add, member.spec(ms=ms))
        if failpoints.ARMED and ctx.job_id % 8 == 0:
            failpoints.hit("mid_handler")
        await asyncio.sleep(ms / 1000)
        if fail:
            raise RuntimeError("planned failure")
        return {"attempt": ctx.attempt, "pid": os.getpid()}

    @app.periodic(TICK_CRON, name=TICK_TASK, queue=TICK_QUEUE)
    def tick(ctx: JobContext) -> None:
        """The run's schedule (I6): every worker's scheduler fires it; the job does nothing."""

    @app.task(name=DYNAMIC_TASK, queue=TICK_QUEUE)
    def dynamic_tick(ctx: JobContext) -> None:
        """The task of the schedule the driver adds at run time (I6): fired by every worker, as the other."""

    return app


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    build_app().run_worker(
        concurrency=int(os.environ.get("TETHER_CHAOS_CONCURRENCY", "4")),
        queues=[QUEUE, LIMITED_QUEUE, TICK_QUEUE],
        shutdown_timeout=float(os.environ.get("TETHER_CHAOS_SHUTDOWN", "5")),
        prefetch=os.environ.get("TETHER_PREFETCH", "1").lower() not in ("0", "false", "no", "off"),
    )


if __name__ == "__main__":
    main()
