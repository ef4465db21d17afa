"""The server's schedule operations (I6): the store's own, plus what the
server adds: the cron expression and time zone checked before they are stored
(a ConfigError, 422, quoting them), args re-encoded under the payload cap, and
the jobs a fire made announced on a delivering transport once committed."""

from __future__ import annotations

from typing import Any

from ..config import validate_queue
from ..cron import parse_cron
from ..model import FiredTick, ScheduleSpec
from ..payload import dump_json
from ..store import Store
from ..store.http import wire_schedules
from ..transport import Transport, announce

__all__ = ["add_schedule", "fire_schedules", "list_schedules", "remove_schedule", "set_paused", "sync_schedules",
           "trigger_schedule"]


def _spec(x: dict[str, Any], max_payload: int) -> ScheduleSpec:
    parse_cron(x["cron"], x["timezone"])
    args_json = dump_json(x["args"], f"args of schedule {x['name']!r}", max_payload)
    return wire_schedules.decode_spec({**x, "queue": validate_queue(x["queue"])}, args_json)


def sync_schedules(store: Store, a: dict[str, Any], max_payload: int) -> dict[str, Any]:
    store.sync_schedules([_spec(x, max_payload) for x in a["schedules"]], now=a["now"])
    return {}


def _announce(transport: Transport | None, fired: list[FiredTick]) -> None:
    if transport is not None and transport.delivers:  # committed: announce the jobs (never raises)
        announce(transport, [(t.job_id, t.queue) for t in fired if t.job_id is not None])


def fire_schedules(store: Store, transport: Transport | None, a: dict[str, Any]) -> dict[str, Any]:
    fired = store.fire_schedules(a["names"], grace=a["grace"], now=a["now"], tasks=a.get("tasks", ()),
                                 tags=a.get("tags"))
    _announce(transport, fired)
    return {"fired": [wire_schedules.encode_fired(t) for t in fired]}


def add_schedule(store: Store, a: dict[str, Any], max_payload: int) -> dict[str, Any]:
    """The client checked the task and the args against its handler (the
    server has no handlers); the cron, time zone, queue and payload cap are
    checked again here."""
    store.add_schedule(_spec(a, max_payload), now=a["now"])
    return {}


def trigger_schedule(store: Store, transport: Transport | None, a: dict[str, Any]) -> dict[str, Any]:
    fired = store.trigger_schedule(a["name"], now=a["now"], tags=a.get("tags"))
    _announce(transport, [fired])
    return wire_schedules.encode_fired(fired)


def list_schedules(store: Store, a: dict[str, Any]) -> dict[str, Any]:
    return {"schedules": [wire_schedules.encode_schedule(x) for x in store.list_schedules(now=a["now"])]}


def set_paused(store: Store, a: dict[str, Any]) -> dict[str, Any]:
    store.set_schedule_paused(a["name"], a["paused"], now=a["now"])
    return {}


def remove_schedule(store: Store, a: dict[str, Any]) -> dict[str, Any]:
    store.remove_schedule(a["name"], now=a["now"])
    return {}
