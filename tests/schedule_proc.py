"""A process that runs only a Scheduler (tests/test_schedule_processes.py):
the service as a worker will run it, on a real database, so that SIGKILL and
SIGSTOP hit a real process. Until the worker runtime starts the Scheduler
itself, this stands in for "a worker whose app declares a schedule".

Environment: TETHER_DATABASE_URL, T_MARK_DIR (a file named after the pid is
written once the first sync and fire succeeded), T_INTERVAL, T_GRACE."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tether.model import ScheduleSpec
from tether.store import open_store
from tether.worker.scheduler import Scheduler

SPEC = ScheduleSpec(name="proc.tick", cron="* * * * * *", timezone="UTC", args_json="{}", queue="default",
                    catch_up=1, overlap=True)


async def main() -> None:
    store = open_store(os.environ["TETHER_DATABASE_URL"])
    scheduler = Scheduler(store, [SPEC], interval=float(os.environ.get("T_INTERVAL", "1")),
                          grace=float(os.environ.get("T_GRACE", "10")))
    await asyncio.to_thread(scheduler.run_once)
    Path(os.environ["T_MARK_DIR"], str(os.getpid())).write_text("ready")
    await scheduler.serve(asyncio.to_thread)


if __name__ == "__main__":
    asyncio.run(main())
