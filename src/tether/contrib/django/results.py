"""tether's jobs as Django's ``TaskResult``s: statuses, times, the attempts
audit as ``errors`` and ``worker_ids``.

A job's args are ``{"args": [...], "kwargs": {...}, "run_after": ISO or
null}``: Django's positional and keyword arguments, and the ``run_after``
it was enqueued with (a job's ``run_at`` also moves with each retry).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.conf import settings
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.utils import timezone

from ...model import Attempt, Job, JobState, Outcome

__all__ = ["STATUS", "payload", "task_result"]

#: tether's job states as Django's statuses: a job waiting for its next
#: attempt (a retry) is READY again; dead and cancelled jobs have FAILED
STATUS = {s: TaskResultStatus.SUCCESSFUL if s is JobState.SUCCEEDED else TaskResultStatus.FAILED if s.terminal
          else TaskResultStatus.RUNNING if s is JobState.RUNNING else TaskResultStatus.READY for s in JobState}

#: attempts that end in an error (a released or snoozed attempt is no error)
_ERRORS = {o for o in Outcome if o.error}

#: the exception of an attempt that ended without one of its handler's
_NO_EXCEPTION = {
    Outcome.LEASE_EXPIRED: "tether.contrib.django.errors.LeaseExpired",
    Outcome.TIMED_OUT: "tether.contrib.django.errors.AttemptTimedOut",
    Outcome.CANCELLED: "tether.context.JobCancelled",
    Outcome.DISCARDED: "tether.context.Discard",
}


def payload(args: Any, kwargs: Any, run_after: datetime | None) -> dict[str, Any]:
    return {"args": list(args), "kwargs": dict(kwargs),
            "run_after": run_after.isoformat() if run_after is not None else None}


def task_result(task: Any, job: Job, alias: str) -> TaskResult:
    """``job`` as a result of ``task`` (a Django ``Task``), on the backend ``alias``."""
    args = job.args
    run_after = args.get("run_after")
    shown = task.using(queue_name=job.queue, priority=job.priority,
                       run_after=_local(datetime.fromisoformat(run_after)) if run_after else None)
    attempts = job.attempts
    result = TaskResult(
        task=shown,
        id=str(job.id),
        status=STATUS[job.state],
        enqueued_at=_local(job.created_at),
        started_at=_local(attempts[0].claimed_at) if attempts else None,
        finished_at=_local(job.finished_at),
        last_attempted_at=_local(attempts[-1].claimed_at) if attempts else None,
        args=args.get("args", []),
        kwargs=args.get("kwargs", {}),
        backend=alias,
        errors=[task_error(a) for a in attempts if a.outcome in _ERRORS],
        worker_ids=[a.worker for a in attempts],
    )
    if job.state is JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def task_error(attempt: Attempt) -> TaskError:
    """An attempt's error as Django's: the exception's class path and the traceback."""
    error = attempt.error or ""
    if attempt.traceback and attempt.outcome is not Outcome.TIMED_OUT:
        return TaskError(exception_class_path=exception_path(error, attempt.traceback),
                         traceback=attempt.traceback)
    path = _NO_EXCEPTION.get(attempt.outcome or Outcome.FAILED, "builtins.Exception")
    return TaskError(exception_class_path=path, traceback=attempt.traceback or error)


def exception_path(error: str, traceback: str) -> str:
    """The raised exception's ``module.QualName``: tether records its
    ``Name: message`` and its traceback, whose last exception line names it
    by module and qualified name (builtins by name alone)."""
    name = error.split(":", 1)[0].strip()
    if not name.isidentifier():
        return "builtins.Exception"
    line = re.compile(rf"^(?:([\w.]+)\.)?{re.escape(name)}(?::|$)")
    for text in reversed(traceback.splitlines()):
        found = line.match(text)
        if found:
            return f"{found.group(1)}.{name}" if found.group(1) else f"builtins.{name}"
    return f"builtins.{name}"


def _local(moment: datetime | None) -> datetime | None:
    """tether's UTC times as Django's: aware with USE_TZ, else naive local time."""
    if moment is None or settings.USE_TZ:
        return moment
    naive: datetime = timezone.make_naive(moment)
    return naive
