"""Jobs of tasks no worker knows: a periodic service on every worker.

A worker claims only the tasks it has handlers for (``Store.claim(tasks=...)``),
so a job of any other task waits, queued and with its budget untouched, for a
worker that knows it: a new task's jobs while old workers still run in a
rolling deploy, another app's jobs on a shared queue. This service makes such
jobs visible and ends the ones nothing will ever run:

- each tick it asks which due jobs on this worker's queues no *live* worker
  (seen in the last ``LIVE_WITHIN`` seconds, not stopped) knows, and logs a
  warning naming each task (``tether status``, the dashboard and the metric
  read the same answer from ``Store.stats``);
- a job of a task that no worker serving its queue has known for
  ``grace`` seconds (none seen in that time, stopped ones included), and
  that has been due that long, ends ``dead`` with the reason in its
  ``last_error``: a typo'd task name, or a task deleted while jobs of it
  were queued, ends somewhere visible instead of waiting for ever. ``tether
  retry`` brings one back once a worker has the task.

The grace is the promise to a rolling deploy: while any worker that knows a
task was seen within it, that task's jobs are never buried, and a job is
never buried before it has waited that long, so old workers alone cannot kill
a new task's jobs unless the deploy leaves them alone for longer than the
grace (an hour by default). ``grace=None`` never buries: such jobs wait,
visible, until a worker knows them or an operator cancels them.

Safe on every worker at once: the bury statement moves a row out of
``queued`` once (``SKIP LOCKED`` on PostgreSQL, one writer on SQLite).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import ClassVar

from ..errors import ConfigError
from ..events import Event, Events, ending_event
from ..model import JobState, UnknownTaskJobs
from ..store import Store
from .service import PeriodicService

__all__ = ["DEFAULT_UNKNOWN_TASK_GRACE", "DEFAULT_UNKNOWN_TASK_INTERVAL", "UnknownTasks"]

log = logging.getLogger("tether.unknown_tasks")

#: how often each worker looks for jobs of tasks no live worker knows
DEFAULT_UNKNOWN_TASK_INTERVAL = 60.0
#: how long a task may go unknown to every worker serving its queue (and a
#: job of it wait, due) before its jobs end dead: longer than any rolling
#: deploy should take, short enough that a typo surfaces the same day
DEFAULT_UNKNOWN_TASK_GRACE = 3600.0
#: the shortest grace accepted: a worker's heartbeat (every 10 s by default)
#: must have been able to mark it seen several times over
MIN_UNKNOWN_TASK_GRACE = 60.0
#: jobs buried per statement, at most BURY_ROUNDS statements per tick
BURY_LIMIT = 500
BURY_ROUNDS = 20


class UnknownTasks(PeriodicService):
    name: ClassVar[str] = "unknown-tasks"

    def __init__(
        self, store: Store, queues: Sequence[str], *, grace: float | None = DEFAULT_UNKNOWN_TASK_GRACE,
        interval: float = DEFAULT_UNKNOWN_TASK_INTERVAL, events: Events | None = None,
    ) -> None:
        if grace is not None and (not isinstance(grace, int | float) or not math.isfinite(grace)
                                  or grace < MIN_UNKNOWN_TASK_GRACE):
            raise ConfigError(
                f"unknown_task_grace must be None (never bury) or at least {MIN_UNKNOWN_TASK_GRACE:g} seconds, "
                f"got {grace!r}: it must outlast a rolling deploy, or good jobs of a new task die")
        super().__init__(interval)
        self.store = store
        self.queues = list(queues)
        self.grace = None if grace is None else float(grace)
        self.events = events
        self.buried = 0

    def run_once(self) -> tuple[list[UnknownTaskJobs], int]:
        """Warn about the tasks no live worker knows on this worker's queues,
        then bury what passed the grace; returns (the unknown, how many buried)."""
        mine = set(self.queues)
        unknown = [u for u in self.store.unknown_tasks() if u.queue in mine]
        for u in unknown:
            log.warning(
                "%d due job(s) of task %r on queue %r wait: no live worker knows that task (the oldest is due "
                "since %s); start workers whose app registers it%s", u.jobs, u.task, u.queue,
                u.oldest.isoformat(timespec="seconds"),
                "" if self.grace is None else f", or they end dead once it has been unknown for {self.grace:g}s",
                extra={"task": u.task, "queue": u.queue},
            )
        return unknown, (self._bury() if self._may_bury(unknown) else 0)

    def _may_bury(self, unknown: list[UnknownTaskJobs]) -> bool:
        """Whether a bury statement could find anything: only jobs no live
        worker knows can be buried (a worker seen within the grace knows more
        than the live ones do), and only once the oldest has waited the grace.
        Usually nothing is unknown, and the tick stays a read: on SQLite every
        write takes the one write lock, which a paused worker would hold."""
        if self.grace is None or not unknown:
            return False
        cutoff = self.store.db_now() - timedelta(seconds=self.grace)
        return any(u.oldest <= cutoff for u in unknown)

    def _bury(self) -> int:
        assert self.grace is not None
        total = 0
        for _ in range(BURY_ROUNDS):
            buried = self.store.bury_unknown(self.queues, grace=self.grace, limit=BURY_LIMIT)
            for b in buried:
                log.error("job %s (task %r, queue %r) ended dead: %s", b.id, b.task, b.queue, b.error,
                          extra={"job_id": b.id, "task": b.task, "queue": b.queue})
                if self.events is not None and self.events.active:
                    self.events.emit(Event(ending_event(JobState.DEAD), job_id=b.id, task=b.task, queue=b.queue,
                                           state=JobState.DEAD, error=b.error))
            total += len(buried)
            if len(buried) < BURY_LIMIT:
                break
        self.buried += total
        return total
