"""The server's operations for operators and workers' upkeep: the reaper and
lapsed leases, workers (registration, unknown tasks, stopping, listing),
the schema, pruning, paused queues and limits, and schedules.

Built with ``services`` (``tether server``: the pruner, for its ``--retention``),
the server also runs each on its timer while it serves (``duties``): the
database's own upkeep, done where its credentials are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..model import LIVE_WITHIN, JobState, KeyLimits, QueueLimits
from ..store.http import wire, wire_unknown
from ..store.worker_rows import WORKERS_PAGE
from . import schedules, workers
from .context import Args, Server

__all__ = ["CONTROL"]


def _limits(a: Args) -> QueueLimits:
    """set_limits' body as the store takes it (JSON's 5.0 is the integer 5 here)."""
    rate = a["rate"]
    return QueueLimits(a["queue"], None if a["concurrency"] is None else int(a["concurrency"]),
                       None if rate is None else int(rate["count"]), None if rate is None else float(rate["period"]))


def _key_limits(a: Args) -> KeyLimits:
    """set_key_limits' body as the store takes it."""
    rate = a["rate"]
    return KeyLimits(a["pattern"], None if a["concurrency"] is None else int(a["concurrency"]),
                     None if rate is None else int(rate["count"]), None if rate is None else float(rate["period"]))


def _destroy(s: Server, a: Args) -> Args:
    s.store.destroy()
    s.owners.forget()
    return {}


def _ages(a: Args) -> dict[JobState, float]:
    return {JobState(k): v for k, v in a["ages"].items()}


def _counts(found: dict[JobState, int]) -> Args:
    return {str(k): v for k, v in found.items()}


CONTROL: dict[str, Callable[[Server, Args], Args]] = {
    "reap": lambda s, a: {"reaped": [wire.encode_reaped(r) for r in s.store.reap(a["limit"], now=a["now"])]},
    "expire_leases": lambda s, a: {"expired": s.store.lapse_leases(a["workers"], now=a["now"])},
    "register_worker": lambda s, a: workers.register(s.store, s.owners, s.workers, a),
    "unknown_tasks": lambda s, a: {"unknown": [wire_unknown.encode_unknown(u) for u in s.store.unknown_tasks(
        since=a.get("since", LIVE_WITHIN), now=a["now"])]},
    "bury_unknown": lambda s, a: workers.bury_unknown(s.store, s.workers, a),
    "stop_worker": lambda s, a: s.store.stop_worker(a["worker"], now=a["now"]) or {},
    "list_workers": lambda s, a: {"workers": [wire.encode_worker(w) for w in s.store.list_workers(
        host=a.get("host"), live_only=a.get("live_only", False))]},
    "workers_page": lambda s, a: {"workers": [wire.encode_worker(w) for w in s.store.workers_page(
        limit=a.get("limit", WORKERS_PAGE), offset=a.get("offset", 0), live_only=a.get("live_only", False),
        host=a.get("host"))]},
    "db_now": lambda s, a: {"now": s.store.db_now().isoformat()},
    "check_schema": lambda s, a: s.store.check_schema() or {},
    "prune": lambda s, a: {"pruned": _counts(s.store.prune(_ages(a), a["limit"], now=a["now"]))},
    "set_paused": lambda s, a: s.store.set_paused(a["queue"], a["paused"], now=a["now"]) or {},
    "paused_queues": lambda s, a: {"queues": s.store.paused_queues()},
    "set_limits": lambda s, a: s.store.set_limits(_limits(a), now=a["now"]) or {},
    "queue_limits": lambda s, a: {"limits": [dataclasses.asdict(q) for q in s.store.queue_limits(now=a["now"])]},
    "set_key_limits": lambda s, a: s.store.set_key_limits(_key_limits(a), now=a["now"]) or {},
    "key_limits": lambda s, a: {"limits": [dataclasses.asdict(k) for k in s.store.key_limits(now=a["now"])]},
    "prunable": lambda s, a: {"pruned": _counts(s.store.prunable(_ages(a), now=a["now"]))},
    "migrate": lambda s, a: {"applied": s.store.migrate()},
    "schema_objects": lambda s, a: {"objects": s.store.schema_objects()},
    "integrity_check": lambda s, a: {"problems": s.store.integrity_check()},
    "destroy": _destroy,
    "sync_schedules": lambda s, a: schedules.sync_schedules(s.store, a, s.max_payload),
    "fire_schedules": lambda s, a: schedules.fire_schedules(s.store, s.transport, a),
    "list_schedules": lambda s, a: schedules.list_schedules(s.store, a),
    "add_schedule": lambda s, a: schedules.add_schedule(s.store, a, s.max_payload),
    "set_schedule_paused": lambda s, a: schedules.set_paused(s.store, a),
    "remove_schedule": lambda s, a: schedules.remove_schedule(s.store, a),
    "trigger_schedule": lambda s, a: schedules.trigger_schedule(s.store, s.transport, a),
}
