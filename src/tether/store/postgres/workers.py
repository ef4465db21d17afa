"""Workers' rows on PostgreSQL (``store/worker_rows.py``): a mixin of
``PostgresStore``, in a module of its own so the store's module stays small;
its statements are in ``queries.sql`` beside it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...model import LIVE_WITHIN, WorkerInfo
from ..rows import worker_from_row
from ..worker_rows import WORKERS_PAGE, registration

__all__ = ["PostgresWorkers"]


class PostgresWorkers:
    """For ``PostgresStore`` (which provides ``_all``)."""

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def register_worker(self, info: WorkerInfo, *, owner: str | None = None) -> None:
        self._all("register_worker", registration(info, owner))

    def worker_owners(self, worker_ids: Sequence[str]) -> dict[str, str | None]:
        if not worker_ids:
            return {}
        return {r[0]: r[1] for r in self._all("worker_owners", {"ids": list(worker_ids)})}

    def stop_worker(self, worker_id: str, *, now: datetime | None = None) -> None:
        self._all("stop_worker", {"id": worker_id, "now": now})

    def list_workers(self, *, host: str | None = None, live_only: bool = False) -> list[WorkerInfo]:
        rows = self._all("list_workers", {"host": host, "live_only": live_only})
        return [worker_from_row(r) for r in rows]

    def workers_page(self, *, limit: int = WORKERS_PAGE, offset: int = 0, live_only: bool = False,
                     host: str | None = None) -> list[WorkerInfo]:
        rows = self._all("list_workers_page", {"host": host, "live_only": live_only, "limit": int(limit),
                                               "offset": int(offset)})
        return [worker_from_row(r) for r in rows]

    def count_workers(self, *, owner: str | None = None, queue: str | None = None, live_only: bool = False,
                      since: float = LIVE_WITHIN, now: datetime | None = None) -> int:
        return int(self._all("count_workers", {"owner": owner, "queue": queue, "live_only": live_only,
                                               "since": float(since), "now": now})[0][0])

    def prune_workers(self, age: float, limit: int, *, owner: str | None = None,
                      now: datetime | None = None) -> list[str]:
        rows = self._all("prune_workers", {"age": float(age), "limit": int(limit), "owner": owner, "now": now})
        return [str(r[0]) for r in rows]
