"""Schedules managed at run time (issue 44): ``app.add_schedule``,
``pause_schedule``, ``resume_schedule``, ``remove_schedule`` and
``trigger_schedule``, a mixin of ``Tether`` (app.py stays small).

A dynamic schedule is a row in the schedules table that no app's code
declares: it names its task, and every worker that knows that task fires it
under the same once-per-tick rule as ``@app.periodic`` (I6), reading the
table afresh every scheduler tick, so one added on any machine (or through a
tether server) is fired without a restart. Everything is checked here, where
the task is known, before the store writes anything."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .model import ScheduleSpec
from .periodic import DEFAULT_CATCH_UP, check_schedule, schedule_spec, task_tags
from .transport import announce

if TYPE_CHECKING:
    from .store import Store
    from .task import Task
    from .transport import Transport

__all__ = ["MAX_SCHEDULE_NAME", "ScheduleControl"]

#: characters in a schedule's name
MAX_SCHEDULE_NAME = 200


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_SCHEDULE_NAME or not name.isprintable():
        raise ConfigError(f"a schedule's name is a non-empty printable string of at most {MAX_SCHEDULE_NAME} "
                          f"characters, got {name!r}")
    return name


class ScheduleControl:
    """The run-time schedule methods of ``Tether``."""

    if TYPE_CHECKING:
        schedule_specs: dict[str, ScheduleSpec]
        tasks: dict[str, Task[Any, Any]]
        max_payload_bytes: int
        transport: Transport

        @property
        def store(self) -> Store: ...

        def get_task(self, name: str) -> Task[Any, Any]: ...

    def add_schedule(
        self,
        name: str,
        cron: str,
        /,
        *,
        task: str,
        args: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        catch_up: int = DEFAULT_CATCH_UP,
        overlap: bool = True,
    ) -> None:
        """Add a schedule at run time: each tick of ``cron`` (as
        ``@app.periodic`` reads it) in ``timezone`` becomes one job of the
        registered task ``task`` with ``args``, fired by the workers that run
        that task, from the next tick on. The job options are the task's.
        ``catch_up`` and ``overlap`` as for ``@app.periodic``. ConfigError (or
        UnknownTask), with nothing written, for a bad name, cron, time zone,
        args that are not JSON or do not fit the handler, or a name already
        taken by any schedule."""
        check_name(name)
        check_schedule(cron, timezone, catch_up, overlap, args)
        if name in self.schedule_specs:
            raise ConfigError(f"schedule {name!r} is declared in this app's code (@app.periodic): choose "
                              "another name")
        t = self.get_task(task)
        spec = schedule_spec(t, cron=cron, timezone=timezone, args=args, catch_up=catch_up, overlap=overlap,
                             max_payload_bytes=self.max_payload_bytes)
        self.store.add_schedule(replace(spec, name=name, task=t.name))

    def pause_schedule(self, name: str) -> None:
        """Stop firing a schedule (code or dynamic) until it is resumed; its
        ticks meanwhile are not fired, then or later. ScheduleNotFound."""
        self.store.set_schedule_paused(check_name(name), True)

    def resume_schedule(self, name: str) -> None:
        """Fire a paused schedule again from its next tick: the ticks it missed
        while paused are not caught up. ScheduleNotFound."""
        self.store.set_schedule_paused(check_name(name), False)

    def remove_schedule(self, name: str) -> None:
        """Delete a dynamic schedule (its past jobs stay). A code schedule
        cannot be removed at run time (its app would declare it again):
        ConfigError; pause it instead. ScheduleNotFound."""
        self.store.remove_schedule(check_name(name))

    def trigger_schedule(self, name: str) -> int:
        """Fire one job of the schedule now, paused or not, recorded as a
        manual tick (the job's ``scheduled_for`` is the database's now; the
        schedule's ticks are unchanged). Returns the job's id. Its job has the
        task's tags when this app registers the task (the schedule holds
        none; the workers that fire it register the task). ScheduleNotFound."""
        fired = self.store.trigger_schedule(check_name(name), tags=task_tags(self.tasks))
        assert fired.job_id is not None
        if self.transport.delivers:  # committed: announce it, as an enqueue does
            announce(self.transport, [(fired.job_id, fired.queue)])
        return fired.job_id
