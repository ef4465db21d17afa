"""Job control and schedules: parts of the store interface (``Store``
inherits ``JobControl`` and ``Schedules``; the workers' rows are
worker_rows.py's ``WorkerRows``), in a module of their own. Each method is
one statement or one short transaction on the backend's database, as every
``Store`` method is."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from datetime import datetime

from ..model import FiredTick, JobState, KeyLimits, QueueLimits, ScheduleInfo, ScheduleSpec
from .schedules import TaskTags

__all__ = ["JobControl", "Schedules"]


class JobControl(abc.ABC):
    """An operator's hands on the queues: retention, pause and resume, limits;
    and the leases of provably dead workers."""

    # -- retention (job control) ------------------------------------------------
    @abc.abstractmethod
    def prune(self, ages: Mapping[JobState, float], limit: int, *, now: datetime | None = None) -> dict[JobState, int]:
        """Delete up to ``limit`` finished jobs, oldest finished first, with their
        attempts rows: those in a state of ``ages`` that finished more than
        ``ages[state]`` seconds before ``now``. One statement (or one short
        transaction); never a queued or running job. Returns how many went, by
        state (states with none are left out). ConfigError for a bad argument."""

    @abc.abstractmethod
    def prunable(self, ages: Mapping[JobState, float], *, now: datetime | None = None) -> dict[JobState, int]:
        """How many jobs ``prune`` would delete, by state (every state of ``ages``)."""

    # -- pause and resume (job control) --------------------------------------------
    @abc.abstractmethod
    def set_paused(self, queue: str, paused: bool, *, now: datetime | None = None) -> None:
        """Pause a queue (no claim takes its jobs from the next claim round on;
        running jobs go on) or resume it. ConfigError for a bad queue name."""

    @abc.abstractmethod
    def paused_queues(self) -> list[str]:
        """The queues paused now, by name."""

    # -- queue limits (job control) ----------------------------------------------
    @abc.abstractmethod
    def set_limits(self, limits: QueueLimits, *, now: datetime | None = None) -> None:
        """Set a queue's limits whole (None lifts one); every claim from the
        next on obeys them. ConfigError for a bad queue name or limit."""

    @abc.abstractmethod
    def queue_limits(self, *, now: datetime | None = None) -> list[QueueLimits]:
        """Every queue with a limit, with its running jobs and starts in the window."""

    @abc.abstractmethod
    def set_key_limits(self, limits: KeyLimits, *, now: datetime | None = None) -> None:
        """Set a limit-key pattern's limits whole (both None: the pattern goes);
        every claim from the next on obeys them, for each key the pattern
        matches. ConfigError for a bad pattern or limit, nothing written."""

    @abc.abstractmethod
    def key_limits(self, *, now: datetime | None = None) -> list[KeyLimits]:
        """Every limit-key pattern, with what counts against it now (``KeyLimits``)."""

    # -- start-up reconciliation ----------------------------------------------
    @abc.abstractmethod
    def lapse_leases(self, worker_ids: Sequence[str], *, now: datetime | None = None) -> int:
        """End the leases held by these (provably dead) workers now, so the next
        ``reap`` recovers their jobs at once."""


class Schedules:
    """Periodic schedules (I6: the (schedule, tick) key of the ticks table admits
    one insert); a backend without them keeps these defaults, which refuse."""

    backend: str

    def sync_schedules(self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None) -> None:
        """Upsert an app's schedules; every other schedule is marked orphaned
        (kept, not fired by this app). A changed cron or timezone takes effect
        at its next tick: ticks at or before the change are not owed."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")

    def fire_schedules(self, names: Sequence[str], *, grace: float, now: datetime | None = None,
                       tasks: Sequence[str] = (), tags: TaskTags | None = None) -> list[FiredTick]:
        """Decide the due ticks of the named code schedules and of the dynamic
        schedules (``add_schedule``) whose task is in ``tasks``, as the
        database holds them (names it lacks, and paused schedules, are
        ignored), at the database's ``now``: on-time
        ticks (less than ``grace`` seconds old) and, of the older ones missed,
        the ``catch_up`` most recent. Each tick becomes one job, or is skipped
        (overlap=False while the last job is active), in the database; the
        answer leaves out the ticks another worker decided first. ``tags``:
        the tags of the caller's tasks by name (``task_tags``), which the jobs
        of their schedules carry; a task it does not name gets none."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")

    def list_schedules(self, *, now: datetime | None = None) -> list[ScheduleInfo]:
        """Every schedule in the database, orphaned ones too, by name."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")

    # -- schedules managed at run time (issue 44) ---------------------------------
    def add_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> None:
        """Store a dynamic schedule (``spec.task`` names its task); its first
        tick is the next after ``now``. ConfigError, nothing written, for a
        spec ``check_spec`` refuses or a name already taken."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")

    def set_schedule_paused(self, name: str, paused: bool, *, now: datetime | None = None) -> None:
        """Pause a schedule (its ticks are not fired) or resume it at its next
        tick (the ticks it missed while paused are not owed). ScheduleNotFound."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")

    def remove_schedule(self, name: str, *, now: datetime | None = None) -> None:
        """Delete a dynamic schedule; ConfigError for a code one (its app
        declares it), ScheduleNotFound for no schedule of that name."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")

    def trigger_schedule(self, name: str, *, now: datetime | None = None, tags: TaskTags | None = None) -> FiredTick:
        """One job of the schedule now, recorded as a manual tick (paused or
        not), with its task's tags from ``tags`` (as ``fire_schedules``).
        ScheduleNotFound."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")

    def prune_ticks(self, limit: int, *, now: datetime | None = None) -> int:
        """Delete up to ``limit`` ticks no fire can propose again (store/schedules.py); how many went."""
        raise NotImplementedError(f"the {self.backend} store has no schedules")
