"""The reaper: runs on every worker; one set-based statement per tick sends
lapsed leases down the retry-or-dead path. Running it everywhere at once is
safe: the first update moves a row out of 'running', so it is reaped once."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..config import DEFAULT_REAP_LIMIT
from ..events import Event, Events, after_attempt
from ..model import JobState, Outcome, Reaped
from ..store import Store

__all__ = ["Reaper"]

log = logging.getLogger("tether.reaper")


class Reaper:
    def __init__(
        self, store: Store, *, limit: int = DEFAULT_REAP_LIMIT, events: Events | None = None,
        on_requeued: Callable[[list[Reaped]], object] | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError("reap limit must be >= 1")
        self.store = store
        self.limit = limit
        self.events = events
        #: told about the jobs each tick sent back to queued (a transport republishes them)
        self.on_requeued = on_requeued
        self.total = 0

    def run_once(self) -> list[Reaped]:
        """Reap up to ``limit`` lapsed leases, oldest first; returns what moved."""
        reaped = self.store.reap(self.limit)
        for r in reaped:
            log.warning(
                "recovered job %s attempt %s from worker %s (%s) -> %s", r.id, r.attempt, r.worker, r.outcome, r.state,
                extra={"job_id": r.id, "attempt": r.attempt},
            )
            if self.events is not None and self.events.active:
                self._emit(r, self.events)
        self.total += len(reaped)
        requeued = [r for r in reaped if r.state is JobState.QUEUED]
        if requeued and self.on_requeued is not None:
            self.on_requeued(requeued)
        return reaped

    @staticmethod
    def _emit(r: Reaped, events: Events) -> None:
        what = "attempt timed out" if r.outcome is Outcome.TIMED_OUT else "worker lease expired"
        error = f"{what} (worker {r.worker})"
        events.emit(Event("job.recovered", job_id=r.id, attempt=r.attempt, worker=r.worker, state=r.state,
                          outcome=r.outcome, error=error))
        follow = after_attempt(r.state)
        if follow is not None:
            events.emit(Event(follow, job_id=r.id, attempt=r.attempt, worker=r.worker, state=r.state,
                              outcome=r.outcome, error=error))

    def run_until_clear(self, max_rounds: int = 100) -> list[Reaped]:
        """Drain a backlog: keep reaping while a tick comes back full."""
        out: list[Reaped] = []
        for _ in range(max_rounds):
            batch = self.run_once()
            out.extend(batch)
            if len(batch) < self.limit:
                break
        return out
