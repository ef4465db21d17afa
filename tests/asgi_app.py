"""The FastAPI app of the README's "FastAPI / ASGI" section, as
``tests/test_asgi.py`` runs it under a real uvicorn process (configuration
from the environment: the database URL and a short shutdown timeout)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from tether import JobContext, Tether
from tether.contrib.asgi import worker_lifespan

app = Tether(os.environ["TETHER_DATABASE_URL"], lease_ttl=4, heartbeat_interval=1)


@app.task
async def resize(ctx: JobContext, path: str, seconds: float = 0.0) -> str:
    await asyncio.sleep(seconds)  # the real work; a stopping worker cancels it here
    return f"resized {path}"


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with worker_lifespan(app, concurrency=4, shutdown_timeout=float(os.environ.get("T_SHUTDOWN", "30"))):
        yield


api = FastAPI(lifespan=lifespan)


@api.post("/resize")
async def enqueue_resize(path: str, seconds: float = 0.0) -> dict[str, int]:
    return {"job_id": await resize.enqueue_async(path=path, seconds=seconds)}
