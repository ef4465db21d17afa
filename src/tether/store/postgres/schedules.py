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

from ...model import FiredTick, ScheduleInfo, ScheduleSpec
from ..pruning import check_limit
from ..schedules import FIRE_MAX_AGE, TICK_KEEP, plan_fires, schedule_from_row, sorted_specs, spec_arrays

__all__ = ["PostgresSchedules"]


class PostgresSchedules:
    _all: Callable[..., list[tuple[Any, ...]]]

    def sync_schedules(self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None) -> None:
        self._all("sync_schedules", {**spec_arrays(sorted_specs(specs)), "now": now})

    def fire_schedules(
        self, names: Sequence[str], *, grace: float, now: datetime | None = None
    ) -> list[FiredTick]:
        if not names:
            return []
        out: list[FiredTick] = []
        rows = self._all("schedules_to_fire", {"names": sorted(set(names)), "now": now})
        for fire in plan_fires(rows, grace=grace):
            won = self._all("fire_ticks", {"name": fire.name, "version": fire.version, "ticks": fire.ticks,
                                           "skip": fire.skip, "read_at": fire.read_at, "max_age": FIRE_MAX_AGE,
                                           "now": now})
            out.extend(FiredTick(schedule=fire.name, tick=tick, job_id=job_id, queue=queue if job_id else "")
                       for tick, job_id, queue in won)
        return out

    def list_schedules(self, *, now: datetime | None = None) -> list[ScheduleInfo]:
        return [schedule_from_row(r) for r in self._all("list_schedules", {"now": now})]

    def prune_ticks(self, limit: int, *, now: datetime | None = None) -> int:
        return int(self._all("prune_ticks", {"keep": TICK_KEEP, "limit": check_limit(limit), "now": now})[0][0])
