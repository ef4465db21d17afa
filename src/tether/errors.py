"""Every error tether raises on purpose.

The hierarchy::

    TetherError
    ├── ConfigError            bad settings: misordered timers, a bad queue name
    │   ├── InvalidDSN         a database URL tether cannot use
    │   └── AccessDenied       a tether server refused the token (missing, unknown, wrong scope)
    │       └── NotYourWorker  ... or the worker id: another token registered it, or none did
    ├── PayloadError           args or a result that is not JSON, or too large
    │   └── ArgumentsError     args that do not fit the task's parameters (also a TypeError)
    ├── ArgsMisfit             a job's args do not fit its handler (a deploy changed the signature)
    ├── UnknownTask            a task name no registered handler carries
    ├── SchemaMissing          the database has no (or an older) tether schema
    ├── JobNotFound            no job with that id
    ├── InvalidTransition      the job is not in a state that allows the request
    ├── ServerUnavailable      a tether server could not be reached, or failed (5xx)
    └── StaleAttempt           a fenced write whose (id, attempt, worker) no longer
                               owns the job: the lease was reaped and the job moved on

``PayloadError`` is also a ``ValueError``, ``ArgumentsError`` a ``PayloadError`` and a
``TypeError`` (what calling the function with those args would raise), ``ArgsMisfit`` a ``TypeError`` (what
calling the handler raised: ``retry_on=TypeError`` still matches), ``UnknownTask`` a ``LookupError`` and
``ServerUnavailable`` a ``ConnectionError`` so
that callers who catch the builtin families keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Job

__all__ = [
    "AccessDenied",
    "ArgsMisfit",
    "ArgumentsError",
    "ConfigError",
    "DatabaseUnavailable",
    "InvalidDSN",
    "InvalidTransition",
    "JobFailed",
    "JobNotFound",
    "NotYourWorker",
    "PayloadError",
    "ScheduleNotFound",
    "SchemaMissing",
    "ServerUnavailable",
    "StaleAttempt",
    "TetherError",
    "UnknownTask",
]


class TetherError(Exception):
    """Base class of every error tether raises on purpose."""


class ConfigError(TetherError, ValueError):
    """A setting is invalid; the message says what to change."""


class InvalidDSN(ConfigError):
    """A database URL that tether cannot use."""


class DatabaseUnavailable(InvalidDSN, ConnectionError):
    """The database did not answer: the connection was refused, timed out or
    could not be routed. A ConnectionError, for code that retries an outage;
    still an InvalidDSN, as every failure to connect was before."""


class AccessDenied(ConfigError):
    """A tether server refused the request's token: none, unknown, or without the scope."""


class NotYourWorker(AccessDenied):
    """A tether server refused a worker token's request for worker ids it did
    not register (another token did, or none has yet). ``workers``: those ids."""

    def __init__(self, message: str, workers: list[str] | None = None) -> None:
        super().__init__(message)
        self.workers = list(workers or [])


class ServerUnavailable(TetherError, ConnectionError):
    """A tether server could not be reached, timed out, or failed (5xx); the
    request may or may not have taken effect. Workers retry and, past a lease's
    local deadline, fence themselves off the job."""


class PayloadError(TetherError, ValueError):
    """Args or a result that are not JSON, or are larger than the configured cap."""


class ArgumentsError(PayloadError, TypeError):
    """Args that do not fit the task's parameters (one missing, one it does
    not take), refused at enqueue: a ``TypeError``, as calling the function
    with them would raise, and a ``PayloadError``, as every refused args are
    (``except PayloadError`` and ``except ValueError`` still catch it)."""


class ArgsMisfit(TetherError, TypeError):
    """A job's args do not fit its handler's parameters: the handler was
    called and raised TypeError, and binding the args says why. Usually a
    deploy that changed the task's signature after the job was enqueued."""


class UnknownTask(TetherError, LookupError):
    """A task name that no registered handler carries."""


class SchemaMissing(TetherError):
    """The database has no tether schema, or an older one."""


class JobNotFound(TetherError, LookupError):
    """No job has this id."""


class ScheduleNotFound(TetherError, LookupError):
    """No schedule has this name."""


class InvalidTransition(TetherError):
    """The job's state does not allow what was asked (e.g. retry of a queued job)."""


class StaleAttempt(TetherError):
    """A fenced write was refused: this attempt no longer owns the job.

    Raised by complete, fail, release and progress when the row's
    ``(id, attempt, locked_by)`` no longer matches, i.e. the lease lapsed, the
    reaper moved the job on, and possibly another attempt now owns it; and by
    progress at or past the attempt's timeout deadline, where no lease is left
    to renew and the reaper is about to time the attempt out. Nothing was
    changed. The handler's side effects may still have happened, which is
    why delivery is at-least-once and handlers dedupe on ``(job_id, attempt)``.
    """

    def __init__(self, job_id: int, attempt: int, worker: str, op: str) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.worker = worker
        self.op = op
        super().__init__(
            f"{op} refused for job {job_id} attempt {attempt} by worker {worker}: "
            "this attempt no longer owns the job (its lease lapsed or its timeout passed, and the job "
            "was or will be recovered, finished or re-claimed); nothing was changed"
        )


class JobFailed(TetherError):
    """``app.wait``: the job ended dead. ``job`` is the finished ``Job`` (its
    attempts included), ``error`` its last error."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.job_id = job.id
        self.error = job.last_error
        super().__init__(f"job {job.id} ({job.task}) is dead after {job.attempts_used} attempt(s): "
                         f"{job.last_error or 'no error recorded'}")
