"""Schedules: the part both backends share. Cron is not SQL, so a fire reads
the definitions and the database clock, computes the due ticks here (in each
schedule's time zone, with ``tether.cron``), and sends them back to be decided
by the ticks table's primary key. This module does no I/O.

How long a tick's row is needed. A fire proposes only ticks after the
schedule's ``last_tick``, which the statement (PostgreSQL) or transaction
(SQLite) that decides a tick moves past it. So once decided, a tick is
proposed again only by a fire that read the definitions before that
decision and inserts after it, which the primary key turns away. On SQLite
the read and the insert are one transaction: there is no such fire. On
PostgreSQL they are two statements, and a fire read more than
``FIRE_MAX_AGE`` before its insert inserts nothing (the next round reads
again). A tick decided more than ``TICK_KEEP`` ago, longer than that, can
therefore be proposed by no fire: the pruner deletes its row
(``Store.prune_ticks``). Catch-up reads ``since`` and ``last_tick``, and
overlap the ``last_job_id`` of the schedule's row, never the ticks table.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..config import validate_queue
from ..cron import MAX_CATCH_UP, due_ticks, parse_cron
from ..errors import ConfigError, ScheduleNotFound
from ..model import ScheduleInfo, ScheduleSpec

__all__ = [
    "FIRE_MAX_AGE",
    "TICK_KEEP",
    "Fire",
    "TaskTags",
    "check_spec",
    "dynamic_row",
    "dynamic_spec",
    "not_found",
    "plan_fires",
    "removed",
    "schedule_from_row",
    "sorted_specs",
    "spec_arrays",
    "tagged",
    "tags_param",
    "taken",
]

log = logging.getLogger("tether.schedules")

Row = Sequence[Any]
_SPEC_FIELDS = ("name", "cron", "timezone", "queue", "priority", "max_attempts", "lease_ttl", "timeout",
                "backoff_base", "catch_up", "overlap")
#: the integer columns (priority, max_attempts) are 32-bit on PostgreSQL
_INT32 = 2**31 - 1
#: seconds: a fire whose read of the definitions is older than this when it
#: inserts (its worker stalled in between) inserts nothing (PostgreSQL)
FIRE_MAX_AGE = 600.0
#: seconds: a tick decided longer ago than this is pruned; more than
#: FIRE_MAX_AGE, so that no fire can still propose it (the docstring above)
TICK_KEEP = 3600.0
#: each task's tags (``@app.task(tags=...)``) by task name: what a fire or a
#: trigger puts on the jobs of a task's schedules. The firing worker's code
#: says them, as an enqueue's code does: a schedule's row holds no tags (so
#: a worker of a release before them fires the same rows, untagged).
TaskTags = Mapping[str, Sequence[str]]


def tagged(tags: TaskTags | None) -> dict[str, list[str]]:
    """The tasks of ``tags`` that have tags (a task without is as one not named)."""
    return {task: list(t) for task, t in (tags or {}).items() if t}


def tags_param(tags: TaskTags | None) -> str | None:
    """``tags`` as the statements' parameter: a JSON object of the tasks that
    have tags (None for none), whose value at a schedule's task is its jobs'
    tags column (search.tags_json's form; a task it lacks: NULL, no tags)."""
    had = tagged(tags)
    return json.dumps(had, ensure_ascii=False, separators=(",", ":")) if had else None


@dataclass(frozen=True, slots=True)
class Fire:
    """One schedule's due ticks, oldest first, computed from ``version``."""

    name: str
    version: int
    ticks: list[datetime]
    #: per tick: skip it whatever the database finds (overlap=False: a later
    #: tick of the same fire would be behind the job its first tick makes)
    skip: list[bool]
    #: the database's now when the definitions were read
    read_at: datetime


def _int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _seconds(value: object, *, zero: bool) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and (value >= 0 if zero else value > 0))


def check_spec(spec: ScheduleSpec) -> ScheduleSpec:
    """A spec every store can hold, else ConfigError naming the schedule and
    the field. ``@app.periodic`` checks its spec with this when it is
    declared, so a sync, which writes every schedule of the app at once,
    cannot fail on one of them."""
    parse_cron(spec.cron, spec.timezone)
    bad = [f"{field} {getattr(spec, field)!r}" for field, ok in (
        ("name", isinstance(spec.name, str) and spec.name != ""),
        ("args_json", isinstance(spec.args_json, str)),
        ("priority", _int(spec.priority, -_INT32, _INT32)),
        ("max_attempts", _int(spec.max_attempts, 1, _INT32)),
        ("lease_ttl", spec.lease_ttl is None or _seconds(spec.lease_ttl, zero=False)),
        ("timeout", spec.timeout is None or _seconds(spec.timeout, zero=False)),
        ("backoff_base", _seconds(spec.backoff_base, zero=True)),
        ("catch_up", _int(spec.catch_up, 0, MAX_CATCH_UP)),
        ("overlap", isinstance(spec.overlap, bool)),
        ("task", spec.task is None or (isinstance(spec.task, str) and spec.task != "")),
    ) if not ok]
    if bad:
        raise ConfigError(f"schedule {spec.name!r} cannot be stored: bad {', '.join(bad)} (priority and "
                          f"max_attempts are 32-bit ints, max_attempts >= 1; lease_ttl and timeout None or "
                          f"seconds > 0; backoff_base seconds >= 0; catch_up 0 to {MAX_CATCH_UP})")
    validate_queue(spec.queue)
    return spec


def sorted_specs(specs: Sequence[ScheduleSpec]) -> list[ScheduleSpec]:
    """By name, so concurrent syncs lock rows in one order; a name twice, or a
    spec ``check_spec`` refuses, is refused (ConfigError)."""
    out = sorted((check_spec(s) for s in specs), key=lambda s: s.name)
    for a, b in itertools.pairwise(out):
        if a.name == b.name:
            raise ConfigError(f"schedule {a.name!r} is declared twice")
    return out


def spec_arrays(specs: Sequence[ScheduleSpec]) -> dict[str, list[Any]]:
    """The specs as one array per column (PostgreSQL's unnest)."""
    out: dict[str, list[Any]] = {f: [getattr(s, f) for s in specs] for f in _SPEC_FIELDS}
    out["args"] = [s.args_json for s in specs]
    return out


def plan_fires(
    rows: Sequence[Row], *, grace: float, ts: Callable[[Any], Any] = lambda v: v,
) -> list[Fire]:
    """``schedules_to_fire`` rows (now, name, cron, timezone, catch_up, overlap,
    version, since, last_tick) into the fires owed at that ``now``."""
    fires: list[Fire] = []
    for r in rows:
        now, name, expr, tz, catch_up, overlap, version, since, last_tick = r
        try:
            cron = parse_cron(expr, tz)
        except ConfigError as exc:  # written by another version of the code, or a zone this host lacks
            log.warning("schedule %r cannot be fired here: %s", name, exc)
            continue
        ticks = due_ticks(cron, after=ts(last_tick), since=ts(since), now=ts(now), catch_up=catch_up, grace=grace)
        if ticks:
            skip = [False] + [not overlap] * (len(ticks) - 1)
            fires.append(Fire(name=name, version=version, ticks=ticks, skip=skip, read_at=ts(now)))
    return fires


def schedule_from_row(r: Row, ts: Callable[[Any], Any] = lambda v: v,
                      js: Callable[[Any], Any] = lambda v: v) -> ScheduleInfo:
    """A ``list_schedules`` row; the next tick is computed from the row's ``now``."""
    now = ts(r[0])
    try:
        next_tick = parse_cron(r[2], r[3]).next_after(now)
    except ConfigError:
        next_tick = None
    return ScheduleInfo(
        name=r[1], cron=r[2], timezone=r[3], args=js(r[4]), queue=r[5], catch_up=r[6], overlap=bool(r[7]),
        since=ts(r[8]), next_tick=next_tick, last_tick=ts(r[9]), last_fired=ts(r[10]), last_job_id=r[11],
        skipped=r[12], orphaned=bool(r[13]), last_seen=ts(r[14]), task=r[15], dynamic=bool(r[16]),
        paused=bool(r[17]), triggered=r[18], last_triggered=ts(r[19]),
    )


def dynamic_spec(spec: ScheduleSpec) -> ScheduleSpec:
    """An ``add_schedule`` spec every store can hold, else ConfigError."""
    check_spec(spec)
    if spec.task is None:
        raise ConfigError(f"schedule {spec.name!r}: a schedule added at run time names its task (task=...)")
    return spec


def dynamic_row(spec: ScheduleSpec) -> dict[str, Any]:
    """An ``add_schedule`` spec, checked, as the named query's parameters."""
    dynamic_spec(spec)
    return {"name": spec.name, "task": spec.task, "cron": spec.cron, "timezone": spec.timezone,
            "args": spec.args_json, "queue": spec.queue, "priority": spec.priority,
            "max_attempts": spec.max_attempts, "lease_ttl": spec.lease_ttl, "timeout": spec.timeout,
            "backoff_base": spec.backoff_base, "catch_up": spec.catch_up, "overlap": spec.overlap}


def taken(name: str) -> ConfigError:
    """``add_schedule``'s answer when the name is in use."""
    return ConfigError(f"a schedule named {name!r} already exists (names are unique across code and run-time "
                       "schedules): remove it first, or choose another name")


def not_found(name: str) -> ScheduleNotFound:
    return ScheduleNotFound(f"no schedule named {name!r}")


def removed(name: str, gone: bool, existed: bool) -> None:
    """``remove_schedule``'s answer: nothing, or why nothing was removed."""
    if gone:
        return
    if existed:
        raise ConfigError(f"schedule {name!r} is declared in code (@app.periodic): it can be paused and "
                          "triggered at run time, not removed; delete it from the app's code instead")
    raise not_found(name)
