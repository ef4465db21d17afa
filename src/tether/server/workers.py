"""Workers on a tether server: registering one (which binds it to the
registering token: ``owners``), and what a worker token may do with workers
(issue 41, where one token registered 10,000 workers in 16 s):

- how many workers' rows it may have (``per_token``): at the cap, its own
  rows of workers stopped or silent for a minute are deleted to make room
  (a crash-looping fleet keeps registering), and only when its live
  workers fill the cap is the registration refused (403 too_many_workers);
- how many live workers a queue may have (``live_per_queue``);
- how short a grace it may bury unknown tasks with (``min_bury_grace``:
  below it, only an admin token may).

The caps are checked before the registration is written, not in one
statement with it: registrations racing each other may pass a cap by a few.
A re-registration of one of the token's own workers is never refused.

Admin tokens are trusted with the database as a whole and pass every check
here; a producer token cannot call these operations at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import validate_queue
from ..errors import ConfigError
from ..model import LIVE_WITHIN, WorkerInfo
from ..store import Store
from ..store.http import wire_unknown
from ..store.worker_rows import DEFAULT_LIVE_WORKERS_PER_QUEUE, DEFAULT_WORKERS_PER_TOKEN
from ..worker.unknown import DEFAULT_UNKNOWN_TASK_GRACE
from .owners import WorkerOwners
from .requests import ApiError, Args

__all__ = ["DEFAULT_LIVE_WORKERS_PER_QUEUE", "DEFAULT_WORKERS_PER_TOKEN", "WorkerPolicy", "bury_unknown",
           "check_owner", "register"]

#: at a token's cap, its rows of workers stopped or silent this long are deleted to make room
EVICT_AFTER = LIVE_WITHIN


@dataclass(frozen=True, slots=True)
class WorkerPolicy:
    #: the shortest ``grace`` a worker token may pass to bury-unknown (an admin
    #: token may pass any): a worker token could otherwise end every due job
    #: of a task no worker knows yet, on any queue, the moment it is enqueued
    min_bury_grace: float = DEFAULT_UNKNOWN_TASK_GRACE
    #: workers' rows one worker token may have (None: no cap)
    per_token: int | None = DEFAULT_WORKERS_PER_TOKEN
    #: live workers a queue may have, registered by worker tokens (None: no cap)
    live_per_queue: int | None = DEFAULT_LIVE_WORKERS_PER_QUEUE

    def __post_init__(self) -> None:
        g = self.min_bury_grace
        if isinstance(g, bool) or not isinstance(g, int | float) or not math.isfinite(g) or g < 0:
            raise ConfigError(f"min_bury_grace must be a finite number of seconds >= 0, got {g!r}")
        for name in ("per_token", "live_per_queue"):
            n = getattr(self, name)
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise ConfigError(f"{name} must be an int >= 1 or None (no cap), got {n!r}")


def register(store: Store, owners: WorkerOwners, policy: WorkerPolicy, a: Args) -> Args:
    """A worker token's registration records it as the worker's owner, or, for
    an id someone else registered, changes nothing: reading the owner back
    tells which (one statement each; the binding is never updated). The
    store refuses an id or host that would display as another's
    (``naming.check_worker_identity``)."""
    owner = a["owner"]
    if owner is not None and store.worker_owners([a["id"]]).get(a["id"], "") != owner:  # a new worker
        _check_caps(store, owners, policy, owner, a["queues"])
    owners.forget([a["id"]])  # its binding is read afresh below: a pruned id may have been registered anew
    store.register_worker(WorkerInfo(
        id=a["id"], host=a["host"], pid=a["pid"], proc_start=a["proc_start"], started_at=None,  # type: ignore[arg-type]
        last_seen=None, queues=[validate_queue(q) for q in a["queues"]], concurrency=a["concurrency"],  # type: ignore[arg-type]
        tasks=a.get("tasks"),
    ), owner=a["owner"])
    if a["owner"] is not None:
        check_owner(owners, a["owner"], [a["id"]])
    return {}


def _check_caps(store: Store, owners: WorkerOwners, policy: WorkerPolicy, owner: str, queues: list[str]) -> None:
    if policy.per_token is not None:
        have = store.count_workers(owner=owner)
        if have >= policy.per_token:
            owners.forget(store.prune_workers(EVICT_AFTER, have - policy.per_token + 1, owner=owner))
            have = store.count_workers(owner=owner)
        if have >= policy.per_token:
            raise ApiError(403, "too_many_workers",
                           f"this token has {have} live workers registered, the most this server allows one "
                           f"token (tether server --max-workers-per-token {policy.per_token}); stop some first")
    if policy.live_per_queue is not None:
        for queue in dict.fromkeys(queues):
            live = store.count_workers(queue=queue, live_only=True)
            if live >= policy.live_per_queue:
                raise ApiError(403, "too_many_workers",
                               f"queue {queue!r} has {live} live workers, the most this server allows a queue "
                               f"(tether server --max-live-workers-per-queue {policy.live_per_queue})")


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
