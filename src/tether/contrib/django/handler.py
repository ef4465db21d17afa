"""What a worker runs for a Django task: the tether handler registered under
the task's ``module_path``, which calls the task's function with the job's
args, and sends Django's ``task_started`` and ``task_finished`` signals.

The function is the one the registered ``Task`` object holds: a job's data
names a task, never code to import. A ``def`` task runs on the worker's
handler threads, with Django's stale connections closed before and after it
(as after a request); an ``async def`` task runs on the worker's event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from django.db import close_old_connections
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started

from ...context import Discard, JobContext, Retry
from ...model import Attempt, Job, Outcome
from .results import task_error, task_result
from .task import TetherTaskContext

__all__ = ["make_handler"]


class Source(Protocol):
    """What of the backend a handler needs."""

    alias: str
    database: str

    def read_job(self, job_id: int) -> Job: ...


def make_handler(source: Source, task: Any, retry_on: Any = None) -> Callable[..., Any]:
    """The tether handler of ``task`` (a Django ``Task``); ``retry_on``: its
    tether option of that name, resolved (None: every error is retried)."""
    if inspect.iscoroutinefunction(task.func):
        async def run_async(ctx: JobContext, args: list[Any], kwargs: dict[str, Any],
                            run_after: str | None = None) -> Any:
            started = await asyncio.to_thread(_started, source, task, ctx)
            try:
                value = await task.func(*_leading(source, task, started.result, ctx), *args, **kwargs)
            except BaseException as exc:
                _failed(source, started, ctx, exc, retry_on)
                raise
            _succeeded(source, started.result, value)
            return value

        return run_async

    def run(ctx: JobContext, args: list[Any], kwargs: dict[str, Any], run_after: str | None = None) -> Any:
        close_old_connections()
        try:
            started = _started(source, task, ctx)
            try:
                value = task.func(*_leading(source, task, started.result, ctx), *args, **kwargs)
            except BaseException as exc:
                _failed(source, started, ctx, exc, retry_on)
                raise
            _succeeded(source, started.result, value)
            return value
        finally:
            close_old_connections()

    return run


class Started(NamedTuple):
    """An attempt as its handler began it."""

    #: the job as a RUNNING result (its attempts so far, this one included)
    result: TaskResult
    #: the job's attempts that count against its ``max_attempts``, this one
    #: included, as the store counts them when it fails: ``attempt - released``
    #: (a released or snoozed attempt does not count); no attempt changes
    #: ``released`` while this one runs
    counted: int


def _started(source: Source, task: Any, ctx: JobContext) -> Started:
    job = source.read_job(ctx.job_id)
    result = task_result(task, job, source.alias)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(sender=type(source), task_result=result)
    return Started(result, job.attempts_used)


def _leading(source: Source, task: Any, result: TaskResult, ctx: JobContext) -> tuple[Any, ...]:
    if not task.takes_context:
        return ()
    return (TetherTaskContext(task_result=result, job=ctx, database=source.database),)


def _succeeded(source: Source, result: TaskResult, value: Any) -> None:
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=type(source), task_result=result)


def _failed(source: Source, started: Started, ctx: JobContext, exc: BaseException, retry_on: Any) -> None:
    """``task_finished`` for an attempt that raised (sent inside the except
    block, so Django's log has the traceback), with the status the job takes,
    decided as the worker decides it (worker/policy.py): READY when tether
    runs it again (a ``tether.Retry`` snooze, or an error worth retrying with
    attempts left), FAILED when it ends (``tether.Discard``, an error outside
    ``retry_on``, or the last attempt that counts)."""
    result = started.result
    if isinstance(exc, Retry):  # snoozed: not an error, and the job runs again
        object.__setattr__(result, "status", TaskResultStatus.READY)
        task_finished.send(sender=type(source), task_result=result)
        return
    ends = (isinstance(exc, Discard) or (retry_on is not None and not isinstance(exc, retry_on))
            or started.counted >= ctx.max_attempts)
    attempt = Attempt(job_id=ctx.job_id, attempt=ctx.attempt, worker="", claimed_at=result.last_attempted_at,
                      finished_at=None, outcome=Outcome.DISCARDED if isinstance(exc, Discard) else Outcome.FAILED,
                      error=f"{type(exc).__name__}: {exc}", traceback="".join(traceback.format_exception(exc)))
    result.errors.append(task_error(attempt))
    object.__setattr__(result, "status", TaskResultStatus.FAILED if ends else TaskResultStatus.READY)
    task_finished.send(sender=type(source), task_result=result)
