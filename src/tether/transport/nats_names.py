"""Names and settings of the NATS transport: the stream prefix, each queue's
subject and durable consumer, and the timer options (no nats-py needed)."""

from __future__ import annotations

import math
import re

from ..config import validate_queue
from ..errors import ConfigError

__all__ = ["consumer_name", "subject_for", "validate_prefix"]

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
