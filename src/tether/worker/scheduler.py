"""The scheduler: a periodic service on every worker whose app declares
schedules (``@app.periodic``) or runs tasks: it also fires the schedules
added at run time (``app.add_schedule``) of the tasks on the worker's queues,
read from the database every round, so one added anywhere needs no restart.
A worker whose app declares no schedule syncs that, once, at its start
(``sync_none``). No leader and no beat process: every worker
fires every schedule it knows, and the database decides each tick once (the
(schedule, tick) primary key of the ticks table admits one insert; I6).

Its first tick syncs the app's schedules into the database (a changed
definition takes effect at its next tick; a schedule the app no longer
declares is shown orphaned); a sync that fails is tried again next tick, and
does not stop the tick from firing what the database already holds. Every
tick then asks the store to fire what is due at the database's ``now``:
on-time ticks (less than ``grace`` seconds old) and, after every worker was
down, at most ``catch_up`` of the missed ones.

Timers: ``interval`` (1 s) bounds how late a tick fires while any worker
runs, so one-second schedules fire on time; ``grace`` (the reaper interval,
10 s) is how old a tick may be and still count as on time rather than
missed, which is the I6 bound: a tick fires within one reaper interval while
a healthy worker exists."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import ClassVar

from ..config import DEFAULT_REAPER_INTERVAL
from ..errors import AccessDenied, ConfigError
from ..events import Event, Events
from ..model import FiredTick, JobState, ScheduleSpec
from ..store import Store
from ..store.schedules import TaskTags
from .service import PeriodicService

__all__ = ["DEFAULT_MISFIRE_GRACE", "DEFAULT_SCHEDULER_INTERVAL", "Scheduler", "sync_none"]

log = logging.getLogger("tether.scheduler")

#: seconds between two fires on one worker: at most this late for a tick
#: (plus the jitter of PeriodicService), so a one-second schedule keeps time
DEFAULT_SCHEDULER_INTERVAL = 1.0
#: a tick less than this many seconds old is on time and fired; older ones were
#: missed (no worker ran) and only catch_up of them are. The I6 bound.
DEFAULT_MISFIRE_GRACE = DEFAULT_REAPER_INTERVAL
#: grace must cover this many scheduler intervals, so that a round that fails
#: or runs late does not turn an on-time tick into a missed one
MIN_GRACE_INTERVALS = 2


def sync_none(store: Store) -> None:
    """A worker whose app declares no schedule runs no scheduler, and at its
    start syncs none, once: every schedule in the database is then shown
    orphaned, as a worker of an app that declares others shows the ones it
    dropped, and nothing is fired. Bookkeeping: if the sync fails the worker
    says so and starts all the same."""
    try:
        store.sync_schedules([])
    except AccessDenied as exc:  # a remote worker's token may not write schedules; its producers' may
        log.debug("not marking schedules orphaned: %s", exc)
    except Exception as exc:
        log.warning("could not mark the database's schedules orphaned (this app declares none): %s", exc)


class Scheduler(PeriodicService):
    name: ClassVar[str] = "scheduler"

    def __init__(
        self, store: Store, schedules: Sequence[ScheduleSpec], *,
        interval: float | None = None, grace: float = DEFAULT_MISFIRE_GRACE,
        events: Events | None = None, on_fired: Callable[[list[FiredTick]], object] | None = None,
        tasks: Sequence[str] = (), tags: TaskTags | None = None,
    ) -> None:
        """``interval`` None: DEFAULT_SCHEDULER_INTERVAL, or less where ``grace``
        is short (a worker with a sub-second reaper interval) so that grace
        still covers MIN_GRACE_INTERVALS of them. ``tasks``: the tasks this
        worker runs; the dynamic schedules (``app.add_schedule``) of those are
        fired too, read afresh every tick, so one added at run time needs no
        restart. A worker with tasks and no code schedule syncs none here (its
        runtime did, at its start) and fires the dynamic ones only. ``tags``:
        the app's tasks' tags by name, which the jobs of
        their schedules carry."""
        if interval is None and isinstance(grace, int | float) and grace > 0:
            interval = min(DEFAULT_SCHEDULER_INTERVAL, grace / MIN_GRACE_INTERVALS)
        super().__init__(DEFAULT_SCHEDULER_INTERVAL if interval is None else interval)
        if not schedules and not tasks:
            raise ConfigError("a scheduler needs at least one schedule (declare them with @app.periodic) or task")
        names = [s.name for s in schedules]
        if len(set(names)) != len(names):
            raise ConfigError(f"schedule names must be unique, got {sorted(names)}")
        if (not isinstance(grace, int | float) or isinstance(grace, bool) or not math.isfinite(grace)
                or grace < MIN_GRACE_INTERVALS * self.interval):
            raise ConfigError(
                f"scheduler grace must be a number of seconds of at least {MIN_GRACE_INTERVALS} scheduler "
                f"intervals ({MIN_GRACE_INTERVALS * self.interval:g} s), got {grace!r}")
        self.store = store
        self.schedules = list(schedules)
        self.names = sorted(names)
        self.tasks = sorted(set(tasks))
        self.tags = dict(tags or {})
        self.grace = float(grace)
        self.events = events
        #: told about the jobs each tick fired (a delivering transport publishes them)
        self.on_fired = on_fired
        #: whether this worker's app has written its schedules into the database
        self.synced = not schedules
        #: why the last sync failed (logged once while it stays the same)
        self.sync_error: str | None = None
        self.fired = 0
        self.skipped = 0

    def run_once(self, now: datetime | None = None) -> list[FiredTick]:
        """Sync (on the first tick, and again until a sync succeeds), then fire
        what is due, whether or not the sync succeeded; returns the ticks this worker decided (a tick another
        worker decided first is not among them). ``now`` is for tests."""
        if not self.synced:
            self.synced = self._sync(now)
        decided = self.store.fire_schedules(self.names, grace=self.grace, now=now, tasks=self.tasks, tags=self.tags)
        jobs = [t for t in decided if t.job_id is not None]
        for t in decided:
            if t.job_id is None:
                log.info("schedule %s: tick %s skipped (its previous job is still active; overlap=False)",
                         t.schedule, t.tick.isoformat())
            else:
                log.debug("schedule %s: tick %s fired job %s", t.schedule, t.tick.isoformat(), t.job_id)
        self.fired += len(jobs)
        self.skipped += len(decided) - len(jobs)
        if jobs:
            if self.events is not None and self.events.active:
                for t in jobs:
                    self.events.emit(Event("job.enqueued", job_id=t.job_id, task=t.task or t.schedule,
                                           queue=t.queue, state=JobState.QUEUED))
            if self.on_fired is not None:
                self.on_fired(jobs)
        return decided

    def _sync(self, now: datetime | None) -> bool:
        """Write the app's schedules; False: try again next tick. Either way
        the tick goes on to fire what the database holds, so a sync that fails
        (one schedule the store refuses, the whole app's with it) costs this
        app's new definitions only, never the firing of the others."""
        try:
            self.store.sync_schedules(self.schedules, now=now)
        except AccessDenied as exc:
            # A remote worker whose token has the worker scope only: a
            # schedule makes jobs, so writing one needs a producer's. The
            # definitions someone else wrote are still fired.
            log.warning("cannot write this app's schedules (%s); firing the definitions the database holds", exc)
            return True
        except Exception as exc:
            if str(exc) != self.sync_error:  # once, not every second
                log.warning("could not write this app's schedules (%s); firing the definitions the database "
                            "holds, and trying again every tick", exc)
            self.sync_error = str(exc)
            return False
        log.info("synced %d schedule(s): %s", len(self.schedules), ", ".join(self.names))
        self.sync_error = None
        return True
