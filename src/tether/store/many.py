"""Finding and acting on many jobs (issue 43): a part of the store interface
(``Store`` inherits ``ManyJobs``). The filters are a checked ``JobFilter``
(search.py); each method is one statement or one short transaction, and the
bulk ones act on a bounded batch of the matching jobs in id order, above
``after_id``, so that the caller (app ``many.py``) repeats them, batch by batch,
with no round trip per job and no long lock."""

from __future__ import annotations

import abc
from datetime import datetime
from typing import NoReturn

from ..errors import InvalidTransition, JobNotFound
from ..model import Job
from ..search import JobFilter

__all__ = ["Batch", "Ended", "ManyJobs", "not_rerun"]

#: (jobs affected, the id to pass as after_id for the next batch; None: no more)
Batch = tuple[int, int | None]
#: a job a bulk cancel ended at once: (id, task, queue), for its job.cancelled event
Ended = tuple[int, str, str]


class ManyJobs(abc.ABC):
    @abc.abstractmethod
    def search_jobs(self, f: JobFilter, *, limit: int, before_id: int | None = None) -> list[Job]:
        """Up to ``limit`` jobs matching ``f`` with an id below ``before_id``,
        newest (highest id) first, without their attempts."""

    @abc.abstractmethod
    def count_jobs(self, f: JobFilter) -> int:
        """How many jobs match ``f``."""

    @abc.abstractmethod
    def cancel_batch(self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None,
                     ended: list[Ended] | None = None) -> Batch:
        """Of the next ``limit`` queued or running jobs matching ``f`` above
        ``after_id`` (id order): the queued ones cancelled at once, the running
        ones given a cancel request (their worker's next heartbeat passes it to
        the handler). Affected: both. ``ended``: a list to append each job
        the batch cancelled at once to (for the app's ``job.cancelled``
        events; None, the default, reads nothing more)."""

    @abc.abstractmethod
    def retry_batch(
        self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None
    ) -> tuple[list[tuple[int, str]], int | None]:
        """Of the next ``limit`` dead or cancelled jobs matching ``f`` above
        ``after_id``: each back to queued, due now, with an attempt left, as
        ``retry`` does; (id, queue) of each retried (for the caller to announce
        on a transport), and the next ``after_id``. A job whose dedup key an
        active job holds is left as it is."""

    @abc.abstractmethod
    def delete_batch(self, f: JobFilter, *, after_id: int, limit: int) -> Batch:
        """Delete the next ``limit`` finished jobs matching ``f`` above
        ``after_id``, with their attempts rows; never a queued, waiting or
        running one."""

    @abc.abstractmethod
    def rerun(self, job_id: int, *, now: datetime | None = None) -> int:
        """A new queued job, due now, with the finished job ``job_id``'s task,
        args and options (queue, priority, max_attempts, lease_ttl, timeout,
        backoff, meta, tags, exclusive key), ``rerun_of`` = ``job_id``; its id.
        JobNotFound, or InvalidTransition for a job not finished."""


def not_rerun(job_id: int, state: str | None) -> NoReturn:
    """Why ``rerun`` inserted nothing, from the job's state (None: no such job)."""
    if state is None:
        raise JobNotFound(f"no job {job_id}")
    if state in ("succeeded", "dead", "cancelled"):
        raise InvalidTransition(f"job {job_id} cannot be rerun: an active job holds its dedup key")
    raise InvalidTransition(f"job {job_id} is {state}; only a finished job can be rerun")
