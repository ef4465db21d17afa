"""Schedules: the part both backends share. Cron is not SQL, so a fire reads
the definitions and the database clock, computes the due ticks here (in each
schedule's time zone, with ``tether.cron``), and sends them back to be decided
by the ticks table's primary key. This module does no I/O.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..cron import due_ticks, parse_cron
from ..errors import ConfigError
from ..model import ScheduleInfo, ScheduleSpec

__all__ = ["Fire", "plan_fires", "schedule_from_row", "sorted_specs", "spec_arrays"]

log = logging.getLogger("tether.schedules")

Row = Sequence[Any]
_SPEC_FIELDS = ("name", "cron", "timezone", "queue", "priority", "max_attempts", "lease_ttl", "timeout",
                "backoff_base", "catch_up", "overlap")


@dataclass(frozen=True, slots=True)
class Fire:
    """One schedule's due ticks, oldest first, computed from ``version``."""

    name: str
    version: int
    ticks: list[datetime]
    #: per tick: skip it whatever the database finds (overlap=False: a later
    #: tick of the same fire would be behind the job its first tick makes)
    skip: list[bool]


def sorted_specs(specs: Sequence[ScheduleSpec]) -> list[ScheduleSpec]:
    """By name, so concurrent syncs lock rows in one order; a name twice, a bad
    cron expression or an unknown time zone is refused (ConfigError)."""
    for spec in specs:
        parse_cron(spec.cron, spec.timezone)
        if spec.catch_up < 0:
            raise ConfigError(f"schedule {spec.name!r}: catch_up must be >= 0, got {spec.catch_up!r}")
    out = sorted(specs, key=lambda s: s.name)
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
            fires.append(Fire(name=name, version=version, ticks=ticks, skip=skip))
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
        skipped=r[12], orphaned=bool(r[13]), last_seen=ts(r[14]),
    )
