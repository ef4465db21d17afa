"""The job id an enqueue returns: an int that says whether it was a duplicate."""

from __future__ import annotations

__all__ = ["DuplicateJobId", "JobId", "job_id"]


class JobId(int):
    """A job id as enqueue returns it: an int, and ``duplicate``: True when
    no job was added because one already held the ``dedup_key`` (its id is
    this one). ``DuplicateJobId`` is the one class whose ``duplicate`` is
    True, so that a plain id costs no more than an int subclass."""

    __slots__ = ()
    duplicate: bool = False


class DuplicateJobId(JobId):
    __slots__ = ()
    duplicate = True


def job_id(value: int, duplicate: bool = False) -> JobId:
    """``value`` as enqueue returns it (see JobId)."""
    return DuplicateJobId(value) if duplicate else JobId(value)
