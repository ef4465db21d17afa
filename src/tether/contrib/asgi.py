"""A worker inside an ASGI app (FastAPI, Starlette, anything whose server runs
the lifespan protocol), for the app's lifetime.

    from contextlib import asynccontextmanager
    from fastapi import FastAPI
    from tether.contrib.asgi import worker_lifespan

    @asynccontextmanager
    async def lifespan(api: FastAPI):
        async with worker_lifespan(app, concurrency=4):
            yield

    api = FastAPI(lifespan=lifespan)

The worker runs on the server's event loop (``async def`` handlers there,
``def`` handlers on its own threads, the heartbeat on a thread of its own, so
a busy request handler cannot cost it its leases). When the server stops
(SIGTERM, Ctrl-C), the lifespan's shutdown stops the worker gracefully: no new
claims, ``shutdown_timeout`` for running jobs, then the rest released to the
queue with their retry budget untouched. The server owns the signals; the
worker installs none. Nothing here imports a web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Unpack

from ..app import Tether, WorkerOptions
from ..worker.runtime import Worker

__all__ = ["worker_lifespan"]

log = logging.getLogger("tether.asgi")


@contextlib.asynccontextmanager
async def worker_lifespan(app: Tether, **worker_options: Unpack[WorkerOptions]) -> AsyncIterator[Worker]:
    """Run a worker of ``app`` on the running event loop for the block; on exit,
    stop it gracefully and wait for it (see the module docstring). Start-up
    fails here, in the server's start-up, if tether's tables are missing."""
    await asyncio.to_thread(app.store.check_schema)
    worker = app.worker(**worker_options)
    task = asyncio.create_task(worker.run(install_signal_handlers=False), name="tether-worker")
    task.add_done_callback(_report_crash)
    try:
        yield worker
    finally:
        worker.stop()
        if not task.done():
            await asyncio.shield(task)  # a cancelled shutdown still lets the worker hand its jobs back


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the tether worker stopped with an error; this app now runs no jobs",
                  exc_info=task.exception())
