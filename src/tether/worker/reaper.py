"""The reaper: a periodic service on every worker; one set-based statement per
tick sends lapsed leases down the retry-or-dead path. Running it everywhere at
once is safe: the first update moves a row out of 'running', so it is reaped once.

Its timer is ``reaper_interval`` (``Timers``): a lapsed lease is reaped within
one interval of lapsing while any worker runs, which is the second half of the
I5 bound ``lease_ttl + reaper_interval``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

from ..config import DEFAULT_REAP_LIMIT, DEFAULT_REAPER_INTERVAL
from ..errors import ConfigError
from ..events import Event, Events, where_it_went
from ..model import JobState, Outcome, Reaped
from ..store import Store
from .history import HistoryRecorder
from .service import PeriodicService

__all__ = ["Reaper"]

log = logging.getLogger("tether.reaper")


#: a tick keeps reaping while a statement comes back full, at most this many
#: statements (a backlog left after them waits for the next tick)
MAX_ROUNDS = 100


class Reaper(PeriodicService):
    name: ClassVar[str] = "reaper"

    def __init__(
        self, store: Store, *, limit: int = DEFAULT_REAP_LIMIT, interval: float = DEFAULT_REAPER_INTERVAL,
        events: Events | None = None, on_requeued: Callable[[list[Reaped]], object] | None = None,
        history: HistoryRecorder | None = None,
    ) -> None:
        if not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"reap limit must be an int >= 1, got {limit!r}")
        super().__init__(interval)
        self.store = store
        self.limit = limit
        self.events = events
        #: told about the jobs each tick sent back to queued (a transport republishes them)
        self.on_requeued = on_requeued
        #: a chaos run's history: each tick's start and the jobs it moved
        self.history = history
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
        follow = where_it_went(r.state, r.outcome)
        if follow is not None:
            events.emit(Event(follow, job_id=r.id, attempt=r.attempt, worker=r.worker, state=r.state,
                              outcome=r.outcome, error=error))

    def tick(self) -> list[Reaped]:
        return self.run_until_clear()

    def ticked(self, result: list[Reaped], started: float) -> None:
        if self.history is not None:
            self.history.record("reap", started=started, ok=True, jobs=[
                [r.id, r.attempt, r.lease_until.timestamp() if r.lease_until else None] for r in result])

    def failed(self, exc: Exception, started: float) -> None:
        super().failed(exc, started)
        if self.history is not None:
            self.history.record("reap", started=started, ok=False, error=str(exc)[:200])

    def run_until_clear(self, max_rounds: int = MAX_ROUNDS) -> list[Reaped]:
        """Drain a backlog: keep reaping while a tick comes back full."""
        out: list[Reaped] = []
        for _ in range(max_rounds):
            batch = self.run_once()
            out.extend(batch)
            if len(batch) < self.limit:
                break
        return out
