"""Process isolation: handlers a thread could not stop, killed at their timeout."""

from __future__ import annotations

import os
import time

from tether import JobContext, Tether

app = Tether()  # TETHER_DATABASE_URL, else sqlite:///tether.db


# --8<-- [start:task]
@app.task(name="render", timeout=5, isolation="process", max_attempts=2)
def render(ctx: JobContext, pages: int) -> dict[str, int]:
    """Runs in a child process of the worker; killed (SIGKILL) at 5 s, before
    the attempt is written timed out, so its retry never runs beside it."""
    for page in range(pages):
        ctx.progress(page / pages, f"page {page}")  # relayed to the worker, which owns the lease
        time.sleep(0.01)  # stands in for a C library call that may never return
    return {"pages": pages, "pid": os.getpid()}
# --8<-- [end:task]


# --8<-- [start:run]
if __name__ == "__main__":
    # every def handler in a child, each child replaced after 100 jobs or past 500 MB:
    # the same as `tether worker --app app:app --isolation process -c 4
    #   --max-tasks-per-child 100 --max-memory-per-child 500MB`
    app.run_worker(concurrency=4, isolation="process", max_tasks_per_child=100, max_memory_per_child="500MB")
# --8<-- [end:run]
