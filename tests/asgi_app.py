"""The FastAPI app of docs/how-to/asgi.md (the page includes its section
"app": everything after this docstring and the __future__ import), which
tests/test_asgi.py serves with a real uvicorn process."""

from __future__ import annotations

# --8<-- [start:app]
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from tether import JobContext, Tether
from tether.contrib.asgi import worker_lifespan

app = Tether()  # TETHER_DATABASE_URL, else sqlite:///tether.db


@app.task
async def resize(ctx: JobContext, path: str, seconds: float = 0.0) -> str:
    await asyncio.sleep(seconds)  # the work; at shutdown the worker cancels it here and releases the job
    return f"resized {path}"


@app.task
def thumbnail(ctx: JobContext, path: str, seconds: float = 0.0) -> str:
    # a def handler runs on the worker's threads; a thread cannot be interrupted,
    # so it looks at ctx.cancelled (here: a wait that a stopping worker cuts short)
    if ctx.wait_cancelled(seconds):
        ctx.raise_if_cancelled()
    return f"thumbnail of {path}"


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    # a worker on uvicorn's event loop while the app runs; at shutdown, running
    # jobs get 2 s to finish, then go back to the queue, their budget untouched
    async with worker_lifespan(app, concurrency=4, shutdown_timeout=2):
        yield


api = FastAPI(lifespan=lifespan)


@api.post("/resize")
async def enqueue_resize(path: str, seconds: float = 0.0) -> dict[str, int]:
    return {"job_id": await resize.enqueue_async(path=path, seconds=seconds)}


@api.post("/thumbnail")
async def enqueue_thumbnail(path: str, seconds: float = 0.0) -> dict[str, int]:
    return {"job_id": await thumbnail.enqueue_async(path=path, seconds=seconds)}
# --8<-- [end:app]
