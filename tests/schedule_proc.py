"""A worker app with a one-second schedule (tests/test_schedule_processes.py),
run as ``python tests/schedule_proc.py``: the default layout, an app module
that runs its own worker, whose runtime starts the scheduler because the app
declares a schedule. Default timers (the reaper interval, 10 s, is the
scheduler's grace: the I6 bound).

Environment: TETHER_DATABASE_URL."""

from __future__ import annotations

import os

from tether import JobContext, Tether

app = Tether(os.environ["TETHER_DATABASE_URL"])


@app.periodic("* * * * * *", name="proc.tick")
def tick(ctx: JobContext) -> str | None:
    return None if ctx.scheduled_for is None else ctx.scheduled_for.isoformat()


if __name__ == "__main__":
    app.run_worker(concurrency=4)
