"""Retry policies: how an attempt that raised is reported (issue 20).

The executor hands every exception a handler raised (other than cancellation
and lost ownership, which it settles itself) to ``on_error``, which reads the
task's options and says what ``Store.fail`` records:

- ``tether.Retry(delay)``: ``snoozed``, queued again after ``delay`` seconds,
  the budget not spent;
- ``tether.Discard(reason)``: ``discarded``, dead at once; raised ``from``
  an error, with that error's traceback (what went wrong, not where it was
  discarded);
- an exception outside the task's ``retry_on``: ``failed``, dead at once;
- any other: ``failed``, retried while the budget lasts, after the task's
  ``retry_backoff``: the exponential backoff the store computes from the
  job's own base, or, for a callable, ``retry_backoff(attempt)`` seconds
  (at most ``MAX_DELAY``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from ..config import MAX_DELAY
from ..context import Discard, Retry
from ..model import ClaimedJob, Outcome
from ..payload import describe, safe_str, traceback_text

__all__ = ["Failure", "on_error"]

log = logging.getLogger("tether.worker")


class Failure(NamedTuple):
    """``Reporter.fail``'s arguments after the running attempt."""

    outcome: Outcome
    error: str
    traceback: str | None
    retry: bool
    delay: float | None = None


def on_error(options: Any, job: ClaimedJob, exc: BaseException) -> Failure:
    """What to record for ``exc``, raised by ``job``'s handler; ``options`` are
    the task's (``retry_on``, ``retry_backoff``; None: the defaults)."""
    if isinstance(exc, Retry):
        return Failure(Outcome.SNOOZED, f"snoozed for {exc.delay:g}s", None, True, exc.delay)
    if isinstance(exc, Discard):
        cause = exc.__cause__
        return Failure(Outcome.DISCARDED, f"discarded: {safe_str(exc.reason)}",
                       traceback_text(cause) if cause is not None else None, False)
    error = describe(exc)
    retry_on: tuple[type[BaseException], ...] | None = getattr(options, "retry_on", None)
    if retry_on is not None and not isinstance(exc, retry_on):
        names = ", ".join(t.__name__ for t in retry_on) or "nothing"
        return Failure(Outcome.FAILED, f"{error} (not retried: retry_on is {names})", traceback_text(exc), False)
    backoff = getattr(options, "retry_backoff", None)
    return Failure(Outcome.FAILED, error, traceback_text(exc), True, _delay(backoff, job) if callable(backoff) else None)


def _delay(backoff: Callable[[int], float], job: ClaimedJob) -> float | None:
    """``backoff(attempt)`` checked; None (the store's own backoff) when it
    raises or answers something other than a finite number of seconds >= 0."""
    try:
        value = backoff(job.attempt)
    except Exception as exc:
        log.warning("job %s: retry_backoff(%s) raised %s: %s; using the default backoff", job.id, job.attempt,
                    type(exc).__name__, exc)
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        log.warning("job %s: retry_backoff(%s) returned %r, not seconds >= 0; using the default backoff", job.id,
                    job.attempt, value)
        return None
    if value > MAX_DELAY:
        # as the fixed backoff is capped (at an hour, by the store): an answer
        # past what a job may wait would be refused by the database
        log.warning("job %s: retry_backoff(%s) returned %r seconds, over the %.0f (100 years) a job may wait; "
                    "using %.0f", job.id, job.attempt, value, MAX_DELAY, MAX_DELAY)
        return MAX_DELAY
    return float(value)
