"""Expired jobs: a periodic service on every worker (and on a tether server).

A job enqueued with ``using(expires="10m")`` or ``expires_at=`` is worthless
if it has not started by then (a one-time code, a price quote). The claim
statements decide that: a job is claimable from its ``run_at`` up to its
``expires_at``, so no claim ever starts an expired job, whether or not this
service has run (queries.sql: ``_due``). This service makes the ending
visible: each tick it ends the queued jobs whose expiry has passed
(``Store.expire``) as ``cancelled``, with an attempts row of outcome
``expired`` and the reason in ``last_error``, so ``tether jobs``, the
dashboard and ``app.wait`` see them end, and fires ``job.cancelled``.

An expired job left queued while no worker runs (all of them down) is never
started by the first worker back: its claim passes over it, and its expiry
service ends it within one interval. Safe on every worker at once (SKIP
LOCKED on PostgreSQL, one writer on SQLite). Workers that reach the database
through a tether server do not run it: the server does (server/duties.py).
"""

from __future__ import annotations

import logging
from typing import ClassVar

from ..events import Event, Events, ending_event
from ..model import JobState
from ..store import Store
from .service import PeriodicService

__all__ = ["DEFAULT_EXPIRY_INTERVAL", "EXPIRE_LIMIT", "EXPIRE_ROUNDS", "Expiry"]

log = logging.getLogger("tether.expiry")

#: how often each worker ends the jobs whose expiry passed (a claim never
#: starts one meanwhile: this bounds only how long it still shows as queued)
DEFAULT_EXPIRY_INTERVAL = 10.0
#: jobs ended per statement, at most EXPIRE_ROUNDS statements per tick
EXPIRE_LIMIT = 500
EXPIRE_ROUNDS = 20


class Expiry(PeriodicService):
    name: ClassVar[str] = "expiry"

    def __init__(self, store: Store, worker: str, *, interval: float = DEFAULT_EXPIRY_INTERVAL,
                 events: Events | None = None) -> None:
        super().__init__(interval)
        self.store = store
        self.worker = worker
        self.events = events
        self.expired = 0

    def run_once(self) -> int:
        """End the queued jobs whose expiry passed; returns how many."""
        total = 0
        for _ in range(EXPIRE_ROUNDS):
            ended = self.store.expire(self.worker, limit=EXPIRE_LIMIT)
            for e in ended:
                log.info("job %s (task %r, queue %r) expired before it started", e.id, e.task, e.queue,
                         extra={"job_id": e.id, "task": e.task, "queue": e.queue})
                if self.events is not None and self.events.active:
                    self.events.emit(Event(ending_event(JobState.CANCELLED), job_id=e.id, task=e.task,
                                           queue=e.queue, state=JobState.CANCELLED, error=e.error))
            total += len(ended)
            if len(ended) < EXPIRE_LIMIT:
                break
        self.expired += total
        return total
