"""Job control on PostgreSQL (issue 20): retention, pause and resume. A mixin of
``PostgresStore``, in a module of its own so the store's module stays small;
its statements are in ``queries.sql`` beside it, under "Job control"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...config import check_limits, validate_queue
from ...key_patterns import key_limit_params, like
from ...model import LIVE_WITHIN, Buried, JobState, KeyLimits, QueueLimits, UnknownTaskJobs
from ..base import check_prune

__all__ = ["WATCH_MAX", "PostgresControl"]

#: the longest a waiter's registration lasts (seconds): a row whose process
#: died is ignored after this, and deleted by the next registration
WATCH_MAX = 86_400.0


def _ages(ages: Mapping[JobState, float], limit: int | None, now: datetime | None) -> dict[str, Any]:
    checked = check_prune(ages, limit)
    return {"states": [str(s) for s in checked], "ages": list(checked.values()), "limit": limit, "now": now}


class PostgresControl:
    """Retention, pause and resume, and waiters, for ``PostgresStore`` (which provides ``_all``)."""

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def prune(self, ages: Mapping[JobState, float], limit: int, *, now: datetime | None = None) -> dict[JobState, int]:
        return {JobState(s): int(n) for s, n in self._all("prune", _ages(ages, limit, now))}

    # -- jobs no worker knows (see bury_unknown in queries.sql) -------------------
    def unknown_tasks(self, *, since: float = LIVE_WITHIN, now: datetime | None = None) -> list[UnknownTaskJobs]:
        return [UnknownTaskJobs(queue=q, task=t, jobs=n, oldest=o)
                for q, t, n, o in self._all("unknown_tasks", {"since": since, "now": now})]

    def bury_unknown(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[Buried]:
        rows = self._all("bury_unknown", {"queues": list(queues), "since": grace, "limit": limit, "now": now})
        return [Buried(id=r[0], queue=r[1], task=r[2], error=r[3]) for r in rows]

    def expire(self, worker: str, *, limit: int, now: datetime | None = None) -> list[Buried]:
        rows = self._all("expire", {"worker": worker, "limit": limit, "now": now})
        return [Buried(id=r[0], queue=r[1], task=r[2], error=r[3]) for r in rows]

    def set_paused(self, queue: str, paused: bool, *, now: datetime | None = None) -> None:
        self._all("set_paused", {"queue": validate_queue(queue), "paused": bool(paused), "now": now})

    def paused_queues(self) -> list[str]:
        return [str(r[0]) for r in self._all("paused_queues")]

    def set_limits(self, limits: QueueLimits, *, now: datetime | None = None) -> None:
        lim = check_limits(limits)
        self._all("set_limits", {"queue": lim.queue, "concurrency": lim.concurrency, "rate_limit": lim.rate_limit,
                                 "rate_period": lim.rate_period, "now": now})

    def queue_limits(self, *, now: datetime | None = None) -> list[QueueLimits]:
        return [QueueLimits(*r) for r in self._all("queue_limits", {"now": now})]

    def set_key_limits(self, limits: KeyLimits, *, now: datetime | None = None) -> None:
        self._all("set_key_limits", key_limit_params(limits, like) | {"now": now})

    def key_limits(self, *, now: datetime | None = None) -> list[KeyLimits]:
        return [KeyLimits(*r) for r in self._all("key_limits", {"now": now})]

    def watch_finished(self, job_id: int, seconds: float) -> int | None:
        # bounded: a wait without a deadline registers for a day (0008_waiters.sql)
        return int(self._all("watch_finished", {"job_id": job_id, "seconds": min(float(seconds), WATCH_MAX)})[0][0])

    def unwatch_finished(self, token: int) -> None:
        self._all("unwatch_finished", {"id": token})

    def prunable(self, ages: Mapping[JobState, float], *, now: datetime | None = None) -> dict[JobState, int]:
        return {JobState(s): int(n) for s, n in self._all("prunable", _ages(ages, None, now))}
