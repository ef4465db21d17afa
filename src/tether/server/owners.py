"""Worker identity: a worker token acts only for the workers it registered.

Worker ids are not secret: a job's ``locked_by``, its attempts and the worker
list all show them. Were any worker token allowed to name any worker id, it
could heartbeat, complete, fail or release the jobs another worker holds, and
the fence (id, attempt, worker) would only be as strong as an id is hard to
read. So when a worker token registers a worker, the server records the
token's fingerprint as that worker's owner (the workers table's ``owner``
column), and refuses with 403 every worker operation naming an id the token
did not register: one registered by another token, by an admin token or
straight against the database, or one not registered at all. Admin tokens may
act for any worker.

The binding is in the database, not in this process, so it holds across a
server restart and for every server process behind a load balancer. Once
written it never changes while the row lives (the store sets it on insert
only), so each process caches what it has read, for ``CACHE_TTL`` seconds:
after a worker's first request, checking it is a dict lookup, not a query.
A row does end: the pruner deletes those of workers stopped or silent for
the worker retention (issue 41), after which another token may register the
same id. The cache's entries are read again after ``CACHE_TTL``, far less
than any retention, and a registration reads its id afresh (``forget``), so
no process goes on acting on a binding the database no longer holds. Ids not
registered yet are not cached (another server process may register them
next).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..store import Store

__all__ = ["CACHE_SIZE", "CACHE_TTL", "Refusal", "WorkerOwners"]

#: worker ids whose owner a server process remembers (the oldest are forgotten first)
CACHE_SIZE = 100_000
#: seconds a server process trusts an owner it read (the worker retention is far longer)
CACHE_TTL = 300.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a token may not act for some of the worker ids it named."""

    workers: list[str]
    message: str


class WorkerOwners:
    def __init__(self, store: Store, capacity: int = CACHE_SIZE) -> None:
        self._store = store
        self._capacity = capacity
        #: id -> (owner, when read: monotonic)
        self._known: dict[str, tuple[str | None, float]] = {}
        self._lock = threading.Lock()

    def cached(self, owner: str, worker_ids: Sequence[str]) -> bool:
        """True when the cache alone shows that ``owner`` registered every one
        of these workers (no query; the event loop may call it)."""
        with self._lock:
            fresh = self._fresh(worker_ids)
        return len(fresh) == len(set(worker_ids)) and all(o == owner for o in fresh.values())

    def check(self, owner: str, worker_ids: Sequence[str]) -> Refusal | None:
        """None if ``owner`` registered every one of these workers, else why
        not. Reads the database for ids the cache does not hold."""
        with self._lock:
            known = self._fresh(worker_ids)
        missing = [i for i in dict.fromkeys(worker_ids) if i not in known]
        if missing:
            found = self._store.worker_owners(missing)
            self._remember(found)
            known.update(found)
        unregistered = [i for i in dict.fromkeys(worker_ids) if i not in known]
        foreign = [i for i in dict.fromkeys(worker_ids) if i in known and known[i] != owner]
        if unregistered:
            return Refusal(unregistered, f"{_names(unregistered)} not registered: a worker token acts only for "
                                         "the workers it registered itself (POST /v1/workers), once it has")
        if foreign:
            return Refusal(foreign, f"{_names(foreign)} registered by another token (or by an admin token, or "
                                    "straight against the database); a worker token acts only for the workers "
                                    "it registered itself")
        return None

    def forget(self, worker_ids: Sequence[str] | None = None) -> None:
        """Drop these ids from the cache (a registration: read the binding
        afresh), or all of it (after ``destroy``: the bindings went with the tables)."""
        with self._lock:
            if worker_ids is None:
                self._known.clear()
            for i in worker_ids or ():
                self._known.pop(i, None)

    def _fresh(self, worker_ids: Sequence[str]) -> dict[str, str | None]:
        """The cached owners of these ids read less than CACHE_TTL ago (under the lock)."""
        cutoff = time.monotonic() - CACHE_TTL
        return {i: self._known[i][0] for i in worker_ids if i in self._known and self._known[i][1] > cutoff}

    def _remember(self, found: dict[str, str | None]) -> None:
        now = time.monotonic()
        with self._lock:
            for i, owner in found.items():
                self._known.pop(i, None)  # re-inserted last: the oldest reads are dropped first
                self._known[i] = (owner, now)
            while len(self._known) > self._capacity:
                del self._known[next(iter(self._known))]


def _names(ids: list[str]) -> str:
    """``worker 'a' is`` or ``workers 'a', 'b' are``, at most five named."""
    shown = ", ".join(repr(i) for i in ids[:5]) + (f" (and {len(ids) - 5} more)" if len(ids) > 5 else "")
    return f"worker {shown} is" if len(ids) == 1 else f"workers {shown} are"
