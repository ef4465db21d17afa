"""The schedules' records: a periodic schedule as an app declares it, as
the database holds it, and one tick a fire decided (split from model.py,
which re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["FiredTick", "ScheduleInfo", "ScheduleSpec"]


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A periodic schedule as an app declares it (``@app.periodic``): what a
    worker syncs into the schedules table. The job options are the task's, so
    the database can fire a tick without the task's code."""

    name: str  # the schedule's and its task's name
    cron: str
    timezone: str
    args_json: str
    queue: str
    catch_up: int
    overlap: bool
    priority: int = 0
    max_attempts: int = 3
    lease_ttl: float | None = None
    timeout: float | None = None
    backoff_base: float = 2.0
    #: the task its ticks run: None for a code schedule (its own name); a
    #: dynamic schedule (``app.add_schedule``) names one
    task: str | None = None


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as the database holds it, for ``app.schedules()`` and the CLI."""

    name: str
    cron: str
    timezone: str
    args: dict[str, Any]
    queue: str
    catch_up: int
    overlap: bool
    #: when the cron or time zone last changed (ticks before it are not owed)
    since: datetime | None
    #: the next tick after the database's now (None if the cron never fires again)
    next_tick: datetime | None
    #: the latest tick decided, fired or skipped
    last_tick: datetime | None
    #: the latest tick that made a job, and that job
    last_fired: datetime | None
    last_job_id: int | None
    skipped: int  # ticks skipped because the previous job was active (overlap=False)
    orphaned: bool  # the last app to sync did not declare it: no longer fired by it
    last_seen: datetime | None  # when an app last declared it
    #: the task its ticks run (a code schedule's is its own name)
    task: str = ""
    #: added at run time (``app.add_schedule``), not declared by an app's code
    dynamic: bool = False
    #: paused (``app.pause_schedule``): its ticks are not fired until resumed
    paused: bool = False
    #: jobs fired by ``app.trigger_schedule`` (manual ticks), and the latest one's time
    triggered: int = 0
    last_triggered: datetime | None = None


@dataclass(frozen=True, slots=True)
class FiredTick:
    """One tick a fire operation decided: a job, or skipped (``job_id`` None)."""

    schedule: str
    tick: datetime
    job_id: int | None
    queue: str
    #: the task its job runs (a code schedule's own name; a dynamic one's task)
    task: str = ""
