"""A worker app for the real-process tests, run as ``python tests/proc_app.py``.

Configuration comes from the environment (the tests set it): the database URL,
the three timers, the transport, concurrency and shutdown timeout. Handlers drop marker files
in ``T_MARK_DIR`` named ``<job>-<attempt>-<pid>.<event>`` so a test can see which
process is running which attempt without touching the database.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tether import JobContext, Tether

app = Tether(
    os.environ["TETHER_DATABASE_URL"],  # or a tether server's URL, with TETHER_TOKEN
    lease_ttl=float(os.environ.get("T_TTL", "2")),
    heartbeat_interval=float(os.environ.get("T_HB", "0.4")),
    reaper_interval=float(os.environ.get("T_REAPER", "0.5")),
    transport=os.environ.get("T_TRANSPORT") or None,  # e.g. nats://127.0.0.1:4222?prefix=...
)
MARKS = Path(os.environ.get("T_MARK_DIR", "."))


def mark(ctx: JobContext, event: str) -> None:
    (MARKS / f"{ctx.job_id}-{ctx.attempt}-{os.getpid()}.{event}").write_text(str(time.time()))


@app.task(name="sleepy")
def sleepy(ctx: JobContext, seconds: float) -> dict[str, Any]:
    mark(ctx, "start")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)
    mark(ctx, "end")  # the side effect, done before complete
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@app.task(name="coop")
def coop(ctx: JobContext, seconds: float) -> dict[str, Any]:
    """Like sleepy, but stops as soon as the worker cancels it (lost lease, cancel, shutdown)."""
    mark(ctx, "start")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if ctx.cancelled:
            mark(ctx, "stopped")
            ctx.raise_if_cancelled()
        time.sleep(0.05)
    mark(ctx, "end")
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@app.task(name="suicide", max_attempts=3)
def suicide(ctx: JobContext) -> None:
    mark(ctx, "start")
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(name="block_loop")
async def block_loop(ctx: JobContext, seconds: float) -> dict[str, Any]:
    mark(ctx, "start")
    time.sleep(seconds)  # blocks the event loop on purpose
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@app.task(name="spin")
def spin(ctx: JobContext, seconds: float) -> dict[str, Any]:
    mark(ctx, "start")
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:  # holds the CPU (and the GIL, between switches)
        n += 1
    return {"pid": os.getpid(), "attempt": ctx.attempt, "spins": n}


# Which app this process is (the unknown-task tests): "old" lacks `fresh`, as
# the code before a deploy that adds it; "alpha" and "beta" are two apps on one
# queue, each with a task the other lacks. Unset: every task.
VARIANT = os.environ.get("T_APP", "")


def made(ctx: JobContext) -> dict[str, Any]:
    mark(ctx, "start")
    return {"pid": os.getpid(), "attempt": ctx.attempt, "app": VARIANT}


if VARIANT != "old":
    app.task(name="fresh")(made)
if VARIANT in ("", "alpha"):
    app.task(name="alpha_only")(made)
if VARIANT in ("", "beta"):
    app.task(name="beta_only")(made)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    queues = os.environ.get("T_QUEUES")
    app.run_worker(
        concurrency=int(os.environ.get("T_CONC", "4")),
        shutdown_timeout=float(os.environ.get("T_SHUTDOWN", "5")),
        queues=queues.split(",") if queues else None,
    )
