"""What a chaos run left behind, read into the checkers' inputs: the driver's
and the workers' histories, the enqueued jobs with their attempts, and the
ticks of the run's one-second schedules (I6): one in the workers' code, one
added at run time (``dynamic_spec``), judged alike.

The schedule's healthy windows are the I5 checker's (``healthy_spans``: a
worker running, not stopped, not cut off) less the database's outages and the
time the workers take to reconnect after one (``RECONNECT_GRACE``); on
SQLite, less every window in which a worker was stopped inside a write
transaction (``checker.stopped_windows``: the driver probes the lock after
each stop): it holds SQLite's one write lock, and no worker can write, the
schedulers included, until it is continued.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..model import ScheduleSpec
from ..store import Store
from .checker import RECONNECT_GRACE, AttemptRow, Invariant, JobRow, healthy_spans, stopped_windows
from .schedule_check import TITLE, TickRow, check_schedule, expected_ticks

__all__ = ["DYNAMIC_SCHEDULE", "DYNAMIC_TASK", "TICK_CRON", "TICK_QUEUE", "TICK_TASK", "dynamic_spec", "read_created", "read_events", "read_jobs", "schedule_invariant"]

#: the run's schedule: fired by every worker's scheduler, checked as I6
TICK_TASK = "tether.chaos.tick"
TICK_CRON = "* * * * * *"
#: its own queue, which every chaos worker serves, so the drain (which waits
#: for the producer's jobs) never waits on a tick that keeps coming
TICK_QUEUE = "tether_chaos_ticks"
#: the run's schedule added at run time (issue 44): the same cron, a task of
#: its own (a plain task of the workers' app), judged as I6 like the first
DYNAMIC_SCHEDULE = "tether.chaos.dynamic"
DYNAMIC_TASK = "tether.chaos.dynamic_tick"


def read_events(driver_events: Sequence[Mapping[str, Any]], tmp: Path, hist: Path,
                enqueued: Iterable[int]) -> list[dict[str, Any]]:
    """The driver's events and every worker's history, less the records of
    jobs the producer did not enqueue (the schedule's: I6 judges those from
    the database, and the drain does not wait for them, so I1-I5 leave them
    alone). The driver's events are written beside the histories too, so that
    an artifacts folder carries the fault schedule."""
    ours = set(enqueued)
    events: list[dict[str, Any]] = [dict(e) for e in driver_events]
    with (tmp / "driver.jsonl").open("w") as out:
        out.writelines(json.dumps(e, default=str) + "\n" for e in driver_events)
    for path in sorted(hist.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                event = json.loads(line)
                if "job" not in event or event["job"] in ours:
                    events.append(event)
    return events


def read_jobs(store: Store, enqueued: Iterable[int]) -> tuple[dict[int, JobRow], list[AttemptRow]]:
    jobs: dict[int, JobRow] = {}
    attempts: list[AttemptRow] = []
    for job_id in enqueued:
        job = store.get_job(job_id)
        if job is None:
            continue
        jobs[job.id] = JobRow(job.id, str(job.state), job.attempt, job.result)
        attempts.extend(
            AttemptRow(a.job_id, a.attempt, a.worker, a.claimed_at.timestamp(), a.finished_at.timestamp(),
                       str(a.outcome))
            for a in job.attempts if a.finished_at is not None and a.outcome is not None
        )
    return jobs, attempts


def read_created(store: Store, ids: Iterable[int]) -> dict[int, float]:
    """Each job's created_at (database clock, epoch seconds)."""
    return {job.id: job.created_at.timestamp() for job in map(store.get_job, dict.fromkeys(ids)) if job is not None}


def schedule_invariant(
    store: Store, events: Sequence[Mapping[str, Any]], *, mono_to_wall: float, start: float, end: float,
    bound: float, outages: Iterable[tuple[float, float]] = (), sqlite: bool = False,
) -> Invariant:
    """I6 over the run's schedule from ``start`` to ``end`` (wall clock): each
    tick made at most one job, and every tick owed while a worker was healthy
    made one within ``bound`` (the reaper interval)."""
    healthy = [(b + mono_to_wall, e + mono_to_wall) for per in healthy_spans(events).values() for b, e in per]
    # After a database restart the workers' connections take a while to come
    # back (as I5 allows, RECONNECT_GRACE): no scheduler can fire until then.
    cuts = [(b, e + RECONNECT_GRACE) for b, e in outages]
    if sqlite:
        cuts += [(b + mono_to_wall, e + mono_to_wall) for b, e in stopped_windows(events)]
    healthy = _minus(healthy, cuts)
    # Ticks before the schedule existed (the first worker's first sync, or
    # add_schedule) or before its cron last changed are owed by nobody
    # (ScheduleInfo.since). A schedule the run does not hold is not judged.
    out, judged = Invariant("I6", TITLE), []
    for s in store.list_schedules():
        task = {TICK_TASK: TICK_TASK, DYNAMIC_SCHEDULE: DYNAMIC_TASK}.get(s.name)
        if task is None or s.task != task:
            continue
        fired = store.list_jobs(task=task, limit=1_000_000)
        decided = [TickRow(tick=j.scheduled_for.timestamp(), job_id=j.id, created_at=j.created_at.timestamp())
                   for j in fired if j.scheduled_for is not None and j.schedule == s.name]
        owed_from = max(start, s.since.timestamp()) if s.since is not None else start
        one = check_schedule(s.name, expected_ticks(TICK_CRON, "UTC", owed_from, end), decided, healthy=healthy,
                             bound=bound)
        out.checked += one.checked
        out.violations += one.violations
        judged.append(s.name)
    out.title = f"{TITLE} ({', '.join(judged) or 'no schedule'})"
    return out


def dynamic_spec() -> ScheduleSpec:
    """The schedule the driver adds at run time (``Store.add_schedule``)."""
    return ScheduleSpec(name=DYNAMIC_SCHEDULE, cron=TICK_CRON, timezone="UTC", args_json="{}", queue=TICK_QUEUE,
                        catch_up=1, overlap=True, task=DYNAMIC_TASK)


def _minus(spans: Iterable[tuple[float, float]], cuts: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` with every part inside a cut removed."""
    out = list(spans)
    for cb, ce in cuts:
        nxt: list[tuple[float, float]] = []
        for b, e in out:
            if ce <= b or cb >= e:
                nxt.append((b, e))
                continue
            if b < cb:
                nxt.append((b, cb))
            if ce < e:
                nxt.append((ce, e))
        out = nxt
    return out
