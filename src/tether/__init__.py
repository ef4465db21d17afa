"""tether: a Python job queue in which the database owns every job.

A job's owner is a lease on the job row, granted by the claim, renewed by
heartbeats, fenced by the claim's attempt token, and taken back by a set-based
reaper when it lapses. Delivery is at-least-once: handlers get ``ctx.job_id``
and ``ctx.attempt`` to deduplicate on.
"""

from __future__ import annotations

from ._version import __version__
from .app import Task, TaskCall, Tether
from .config import Timers
from .context import CancelReason, Discard, JobCancelled, JobContext, Retry
from .errors import (
    ArgsMisfit,
    ArgumentsError,
    ConfigError,
    DatabaseUnavailable,
    InvalidDSN,
    InvalidTransition,
    JobFailed,
    JobNotFound,
    PayloadError,
    ScheduleNotFound,
    SchemaMissing,
    StaleAttempt,
    TetherError,
    UnknownTask,
)
from .model import Attempt, Job, JobId, JobState, KeyLimits, Limits, Outcome, QueueLimits
from .spec import JobSpec

__all__ = [
    "ArgsMisfit",
    "ArgumentsError",
    "Attempt",
    "CancelReason",
    "ConfigError",
    "DatabaseUnavailable",
    "Discard",
    "InvalidDSN",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobId",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "KeyLimits",
    "Limits",
    "Outcome",
    "PayloadError",
    "QueueLimits",
    "Retry",
    "ScheduleNotFound",
    "SchemaMissing",
    "StaleAttempt",
    "Task",
    "TaskCall",
    "Tether",
    "TetherError",
    "Timers",
    "UnknownTask",
    "__version__",
]
