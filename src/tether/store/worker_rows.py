"""The workers' rows a store keeps (a part of the ``Store`` interface, in a
module of its own so ``base.py`` stays small): registering and stopping
workers, reading them a page at a time, counting them, and pruning the rows
of workers long stopped or long silent (issue 41: one token registered
10,000 workers, rows were never deleted, and every list of them grew without
end)."""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..model import LIVE_WITHIN, WorkerInfo
from ..naming import check_worker_identity

__all__ = ["DEFAULT_LIVE_WORKERS_PER_QUEUE", "DEFAULT_WORKERS_PER_TOKEN", "DEFAULT_WORKER_RETENTION", "WORKERS_PAGE",
           "WorkerRows", "registration"]

#: how long the row of a stopped worker, or of one silent that long (killed),
#: is kept before the pruner deletes it: its attempts keep its id regardless
DEFAULT_WORKER_RETENTION = 7 * 86400.0
#: workers per page of the dashboard, and the most a server lists at once
WORKERS_PAGE = 100
#: a tether server's caps (``server/workers.py``): workers' rows one worker
#: token may have (a fleet of a few hundred workers restarting several times a
#: day stays well under it), and live workers (not stopped, seen in the last
#: LIVE_WITHIN seconds) one queue may have
DEFAULT_WORKERS_PER_TOKEN = 1000
DEFAULT_LIVE_WORKERS_PER_QUEUE = 1000


def registration(info: WorkerInfo, owner: str | None) -> dict[str, Any]:
    """``register_worker``'s parameters (both backends), once its id and host
    are checked: one that would display as another's raises ConfigError."""
    check_worker_identity(info.id, info.host)
    return {"id": info.id, "host": info.host, "pid": info.pid, "proc_start": info.proc_start,
            "queues": json.dumps(info.queues), "concurrency": info.concurrency, "owner": owner, "now": None,
            "tasks": None if info.tasks is None else json.dumps(sorted(info.tasks))}


class WorkerRows(abc.ABC):
    @abc.abstractmethod
    def register_worker(self, info: WorkerInfo, *, owner: str | None = None) -> None:
        """Register (or re-register) a worker. ``owner``: a tether server's
        fingerprint of the token registering it, recorded with a new worker;
        an id already registered is refreshed only for the same owner (or for
        ``owner=None``, a trusted caller) and is otherwise left as it is:
        ``worker_owners`` tells the server which happened. ConfigError for an
        id or host that would display as another's
        (``naming.check_worker_identity``)."""

    @abc.abstractmethod
    def worker_owners(self, worker_ids: Sequence[str]) -> dict[str, str | None]:
        """The owner recorded for each of these workers that is registered
        (None: registered without one); unregistered ids are missing."""

    @abc.abstractmethod
    def stop_worker(self, worker_id: str, *, now: datetime | None = None) -> None: ...

    @abc.abstractmethod
    def list_workers(self, *, host: str | None = None, live_only: bool = False) -> list[WorkerInfo]:
        """Every worker's row (of one host; not stopped): for a worker's own
        checks. Pages and counts are ``workers_page`` and ``count_workers``."""

    @abc.abstractmethod
    def workers_page(self, *, limit: int = WORKERS_PAGE, offset: int = 0, live_only: bool = False,
                     host: str | None = None) -> list[WorkerInfo]:
        """One page of workers: those not stopped first, the most recently seen first."""

    @abc.abstractmethod
    def count_workers(self, *, owner: str | None = None, queue: str | None = None, live_only: bool = False,
                      since: float = LIVE_WITHIN, now: datetime | None = None) -> int:
        """How many workers' rows: of ``owner`` (a server's fingerprint of a
        token), serving ``queue``, only live ones (not stopped and seen in the
        last ``since`` seconds), or all of them."""

    @abc.abstractmethod
    def prune_workers(self, age: float, limit: int, *, owner: str | None = None,
                      now: datetime | None = None) -> list[str]:
        """Delete the rows of workers stopped ``age`` seconds ago or more, or
        never stopped and silent that long, the oldest first, at most
        ``limit``; of ``owner``'s only when given. The ids deleted."""
