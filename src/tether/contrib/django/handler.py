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
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from django.db import close_old_connections
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from ...config import DEFAULT_MAX_PAYLOAD_BYTES
from ...context import CancelReason, Discard, JobCancelled, JobContext, Retry
from ...errors import PayloadError
from ...model import Attempt, Job, Outcome
from ...payload import describe, dump_json, traceback_text
from .results import task_error, task_result
from .task import TetherTaskContext

__all__ = ["make_handler"]


class Source(Protocol):
    """What of the backend a handler needs."""

    alias: str
    database: str

    def read_job(self, job_id: int) -> Job: ...


def make_handler(source: Source, task: Any, retry_on: Any = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> Callable[..., Any]:
    """The tether handler of ``task`` (a Django ``Task``); ``retry_on``: its
    tether option of that name, resolved (None: every error is retried);
    ``max_payload_bytes``: the app's, which its result must fit."""
    if inspect.iscoroutinefunction(task.func):
        async def run_async(ctx: JobContext, args: list[Any], kwargs: dict[str, Any],
                            run_after: str | None = None) -> Any:
            started = await asyncio.to_thread(_started, source, task, ctx)
            context = _context(source, task, started.result, ctx)
            try:
                value = await task.func(*_leading(context), *args, **kwargs)
            except BaseException as exc:
                _raised(source, started, ctx, context, exc, retry_on)
                raise
            value = _normalized(source, started, ctx, context, value)
            _returned(source, started, ctx, context, value, max_payload_bytes)
            return value

        return run_async

    def run(ctx: JobContext, args: list[Any], kwargs: dict[str, Any], run_after: str | None = None) -> Any:
        close_old_connections()
        try:
            started = _started(source, task, ctx)
            context = _context(source, task, started.result, ctx)
            try:
                value = task.func(*_leading(context), *args, **kwargs)
            except BaseException as exc:
                _raised(source, started, ctx, context, exc, retry_on)
                raise
            value = _normalized(source, started, ctx, context, value)
            _returned(source, started, ctx, context, value, max_payload_bytes)
            return value
        finally:
            close_old_connections()

    return run


class Started(NamedTuple):
    """An attempt as its handler began it."""

    #: the job as a RUNNING result (its attempts so far, this one included)
    result: TaskResult
    #: the job as this attempt began: its ``attempts_used`` is what the store
    #: compares with ``max_attempts`` when the attempt fails (``attempt -
    #: released``: a released or snoozed attempt does not count), and nothing
    #: changes ``released`` while this attempt runs
    job: Job


def _started(source: Source, task: Any, ctx: JobContext) -> Started:
    job = source.read_job(ctx.job_id)
    result = task_result(task, job, source.alias)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(sender=type(source), task_result=result)
    return Started(result, job)


def _context(source: Source, task: Any, result: TaskResult, ctx: JobContext) -> TetherTaskContext | None:
    if not task.takes_context:
        return None
    return TetherTaskContext(task_result=result, job=ctx, database=source.database)


def _leading(context: TetherTaskContext | None) -> tuple[Any, ...]:
    return () if context is None else (context,)


def _committed(context: TetherTaskContext | None) -> bool:
    """Whether the attempt's ``context.transaction()`` committed its success:
    then the job has succeeded, whatever the task returns or raises after."""
    return context is not None and context.committed


def _normalized(source: Source, started: Started, ctx: JobContext, context: TetherTaskContext | None,
                value: Any) -> Any:
    """The return value as Django's backends store it (``normalize_json``: a
    tuple becomes a list); one that is not JSON (a function, a datetime) ends
    the task FAILED at once with Django's ``TypeError("Unsupported type:
    ...")``, as Django records it: ``raise tether.Discard(...) from`` it, so
    the attempt keeps that error's traceback and no retry runs the task again
    for the same value. Unless the attempt's success was committed, or its
    cancel signal ended it first (``_returned`` tells those)."""
    if _committed(context) or ctx.cancel_reason not in (None, CancelReason.REQUESTED):
        return value
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        discard = Discard(f"the return value of task {ctx.task!r} is not JSON: {describe(exc)}")
        attempt = Attempt(job_id=ctx.job_id, attempt=ctx.attempt, worker="",
                          claimed_at=started.result.last_attempted_at, finished_at=None,
                          outcome=Outcome.DISCARDED, error=f"discarded: {discard.reason}",
                          traceback=traceback_text(exc))
        _ended(source, started.result, attempt, ends=True)  # in the except block: Django's log has the error
        raise discard from exc


def _returned(source: Source, started: Started, ctx: JobContext, context: TetherTaskContext | None,
              value: Any, max_payload_bytes: int) -> None:
    """``task_finished`` for an attempt that returned ``value``: SUCCESSFUL
    once tether can store it as the job's result; a value tether cannot store
    (too large, a NaN, a NUL) ends the job dead, with the error the worker records
    (worker/executor.py), so FAILED; unless ``context.transaction()`` had
    committed the success: the job then stays succeeded, without a result
    (worker/transactions.py); and unless its cancel signal ended the attempt
    first (its timeout, the worker's shutdown, a lost lease: the worker stopped
    waiting for the task and recorded that)."""
    if not _committed(context) and ctx.cancel_reason not in (None, CancelReason.REQUESTED):
        _cancelled(source, started, ctx)
        return
    try:
        dump_json(value, f"result of task {ctx.task!r}", max_payload_bytes)
    except PayloadError as exc:
        if _committed(context):
            _succeeded(source, started.result, None)
            return
        attempt = Attempt(job_id=ctx.job_id, attempt=ctx.attempt, worker="",
                          claimed_at=started.result.last_attempted_at, finished_at=None, outcome=Outcome.FAILED,
                          error=str(exc), traceback=None)
        _ended(source, started.result, attempt, ends=True)  # in the except block: Django's log has the error
        return
    _succeeded(source, started.result, value)


def _raised(source: Source, started: Started, ctx: JobContext, context: TetherTaskContext | None,
            exc: BaseException, retry_on: Any) -> None:
    if _committed(context):  # raised after its success committed: the job stays succeeded, without a result
        _succeeded(source, started.result, None)
    elif isinstance(exc, asyncio.CancelledError | JobCancelled) or ctx.cancelled:
        _cancelled(source, started, ctx, exc)
    else:
        _failed(source, started, ctx, exc, retry_on)


def _cancelled(source: Source, started: Started, ctx: JobContext, exc: BaseException | None = None) -> None:
    """``task_finished`` for an attempt its cancel signal ended, as the worker
    settles it (worker/executor.py): a cancel request cancels the job
    (FAILED); a timeout fails the attempt, and a lost one is the reaper's,
    each retried while attempts that count are left (whatever ``retry_on``
    says); a shutdown releases it (no error: it runs again)."""
    reason, result = ctx.cancel_reason, started.result
    if reason == CancelReason.SHUTDOWN:
        object.__setattr__(result, "status", TaskResultStatus.READY)
        task_finished.send(sender=type(source), task_result=result)
        return
    outcome, error = {
        CancelReason.REQUESTED: (Outcome.CANCELLED, "cancelled on request"),
        CancelReason.TIMED_OUT: (Outcome.TIMED_OUT, f"attempt timed out after {started.job.timeout or 0:g}s"),
        CancelReason.LOST: (Outcome.LEASE_EXPIRED, f"worker lease expired (worker {ctx.worker_id})"),
    }.get(reason or "", (Outcome.FAILED, "handler was cancelled"))
    tb = traceback_text(exc) if exc is not None and outcome is Outcome.FAILED else None
    attempt = Attempt(job_id=ctx.job_id, attempt=ctx.attempt, worker="", claimed_at=result.last_attempted_at,
                      finished_at=None, outcome=outcome, error=error, traceback=tb)
    ends = reason == CancelReason.REQUESTED or started.job.attempts_used >= ctx.max_attempts
    _ended(source, result, attempt, ends=ends)


def _succeeded(source: Source, result: TaskResult, value: Any) -> None:
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=type(source), task_result=result)


def _ended(source: Source, result: TaskResult, attempt: Attempt, *, ends: bool) -> None:
    """``task_finished`` for an attempt that failed, recorded as ``attempt``."""
    result.errors.append(task_error(attempt))
    object.__setattr__(result, "status", TaskResultStatus.FAILED if ends else TaskResultStatus.READY)
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
            or started.job.attempts_used >= ctx.max_attempts)
    attempt = Attempt(job_id=ctx.job_id, attempt=ctx.attempt, worker="", claimed_at=result.last_attempted_at,
                      finished_at=None, outcome=Outcome.DISCARDED if isinstance(exc, Discard) else Outcome.FAILED,
                      error=describe(exc), traceback=traceback_text(exc))
    _ended(source, result, attempt, ends=ends)
