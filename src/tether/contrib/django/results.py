"""tether's jobs as Django's ``TaskResult``s: statuses, times, the attempts
audit as ``errors`` and ``worker_ids``.

A job's args are ``{"args": [...], "kwargs": {...}, "run_after": ISO or
null}``: Django's positional and keyword arguments, and the ``run_after``
it was enqueued with (a job's ``run_at`` also moves with each retry).

A result's id is ``<job id>-<token>``: tether's job id, and a random token
the enqueue kept in the job's meta (``TOKEN``). A job id alone could name
another job: on SQLite, a rolled-back enqueue's id is given to the next job
(its AUTOINCREMENT counter rolls back with the transaction), so a result id
captured inside a rolled-back ``atomic()`` would later read another task's
result. A token is never given twice; ``get_result`` and ``cancel`` check it.
A job without one (enqueued before tokens, or by tether itself) is named by
its job id alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

from ...model import Attempt, Job, JobState, Outcome

__all__ = ["STATUS", "TOKEN", "TetherTaskResult", "parse_result_id", "payload", "result_id", "task_result"]

#: the key of a job's meta that holds its result id's token
TOKEN = "django_result_token"

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


def result_id(job: Job) -> str:
    """The id of ``job``'s result: ``<job id>-<token>``, or the job id alone
    for a job enqueued without a token."""
    token = (job.meta or {}).get(TOKEN)
    return f"{job.id}-{token}" if isinstance(token, str) else str(job.id)


def parse_result_id(given: Any) -> tuple[int, str | None]:
    """``<job id>-<token>`` (or a job id alone) as (job id, token), or
    TaskResultDoesNotExist: ASCII digits only, as tether reads every number
    from outside (``int()`` takes "+1", "1_0" and other scripts' digits)."""
    text = given if isinstance(given, str) else ""
    number, dash, token = text.partition("-")
    if not (number.isascii() and number.isdigit() and len(number) <= 19 and int(number) < 2**63) \
            or (dash and not (token.isascii() and token.isalnum())):
        raise TaskResultDoesNotExist(f"no task result {given!r}: tether's result ids are <job id>-<token>")
    return int(number), token if dash else None


@dataclass(frozen=True, slots=True, kw_only=True)
class TetherTaskResult(TaskResult):
    """Django's ``TaskResult`` and ``duplicate``: True when the enqueue that
    made it added nothing, because a job held its ``dedup_key`` (the result
    is that job's)."""

    duplicate: bool = False


def task_result(task: Any, job: Job, alias: str, *, duplicate: bool = False) -> TaskResult:
    """``job`` as a result of ``task`` (a Django ``Task``), on the backend
    ``alias``; ``duplicate``: the enqueue found it there (TetherTaskResult)."""
    args = job.args
    run_after = args.get("run_after")
    # backend: this one's, not that of the Task first defined with the path (result.refresh() reads it)
    shown = task.using(queue_name=job.queue, priority=job.priority, backend=alias,
                       run_after=_local(datetime.fromisoformat(run_after)) if run_after else None)
    attempts = job.attempts
    result = TetherTaskResult(
        duplicate=duplicate,
        task=shown,
        id=result_id(job),
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
    if attempt.traceback and attempt.outcome is Outcome.DISCARDED:
        # a Discard raised from an error (a return value that is not JSON): that error's traceback
        return TaskError(exception_class_path=exception_path(_last_exception(attempt.traceback), attempt.traceback),
                         traceback=attempt.traceback)
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


def _last_exception(traceback: str) -> str:
    """The ``Name: message`` line that ends a traceback, with its module
    dropped (``exception_path`` finds it again)."""
    lines = [line for line in traceback.splitlines() if line and not line[0].isspace()]
    last = lines[-1] if lines else ""
    return last.split(":", 1)[0].rsplit(".", 1)[-1] + last[len(last.split(":", 1)[0]):]


def _local(moment: datetime | None) -> datetime | None:
    """tether's UTC times as Django's: aware with USE_TZ, else naive local time."""
    if moment is None or settings.USE_TZ:
        return moment
    naive: datetime = timezone.make_naive(moment)
    return naive
