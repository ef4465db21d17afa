"""Workers on a tether server: registering one (which binds it to the
registering token: ``owners``), and what a worker token may do with workers
(issue 41): how short a grace it may bury unknown tasks with
(``min_bury_grace``: below it, only an admin token may).

Admin tokens are trusted with the database as a whole and pass every check
here; a producer token cannot call these operations at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import validate_queue
from ..errors import ConfigError
from ..model import WorkerInfo
from ..store import Store
from ..store.http import wire_unknown
from ..worker.unknown import DEFAULT_UNKNOWN_TASK_GRACE
from .owners import WorkerOwners
from .requests import ApiError, Args

__all__ = ["WorkerPolicy", "bury_unknown", "check_owner", "register"]


@dataclass(frozen=True, slots=True)
class WorkerPolicy:
    #: the shortest ``grace`` a worker token may pass to bury-unknown (an admin
    #: token may pass any): a worker token could otherwise end every due job
    #: of a task no worker knows yet, on any queue, the moment it is enqueued
    min_bury_grace: float = DEFAULT_UNKNOWN_TASK_GRACE

    def __post_init__(self) -> None:
        g = self.min_bury_grace
        if isinstance(g, bool) or not isinstance(g, int | float) or not math.isfinite(g) or g < 0:
            raise ConfigError(f"min_bury_grace must be a finite number of seconds >= 0, got {g!r}")


def register(store: Store, owners: WorkerOwners, policy: WorkerPolicy, a: Args) -> Args:
    """A worker token's registration records it as the worker's owner, or, for
    an id someone else registered, changes nothing: reading the owner back
    tells which (one statement each; the binding is never updated). The
    store refuses an id or host that would display as another's
    (``naming.check_worker_identity``)."""
    store.register_worker(WorkerInfo(
        id=a["id"], host=a["host"], pid=a["pid"], proc_start=a["proc_start"], started_at=None,  # type: ignore[arg-type]
        last_seen=None, queues=[validate_queue(q) for q in a["queues"]], concurrency=a["concurrency"],  # type: ignore[arg-type]
        tasks=a.get("tasks"),
    ), owner=a["owner"])
    if a["owner"] is not None:
        check_owner(owners, a["owner"], [a["id"]])
    return {}


def check_owner(owners: WorkerOwners, owner: str, worker_ids: list[str]) -> None:
    refusal = owners.check(owner, worker_ids)
    if refusal is not None:
        raise ApiError(403, "not_your_worker", refusal.message, workers=refusal.workers)


def bury_unknown(store: Store, policy: WorkerPolicy, a: Args) -> Args:
    """A worker token's bury-unknown with a grace below the policy's is refused
    (``owner`` None: an admin token)."""
    if a["owner"] is not None and a["grace"] < policy.min_bury_grace:
        raise ApiError(403, "forbidden", f"bury_unknown with a grace below {policy.min_bury_grace:g}s needs a "
                                         f"token with scope admin (got grace={a['grace']:g}); a worker token may "
                                         "bury only what no worker has known for the server's grace")
    buried = store.bury_unknown(a["queues"], grace=a["grace"], limit=a["limit"], now=a["now"])
    return {"buried": [wire_unknown.encode_buried(b) for b in buried]}
