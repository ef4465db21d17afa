"""Worker processes for tests/test_dynamic_schedules.py, run as
``python tests/dynamic_schedule_proc.py ROLE``. No ``@app.periodic``: every
schedule these fire is added at run time.

- ``adder``: a worker of queue ``admin`` whose task ``dyn.add`` adds the
  schedule ``dyn.every`` (every second) of the task ``dyn.tick``, which this
  process does not run, so never fires;
- ``ticker``: a worker of queue ``ticks`` that runs ``dyn.tick`` and so fires
  the schedules of that task, however they were added.

Environment: TETHER_DATABASE_URL (and TETHER_TOKEN for a tether server)."""

from __future__ import annotations

import os
import sys

from tether import JobContext, Tether

app = Tether(os.environ["TETHER_DATABASE_URL"], reaper_interval=2.0, heartbeat_interval=0.5, lease_ttl=2.0)

if sys.argv[1:] == ["adder"]:

    @app.task(name="dyn.add", queue="admin")
    def add(ctx: JobContext, name: str) -> None:
        app.add_schedule(name, "* * * * * *", task="dyn.tick", args={"n": 1})

    # the task it schedules, known to this app by name only (queue "ticks", which it does not serve)
    @app.task(name="dyn.tick", queue="ticks")
    def tick_here(ctx: JobContext, n: int) -> None:
        raise AssertionError("the adder serves no ticks")

else:

    @app.task(name="dyn.tick", queue="ticks")
    def tick(ctx: JobContext, n: int) -> str | None:
        return None if ctx.scheduled_for is None else ctx.scheduled_for.isoformat()


if __name__ == "__main__":
    queues = ["admin"] if sys.argv[1:] == ["adder"] else ["ticks"]
    app.run_worker(concurrency=2, queues=queues)
