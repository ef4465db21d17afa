"""Job control on SQLite (issue 20): retention, pause and resume. A mixin of ``SQLiteStore``,
in a module of its own so the store's module stays small; its statements are
in ``queries.sql`` beside it, under "Job control"."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from ...config import check_limits, validate_queue
from ...key_patterns import glob, key_limit_params
from ...model import FINISHED_STATES, JobState, KeyLimits, QueueLimits
from ..base import check_prune

__all__ = ["SQLiteControl", "finished_states_sql"]


def _ages(ages: Mapping[JobState, float], limit: int | None, now: datetime | None) -> dict[str, Any]:
    """prune's and prunable's parameters: the states asked, with their ages, as one JSON object."""
    checked = check_prune(ages, limit)
    return {"ages": json.dumps({str(s): age for s, age in checked.items()}),
            "now": None if now is None else now.timestamp(), "limit": limit}


def finished_states_sql() -> str:
    """The finished states as an SQL list, for queries.sql's {finished_states}."""
    return ", ".join(f"'{s}'" for s in FINISHED_STATES)


class SQLiteControl:
    """Retention, pause and resume for ``SQLiteStore`` (which provides ``q``, ``_all`` and ``_write``)."""

    q: dict[str, str]

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def prune(self, ages: Mapping[JobState, float], limit: int, *, now: datetime | None = None) -> dict[JobState, int]:
        params = _ages(ages, limit, now)
        out: dict[JobState, int] = {}
        with self._write() as conn:
            gone = conn.execute(self.q["prune"], params).fetchall()
            if gone:
                ids = {"ids": json.dumps([r[0] for r in gone])}
                for rows in ("prune_attempts", "prune_steps", "prune_edges", "prune_counts"):
                    conn.execute(self.q[rows], ids)
        for _, state in gone:
            out[JobState(state)] = out.get(JobState(state), 0) + 1
        return out

    def set_paused(self, queue: str, paused: bool, *, now: datetime | None = None) -> None:
        self._all("set_paused", {"queue": validate_queue(queue), "paused": bool(paused),
                                 "now": None if now is None else now.timestamp()})

    def paused_queues(self) -> list[str]:
        return [str(r[0]) for r in self._all("paused_queues")]

    def set_limits(self, limits: QueueLimits, *, now: datetime | None = None) -> None:
        lim = check_limits(limits)
        self._all("set_limits", {"queue": lim.queue, "concurrency": lim.concurrency, "rate_limit": lim.rate_limit,
                                 "rate_period": lim.rate_period, "now": None if now is None else now.timestamp()})

    def queue_limits(self, *, now: datetime | None = None) -> list[QueueLimits]:
        return [QueueLimits(*r) for r in self._all("queue_limits", {"now": None if now is None else now.timestamp()})]

    def prunable(self, ages: Mapping[JobState, float], *, now: datetime | None = None) -> dict[JobState, int]:
        return {JobState(s): int(n) for s, n in self._all("prunable", _ages(ages, None, now))}

    def set_key_limits(self, limits: KeyLimits, *, now: datetime | None = None) -> None:
        params = key_limit_params(limits, glob) | {"now": None if now is None else now.timestamp()}
        with self._write() as conn:
            conn.execute(self.q["drop_key_limits"], params)
            conn.execute(self.q["set_key_limits"], params)

    def key_limits(self, *, now: datetime | None = None) -> list[KeyLimits]:
        return [KeyLimits(*r) for r in self._all("key_limits", {"now": None if now is None else now.timestamp()})]
