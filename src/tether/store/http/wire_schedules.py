"""The JSON form of the schedule records (I6) on the HTTP API; their schemas
and operations are in ``wire.py`` beside the others."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ...model import FiredTick, ScheduleInfo, ScheduleSpec

__all__ = ["decode_fired", "decode_schedule", "decode_spec", "encode_fired", "encode_schedule", "encode_spec"]


def _dt(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def encode_spec(s: ScheduleSpec) -> dict[str, Any]:
    return {"name": s.name, "cron": s.cron, "timezone": s.timezone, "args": json.loads(s.args_json),
            "queue": s.queue, "catch_up": s.catch_up, "overlap": s.overlap, "priority": s.priority,
            "max_attempts": s.max_attempts, "lease_ttl": s.lease_ttl, "timeout": s.timeout,
            "backoff_base": s.backoff_base}


def decode_spec(d: dict[str, Any], args_json: str) -> ScheduleSpec:
    """``args_json``: the args as the server re-encoded them (under its payload cap)."""
    return ScheduleSpec(name=d["name"], cron=d["cron"], timezone=d["timezone"], args_json=args_json,
                        queue=d["queue"], catch_up=d["catch_up"], overlap=d["overlap"], priority=d["priority"],
                        max_attempts=d["max_attempts"], lease_ttl=d["lease_ttl"], timeout=d["timeout"],
                        backoff_base=d["backoff_base"])


def encode_schedule(s: ScheduleInfo) -> dict[str, Any]:
    return {"name": s.name, "cron": s.cron, "timezone": s.timezone, "args": s.args, "queue": s.queue,
            "catch_up": s.catch_up, "overlap": s.overlap, "since": _dt(s.since), "next_tick": _dt(s.next_tick),
            "last_tick": _dt(s.last_tick), "last_fired": _dt(s.last_fired), "last_job_id": s.last_job_id,
            "skipped": s.skipped, "orphaned": s.orphaned, "last_seen": _dt(s.last_seen)}


def decode_schedule(d: dict[str, Any]) -> ScheduleInfo:
    return ScheduleInfo(name=d["name"], cron=d["cron"], timezone=d["timezone"], args=d["args"], queue=d["queue"],
                        catch_up=d["catch_up"], overlap=d["overlap"], since=_parse_dt(d["since"]),
                        next_tick=_parse_dt(d["next_tick"]), last_tick=_parse_dt(d["last_tick"]),
                        last_fired=_parse_dt(d["last_fired"]), last_job_id=d["last_job_id"], skipped=d["skipped"],
                        orphaned=d["orphaned"], last_seen=_parse_dt(d["last_seen"]))


def encode_fired(t: FiredTick) -> dict[str, Any]:
    return {"schedule": t.schedule, "tick": t.tick.isoformat(), "job_id": t.job_id, "queue": t.queue}


def decode_fired(d: dict[str, Any]) -> FiredTick:
    return FiredTick(schedule=d["schedule"], tick=datetime.fromisoformat(d["tick"]), job_id=d["job_id"],
                     queue=d["queue"])
