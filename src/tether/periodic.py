"""``@app.periodic``: a task that is also a schedule. This module checks a
schedule's options when it is declared (a bad cron expression, an unknown
time zone or args that do not fit the handler fail at import, with a message
that quotes them) and lists schedules for ``app.schedules()``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .cron import MAX_CATCH_UP, parse_cron
from .errors import ConfigError, PayloadError
from .model import ScheduleInfo, ScheduleSpec
from .payload import dump_json
from .store.schedules import check_spec

__all__ = ["DEFAULT_CATCH_UP", "check_schedule", "check_stacked", "merge_declared", "schedule_spec", "task_tags"]

#: missed ticks (every worker down) fired when a worker comes back: the latest only
DEFAULT_CATCH_UP = 1


def check_schedule(cron: str, timezone: str, catch_up: int, overlap: bool, args: Mapping[str, Any] | None) -> None:
    """Everything that can be checked before the handler is seen."""
    parse_cron(cron, timezone)
    if not isinstance(catch_up, int) or isinstance(catch_up, bool) or not 0 <= catch_up <= MAX_CATCH_UP:
        raise ConfigError(f"catch_up must be an int from 0 to {MAX_CATCH_UP}, got {catch_up!r}")
    if not isinstance(overlap, bool):
        raise ConfigError(f"overlap must be True or False, got {overlap!r}")
    if args is not None and not isinstance(args, Mapping):
        raise ConfigError(f"args must be a mapping of the handler's keyword arguments, got {args!r}")


def check_stacked(task: Any, app: object, name: str | None, options: Mapping[str, Any], scheduled: bool) -> None:
    """``@app.periodic`` over ``@app.task``: that task is scheduled as it is,
    with its own options. Refused, saying how, where the decorators ask for
    something else: options or another name given to ``@app.periodic``, a
    task of another app, or a task that has a schedule already."""
    where = f"@app.periodic over task {task.name!r}"
    if task.app is not app:
        raise ConfigError(f"{where}: the task is registered on another app; stack the decorators of one app")
    if name is not None and name != task.name:
        raise ConfigError(f"{where}: name={name!r} is not the task's name; give the name to @app.task only")
    if options:
        raise ConfigError(f"{where}: {', '.join(sorted(options))} are the task's options: give them to @app.task "
                          "(the task keeps its own), or use @app.periodic alone with them")
    if scheduled:
        raise ConfigError(f"{where}: the task is already scheduled (a schedule is named after its task, so a "
                          "task has one): register another task for another cron")


def schedule_spec(
    task: Any, *, cron: str, timezone: str, args: Mapping[str, Any] | None, catch_up: int, overlap: bool,
    max_payload_bytes: int,
) -> ScheduleSpec:
    """The spec for a registered task (``tether.app.Task``); args must fit its
    handler, and the spec must be one every store can hold (``check_spec``).
    A task with a ``limit_key`` is refused: the database fires a schedule's
    jobs, and they would carry no limit key, so run unlimited."""
    if task.options.limit_key is not None:
        raise ConfigError(f"@app.periodic over task {task.name!r}: its limit_key would not reach the jobs the "
                          "schedule fires (they carry no limit key yet, so no per-key limit would hold them); "
                          "schedule a task without limit_key")
    kwargs = dict(args or {})
    try:
        task.check_args(kwargs)
    except PayloadError as exc:
        raise ConfigError(f"schedule {task.name!r}: {exc}") from None
    o = task.options
    return check_spec(ScheduleSpec(
        name=task.name, cron=cron, timezone=timezone,
        args_json=dump_json(kwargs, f"args of schedule {task.name!r}", max_payload_bytes),
        queue=o.queue, catch_up=catch_up, overlap=overlap, priority=o.priority, max_attempts=o.max_attempts,
        lease_ttl=o.lease_ttl, timeout=o.timeout,
        backoff_base=o.backoff_base,
    ))


def task_tags(tasks: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The tags of the registered tasks (``tether.app.Task``) that have any,
    by name: a schedule has no tags of its own, and the jobs its ticks make
    carry its task's (``@app.task(tags=...)``), as the code of the worker
    that fires them (or of the app that triggers one) declares them."""
    return {name: tuple(t.options.tags) for name, t in tasks.items() if t.options.tags}


def merge_declared(stored: Sequence[ScheduleInfo], declared: Sequence[ScheduleSpec], now: datetime) -> list[ScheduleInfo]:
    """The database's schedules, plus ``declared`` ones that no worker has
    synced yet (nothing fired; the next tick after ``now`` as the cron says)."""
    out = list(stored)
    for spec in declared:
        out.append(ScheduleInfo(
            name=spec.name, cron=spec.cron, timezone=spec.timezone, args=_args(spec.args_json), queue=spec.queue,
            catch_up=spec.catch_up, overlap=spec.overlap, since=None,
            next_tick=parse_cron(spec.cron, spec.timezone).next_after(now), last_tick=None, last_fired=None,
            last_job_id=None, skipped=0, orphaned=False, last_seen=None,
        ))
    return sorted(out, key=lambda s: s.name)


def _args(text: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(text)
    return value
