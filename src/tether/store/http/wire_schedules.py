"""The JSON form of the schedule records (I6) on the HTTP API; their schemas
and operations are in ``wire.py`` beside the others."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ...model import FiredTick, ScheduleInfo, ScheduleSpec
from .schema import Schema, array, boolean, integer, number, obj, string
from .wire_many import TAGS
from .wire_unknown import TASK_NAME

__all__ = ["FIRE_BODY", "control_ops", "decode_fired", "decode_schedule", "decode_spec", "encode_fired",
           "encode_schedule", "encode_spec", "with_control", "with_task"]


#: the tags of the caller's tasks by name, for the jobs their schedules fire
#: (store/schedules.py TaskTags; optional: a client older than them sends none,
#: and a client sends it only when a task has tags)
TASK_TAGS: Schema = {"type": "object", "propertyNames": TASK_NAME, "additionalProperties": TAGS}
#: fire_schedules' body: code schedules by name, dynamic ones by the tasks the worker runs (optional, so
#: a worker older than dynamic schedules is served as before)
FIRE_BODY = obj({"names": array(TASK_NAME, 10_000), "grace": number(0, 1e6, exclusive_min=True),
                 "tasks": array(TASK_NAME, 10_000), "tags": TASK_TAGS}, optional=("tasks", "tags"))
#: a schedule's name (a dynamic one's is any printable text; schedule_control.py)
SCHEDULE_NAME = string(200, 1)


def with_control(record: Schema) -> Schema:
    """The schedule record with what run-time management adds (optional: an older server leaves it out)."""
    props = {**record["properties"], "task": string(1000), "dynamic": boolean(), "paused": boolean(),
             "triggered": integer(0), "last_triggered": record["properties"]["last_seen"]}  # a nullable time
    return obj(props, optional=tuple(k for k in props if k not in record["required"]))


def with_task(fired: Schema) -> Schema:
    """The fired-tick record with the task its job runs (optional: an older server leaves it out)."""
    return obj({**fired["properties"], "task": string(1000)}, optional=("task",))


def control_ops(spec: Schema, fired: Schema) -> list[dict[str, Any]]:
    """The operations of schedules managed at run time (issue 44), as ``wire.Op`` keyword arguments.
    Producer scope, as a sync's: a schedule makes jobs."""
    name = obj({"name": SCHEDULE_NAME})
    trigger = obj({"name": SCHEDULE_NAME, "tags": TASK_TAGS}, optional=("tags",))
    add = obj({**spec["properties"], "name": SCHEDULE_NAME, "task": TASK_NAME})
    return [dict(name=n, method="POST", path=f"/v1/schedules/{p}", scopes=("producer",), summary=d, response=r,
                 body=b, takes_now=True, errors=e) for n, p, d, r, b, e in [
        ("add_schedule", "add", "Add a dynamic schedule: each tick of its cron becomes one job of its task, fired "
         "by the workers that run that task, from its next tick on (422, nothing written, for a bad cron, time "
         "zone or args, or a name already taken)", obj({}), add, (422,)),
        ("set_schedule_paused", "pause", "Pause a schedule (its ticks are not fired) or resume it at its next "
         "tick (the ticks missed while paused are not caught up)", obj({}),
         obj({"name": SCHEDULE_NAME, "paused": boolean()}), (404,)),
        ("remove_schedule", "remove", "Delete a dynamic schedule (422 for a schedule declared in code: pause it "
         "instead)", obj({}), name, (404, 422)),
        ("trigger_schedule", "trigger", "Fire one job of a schedule now, recorded as a manual tick (paused or "
         "not), with its task's tags from `tags`", fired, trigger, (404, 422)),
    ]]


def _dt(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def encode_spec(s: ScheduleSpec) -> dict[str, Any]:
    return {"name": s.name, "cron": s.cron, "timezone": s.timezone, "args": json.loads(s.args_json),
            "queue": s.queue, "catch_up": s.catch_up, "overlap": s.overlap, "priority": s.priority,
            "max_attempts": s.max_attempts, "lease_ttl": s.lease_ttl, "timeout": s.timeout,
            "backoff_base": s.backoff_base, **({} if s.task is None else {"task": s.task})}


def decode_spec(d: dict[str, Any], args_json: str) -> ScheduleSpec:
    """``args_json``: the args as the server re-encoded them (under its payload cap)."""
    return ScheduleSpec(name=d["name"], cron=d["cron"], timezone=d["timezone"], args_json=args_json,
                        queue=d["queue"], catch_up=d["catch_up"], overlap=d["overlap"], priority=d["priority"],
                        max_attempts=d["max_attempts"], lease_ttl=d["lease_ttl"], timeout=d["timeout"],
                        backoff_base=d["backoff_base"], task=d.get("task"))


def encode_schedule(s: ScheduleInfo) -> dict[str, Any]:
    return {"name": s.name, "cron": s.cron, "timezone": s.timezone, "args": s.args, "queue": s.queue,
            "catch_up": s.catch_up, "overlap": s.overlap, "since": _dt(s.since), "next_tick": _dt(s.next_tick),
            "last_tick": _dt(s.last_tick), "last_fired": _dt(s.last_fired), "last_job_id": s.last_job_id,
            "skipped": s.skipped, "orphaned": s.orphaned, "last_seen": _dt(s.last_seen), "task": s.task,
            "dynamic": s.dynamic, "paused": s.paused, "triggered": s.triggered,
            "last_triggered": _dt(s.last_triggered)}


def decode_schedule(d: dict[str, Any]) -> ScheduleInfo:
    return ScheduleInfo(name=d["name"], cron=d["cron"], timezone=d["timezone"], args=d["args"], queue=d["queue"],
                        catch_up=d["catch_up"], overlap=d["overlap"], since=_parse_dt(d["since"]),
                        next_tick=_parse_dt(d["next_tick"]), last_tick=_parse_dt(d["last_tick"]),
                        last_fired=_parse_dt(d["last_fired"]), last_job_id=d["last_job_id"], skipped=d["skipped"],
                        orphaned=d["orphaned"], last_seen=_parse_dt(d["last_seen"]),
                        task=d.get("task") or d["name"], dynamic=d.get("dynamic", False),
                        paused=d.get("paused", False), triggered=d.get("triggered", 0),
                        last_triggered=_parse_dt(d.get("last_triggered")))


def encode_fired(t: FiredTick) -> dict[str, Any]:
    return {"schedule": t.schedule, "tick": t.tick.isoformat(), "job_id": t.job_id, "queue": t.queue, "task": t.task}


def decode_fired(d: dict[str, Any]) -> FiredTick:
    return FiredTick(schedule=d["schedule"], tick=datetime.fromisoformat(d["tick"]), job_id=d["job_id"],
                     queue=d["queue"], task=d.get("task", ""))
