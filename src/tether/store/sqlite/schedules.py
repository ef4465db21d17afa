"""The SQLite store's schedule operations (I6), a mixin of ``SQLiteStore``:
each is one BEGIN IMMEDIATE transaction over the named queries in
``queries.sql`` (the schedules section says why each is shaped as it is)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from ...errors import ConfigError
from ...model import FiredTick, ScheduleInfo, ScheduleSpec
from ..pruning import check_limit
from ..rows import epoch_to_dt, json_text
from ..schedules import (
    TICK_KEEP,
    TaskTags,
    dynamic_row,
    not_found,
    plan_fires,
    removed,
    schedule_from_row,
    sorted_specs,
    tags_param,
    taken,
)

__all__ = ["SQLiteSchedules"]


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


class SQLiteSchedules:
    q: dict[str, str]
    _write: Callable[[], AbstractContextManager[sqlite3.Connection]]
    _all: Callable[..., list[Any]]

    def sync_schedules(self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None) -> None:
        ordered = sorted_specs(specs)
        with self._write() as conn:
            conn.executemany(self.q["sync_schedule"], [
                {"name": x.name, "cron": x.cron, "timezone": x.timezone, "args": x.args_json, "queue": x.queue,
                 "priority": x.priority, "max_attempts": x.max_attempts, "lease_ttl": x.lease_ttl,
                 "timeout": x.timeout, "backoff_base": x.backoff_base, "catch_up": x.catch_up,
                 "overlap": int(x.overlap), "now": _ts(now)}
                for x in ordered])
            conn.execute(self.q["orphan_schedules"], {"names": json.dumps([x.name for x in ordered])})

    def fire_schedules(
        self, names: Sequence[str], *, grace: float, now: datetime | None = None, tasks: Sequence[str] = (),
        tags: TaskTags | None = None,
    ) -> list[FiredTick]:
        if not names and not tasks:
            return []
        params = {"names": json.dumps(sorted(set(names))), "tasks": json.dumps(sorted(set(tasks))), "now": _ts(now)}
        # Most rounds owe nothing (a one-second round, a minute's cron; or a
        # worker whose tasks have no dynamic schedule): a plain read says so
        # without taking SQLite's one write lock. It decides nothing: when a
        # tick is due, the write transaction reads again.
        if not plan_fires(self._all("schedules_to_fire", params), grace=grace, ts=epoch_to_dt):
            return []
        # One write transaction: the clock read, the computation and the
        # inserts see one state, and no other writer runs in between.
        with self._write() as conn:
            rows = conn.execute(self.q["schedules_to_fire"], params).fetchall()
            return list(self._fire(conn, rows, grace, now, tags_param(tags)))

    def _fire(
        self, conn: sqlite3.Connection, rows: list[Any], grace: float, now: datetime | None, tags: str | None,
    ) -> Iterator[FiredTick]:
        for fire in plan_fires(rows, grace=grace, ts=epoch_to_dt):
            won = sorted(conn.execute(self.q["decide_ticks"], {
                "name": fire.name, "version": fire.version, "now": _ts(now),
                "ticks": json.dumps([[t.timestamp(), s] for t, s in zip(fire.ticks, fire.skip, strict=True)]),
            }).fetchall())
            fired: tuple[float, int] | None = None
            for tick, skipped in won:
                when = epoch_to_dt(tick)
                assert when is not None
                if skipped:
                    yield FiredTick(schedule=fire.name, tick=when, job_id=None, queue="")
                    continue
                job_id, queue, task = conn.execute(self.q["fire_job"], {"name": fire.name, "tick": tick,
                                                                        "now": _ts(now), "tags": tags}).fetchone()
                fired = (tick, job_id)
                yield FiredTick(schedule=fire.name, tick=when, job_id=job_id, queue=queue, task=task)
            if won:
                conn.execute(self.q["mark_schedule"], {
                    "name": fire.name, "tick": won[-1][0], "fired": fired[0] if fired else None,
                    "job_id": fired[1] if fired else None, "skipped": sum(1 for _, sk in won if sk)})

    def list_schedules(self, *, now: datetime | None = None) -> list[ScheduleInfo]:
        return [schedule_from_row(r, epoch_to_dt, json_text) for r in self._all("list_schedules", {"now": _ts(now)})]

    def prune_ticks(self, limit: int, *, now: datetime | None = None) -> int:
        with self._write() as conn:
            gone = conn.execute(self.q["prune_ticks"], {"keep": TICK_KEEP, "limit": check_limit(limit),
                                                        "now": _ts(now)})
            return gone.rowcount

    def add_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> None:
        row = dynamic_row(spec)
        with self._write() as conn:
            if conn.execute(self.q["add_schedule"], {**row, "overlap": int(spec.overlap),
                                                     "now": _ts(now)}).fetchone() is None:
                raise taken(spec.name)

    def set_schedule_paused(self, name: str, paused: bool, *, now: datetime | None = None) -> None:
        with self._write() as conn:
            if conn.execute(self.q["set_schedule_paused"], {"name": name, "paused": int(bool(paused)),
                                                            "now": _ts(now)}).fetchone() is None:
                raise not_found(name)

    def remove_schedule(self, name: str, *, now: datetime | None = None) -> None:
        with self._write() as conn:
            gone = conn.execute(self.q["remove_schedule"], {"name": name}).fetchone() is not None
            existed = gone or conn.execute(self.q["schedule_kind"], {"name": name}).fetchone() is not None
        removed(name, gone, existed)

    def trigger_schedule(self, name: str, *, now: datetime | None = None, tags: TaskTags | None = None) -> FiredTick:
        with self._write() as conn:
            won = conn.execute(self.q["trigger_tick"], {"name": name, "now": _ts(now)}).fetchone()
            if won is None:
                if conn.execute(self.q["schedule_kind"], {"name": name}).fetchone() is None:
                    raise not_found(name)
                raise ConfigError(f"schedule {name!r} was triggered at this same instant already; try again")
            tick = won[0]
            job_id, queue, task = conn.execute(self.q["fire_job"], {"name": name, "tick": tick, "now": _ts(now),
                                                                    "tags": tags_param(tags)}).fetchone()
            conn.execute(self.q["mark_triggered"], {"name": name, "tick": tick, "job_id": job_id})
        when = epoch_to_dt(tick)
        assert when is not None
        return FiredTick(schedule=name, tick=when, job_id=job_id, queue=queue, task=task)
