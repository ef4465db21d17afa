"""The PostgreSQL store's schedule operations (I6), a mixin of
``PostgresStore``: a sync is one statement, a fire is one read of the
definitions and the database clock and then one statement per schedule with
ticks due (``queries.sql``, schedules section, says why each is shaped as it
is). One statement per schedule, not one for all: each locks one schedule row,
so two workers firing the same schedules cannot deadlock on them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ...errors import ConfigError
from ...model import FiredTick, ScheduleInfo, ScheduleSpec
from ..pruning import check_limit
from ..schedules import (
    FIRE_MAX_AGE,
    TICK_KEEP,
    TaskTags,
    dynamic_row,
    not_found,
    plan_fires,
    removed,
    schedule_from_row,
    sorted_specs,
    spec_arrays,
    tags_param,
    taken,
)

__all__ = ["PostgresSchedules"]


class PostgresSchedules:
    _all: Callable[..., list[tuple[Any, ...]]]

    def sync_schedules(self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None) -> None:
        self._all("sync_schedules", {**spec_arrays(sorted_specs(specs)), "now": now})

    def fire_schedules(
        self, names: Sequence[str], *, grace: float, now: datetime | None = None, tasks: Sequence[str] = (),
        tags: TaskTags | None = None,
    ) -> list[FiredTick]:
        if not names and not tasks:
            return []
        out: list[FiredTick] = []
        task_tags = tags_param(tags)
        rows = self._all("schedules_to_fire", {"names": sorted(set(names)), "tasks": sorted(set(tasks)), "now": now})
        for fire in plan_fires(rows, grace=grace):
            won = self._all("fire_ticks", {"name": fire.name, "version": fire.version, "ticks": fire.ticks,
                                           "skip": fire.skip, "read_at": fire.read_at, "max_age": FIRE_MAX_AGE,
                                           "now": now, "tags": task_tags})
            out.extend(FiredTick(schedule=fire.name, tick=tick, job_id=job_id, queue=queue if job_id else "",
                                 task=task) for tick, job_id, queue, task in won)
        return out

    def list_schedules(self, *, now: datetime | None = None) -> list[ScheduleInfo]:
        return [schedule_from_row(r) for r in self._all("list_schedules", {"now": now})]

    def prune_ticks(self, limit: int, *, now: datetime | None = None) -> int:
        return int(self._all("prune_ticks", {"keep": TICK_KEEP, "limit": check_limit(limit), "now": now})[0][0])

    def add_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> None:
        if not self._all("add_schedule", {**dynamic_row(spec), "now": now}):
            raise taken(spec.name)

    def set_schedule_paused(self, name: str, paused: bool, *, now: datetime | None = None) -> None:
        if not self._all("set_schedule_paused", {"name": name, "paused": bool(paused), "now": now}):
            raise not_found(name)

    def remove_schedule(self, name: str, *, now: datetime | None = None) -> None:
        gone, existed = self._all("remove_schedule", {"name": name})[0]
        removed(name, bool(gone), bool(existed))

    def trigger_schedule(self, name: str, *, now: datetime | None = None, tags: TaskTags | None = None) -> FiredTick:
        job_id, queue, tick, task, found = self._all("trigger_schedule", {"name": name, "now": now,
                                                                          "tags": tags_param(tags)})[0]
        if not found:
            raise not_found(name)
        if job_id is None:  # another trigger took this very instant: the primary key admits one
            raise ConfigError(f"schedule {name!r} was triggered at this same instant already; try again")
        return FiredTick(schedule=name, tick=tick, job_id=job_id, queue=queue, task=task)
