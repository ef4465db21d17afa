"""A worker fed by NATS JetStream: enqueue commits the job, then publishes its
id; the worker claims the job whose message it received."""

from __future__ import annotations

import asyncio
import contextlib
import os

from tether import JobContext, Tether

# --8<-- [start:app]
# TETHER_TRANSPORT="nats://nats-host:4222?prefix=app" in the environment does the same
app = Tether(transport=os.environ.get("TETHER_TRANSPORT", "nats://127.0.0.1:4222?prefix=app"))


@app.task()
def resize(ctx: JobContext, path: str) -> str:
    return f"resized {path}"
# --8<-- [end:app]


async def main() -> None:
    # --8<-- [start:run]
    job_id = resize.enqueue(path="a.png")  # committed, then published to <prefix>.jobs.default
    worker = asyncio.create_task(app.run_worker_async())  # claims the jobs whose messages it receives
    job = await app.wait_async(job_id, timeout=30)
    print(job.result)  # resized a.png
    worker.cancel()
    # --8<-- [end:run]
    with contextlib.suppress(asyncio.CancelledError):
        await worker


if __name__ == "__main__":
    app.migrate()
    asyncio.run(main())
    app.close()
    print("ok")
