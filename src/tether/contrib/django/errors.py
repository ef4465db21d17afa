"""The exceptions a task's ``errors`` name for attempts that ended without an
exception of their own (``TaskError.exception_class`` imports them)."""

from __future__ import annotations

__all__ = ["AttemptTimedOut", "LeaseExpired"]


class LeaseExpired(Exception):
    """The attempt's worker stopped renewing its lease (it died, froze or lost
    the database) and the reaper took the job back."""


class AttemptTimedOut(Exception):
    """The attempt ran past its task's ``timeout``."""
