"""Names and settings of the NATS transport: the stream prefix, each queue's
subject and durable consumer, the sweep's message ids, and the timer options
(no nats-py needed)."""

from __future__ import annotations

import math
import re
import time

from ..config import validate_queue
from ..errors import ConfigError
from ..model import DueJob

__all__ = ["consumer_name", "subject_for", "sweep_msg_id", "validate_prefix"]

_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,48}$")


def validate_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ConfigError(
            f"NATS prefix {prefix!r} is not usable as a stream name and subject token: use letters, "
            "digits, '_' and '-', at most 48 characters"
        )
    return prefix


def subject_for(prefix: str, queue: str) -> str:
    """The subject of one queue: ``.`` separates subject tokens, so it becomes ``~``
    (which queue names cannot contain, so the mapping is one to one)."""
    return f"{prefix}.jobs.{validate_queue(queue).replace('.', '~')}"


def consumer_name(prefix: str, queue: str) -> str:
    return f"{prefix}_{validate_queue(queue).replace('.', '~')}"


def _seconds(value: object, what: str) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    return seconds


def sweep_msg_id(prefix: str, due: DueJob, period: float) -> str:
    """The sweep's message id for a due job: one per (job, attempt, run_at) and
    ``period`` (sweep_grace) of the wall clock. Every worker's sweep finds the
    same due job, and JetStream keeps only the first copy within its duplicate
    window; so a job nothing carries is published once a period, however many
    workers sweep. The period is in the id because a job may need a message
    again after its last one was delivered: a claim that held it back for its
    queue's room or its exclusive key acked that message, and the job stays
    queued. Without it the duplicate window (2 minutes) dropped every
    republish after the first (issue 22: chaos over NATS left such jobs
    queued at its drain's end)."""
    slot = int(time.time() // period)
    return f"{prefix}.{due.id}.{due.attempt}.{round(due.run_at.timestamp() * 1e6)}.{slot}"
