"""The app behind ``tether demo``; its workers run it as ``--app tether.cli.demo_app:app``.

``Tether()`` reads ``TETHER_DATABASE_URL``; the demo points that at its own
SQLite file and passes short timers to the workers on the command line.
"""

from __future__ import annotations

import os
import time

from ..app import Tether
from ..context import JobContext

__all__ = ["RUNS_ENV", "app", "work"]

#: where ``work`` appends ``job_id,attempt,worker_pid`` each time its handler starts
RUNS_ENV = "TETHER_DEMO_RUNS"

app = Tether()


@app.task(name="demo.work", max_attempts=3)
def work(ctx: JobContext, n: int, seconds: float, steps: int = 8) -> dict[str, int]:
    """Sleep ``seconds`` in ``steps`` slices, reporting progress after each.

    The side effect comes first, before any work: a worker killed mid-job has
    already written its line, which is how the demo shows at-least-once delivery
    (a recovered job's handler ran twice, its state was written once).
    """
    runs = os.environ.get(RUNS_ENV)
    if runs:
        with open(runs, "a", encoding="utf-8") as f:
            f.write(f"{ctx.job_id},{ctx.attempt},{os.getpid()}\n")
    for i in range(steps):
        ctx.raise_if_cancelled()
        time.sleep(seconds / steps)
        ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
    return {"n": n, "pid": os.getpid()}
