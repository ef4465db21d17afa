"""The server's schedule operations (I6): the store's own, plus what the
server adds: the cron expression and time zone checked before they are stored
(a ConfigError, 422, quoting them), args re-encoded under the payload cap, and
the jobs a fire made announced on a delivering transport once committed."""

from __future__ import annotations

from typing import Any

from ..config import validate_queue
from ..cron import parse_cron
from ..payload import dump_json
from ..store import Store
from ..store.http import wire_schedules
from ..transport import Transport, announce

__all__ = ["fire_schedules", "list_schedules", "sync_schedules"]


def sync_schedules(store: Store, a: dict[str, Any], max_payload: int) -> dict[str, Any]:
    specs = []
    for x in a["schedules"]:
        parse_cron(x["cron"], x["timezone"])
        args_json = dump_json(x["args"], f"args of schedule {x['name']!r}", max_payload)
        specs.append(wire_schedules.decode_spec({**x, "queue": validate_queue(x["queue"])}, args_json))
    store.sync_schedules(specs, now=a["now"])
    return {}


def fire_schedules(store: Store, transport: Transport | None, a: dict[str, Any]) -> dict[str, Any]:
    fired = store.fire_schedules(a["names"], grace=a["grace"], now=a["now"])
    if transport is not None and transport.delivers:  # committed: announce the jobs (never raises)
        announce(transport, [(t.job_id, t.queue) for t in fired if t.job_id is not None])
    return {"fired": [wire_schedules.encode_fired(t) for t in fired]}


def list_schedules(store: Store, a: dict[str, Any]) -> dict[str, Any]:
    return {"schedules": [wire_schedules.encode_schedule(x) for x in store.list_schedules(now=a["now"])]}
