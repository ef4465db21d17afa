"""Finding and acting on many jobs (issue 43): ``app.jobs()``,
``app.count_jobs()``, ``app.cancel_many()``, ``app.retry_many()``,
``app.delete_many()`` and ``app.rerun()``, a mixin of ``Tether`` in a module
of its own (app.py stays small).

The bulk actions walk the matching jobs in id order, a bounded batch per
statement (``BATCH``): no round trip per job, and no statement that holds
thousands of rows locked while workers and the reaper run beside it. A
cancel or delete passes over a row another statement holds at that moment
(SKIP LOCKED) and walks again until a walk changes nothing, so such a job is
taken on the next walk; a retry waits for such a row instead (store/many.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import ConfigError, InvalidTransition
from .events import Event, Events, ending_event
from .model import FINISHED_STATES, Job, JobState
from .payload import check_job_id
from .search import MAX_PAGE, JobFilter, JobPage
from .store import Store
from .store.many import Ended
from .transport import Transport, announce

__all__ = ["BATCH", "ManyJobsApp", "Progress"]

#: jobs per statement of a bulk action
BATCH = 1000
#: walks of a cancel or delete at most (each after the first takes only what
#: the one before passed over while another statement held it)
MAX_WALKS = 10
#: called with the number of jobs each batch of a bulk action affected (a CLI's progress bar)
Progress = Callable[[int], None]
_UNFINISHED = tuple(str(s) for s in JobState if s not in FINISHED_STATES)


class ManyJobsApp:
    """The app's methods over many jobs (``Tether`` provides the store and the transport)."""

    @property
    def store(self) -> Store:
        raise NotImplementedError

    transport: Transport
    events: Events

    def _typed(self, job: Job) -> Job:
        raise NotImplementedError

    def jobs(self, *, limit: int = 100, after: str | None = None, **filters: Any) -> JobPage:
        """A page of the jobs matching the filters (search.FILTER_NAMES:
        state, queue, task, tags, meta, args, created_after, created_before,
        finished_after, finished_before; combined with AND), newest first,
        without their attempts (``get_job`` has them). ``after``: the page's
        ``next`` before it, with the same filters (a cursor of other filters
        is refused: ConfigError)."""
        f = JobFilter.of(filters, "app.jobs")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
            raise ConfigError(f"app.jobs: limit must be an int from 1 to {MAX_PAGE}, got {limit!r}")
        before = None if after is None else f.read_cursor(after)
        found, cursor = f.page(self.store.search_jobs(f, limit=limit + 1, before_id=before), limit)
        return JobPage(jobs=[self._typed(j) for j in found], next=cursor)

    def count_jobs(self, **filters: Any) -> int:
        """How many jobs match the filters (those of ``jobs``)."""
        return self.store.count_jobs(JobFilter.of(filters, "app.count_jobs"))

    def cancel_many(self, *, all: bool = False, progress: Progress | None = None, **filters: Any) -> int:
        """Cancel every job the filters match: a queued one at once, a running
        one through its cancel request (its worker's next heartbeat passes it
        to the handler). Returns how many: cancelled and asked. Finished jobs
        are left as they are; a filter that matches nothing returns 0. No
        filter at all is refused unless ``all=True``. As ``cancel``, each job
        cancelled at once fires ``job.cancelled`` (after its batch commits;
        a running one's fires at its worker when it ends); with no hook
        subscribed the batches read nothing more."""
        f = _bulk_filter("cancel_many", filters, all)

        def step(after: int) -> tuple[int, int | None]:
            if not self.events.active:
                return self.store.cancel_batch(f, after_id=after, limit=BATCH)
            ended: list[Ended] = []
            batch = self.store.cancel_batch(f, after_id=after, limit=BATCH, ended=ended)
            name = ending_event(JobState.CANCELLED)
            for job_id, task, queue in ended:
                self.events.emit(Event(name, job_id=job_id, task=task, queue=queue, state=JobState.CANCELLED))
            return batch

        return _walk(step, progress, again=True)

    def retry_many(self, *, all: bool = False, progress: Progress | None = None, **filters: Any) -> int:
        """Every dead or cancelled job the filters match back to queued, due
        now, with an attempt left (as ``retry``); other jobs are left as they
        are, and so is a job whose dedup key an active job holds. Returns how
        many. No filter at all is refused unless ``all=True``."""
        f = _bulk_filter("retry_many", filters, all)

        def step(after: int) -> tuple[int, int | None]:
            retried, last = self.store.retry_batch(f, after_id=after, limit=BATCH)
            if retried and self.transport.delivers:
                announce(self.transport, retried, retry=True)
            return len(retried), last

        return _walk(step, progress, again=False)

    def delete_many(self, *, all: bool = False, progress: Progress | None = None, **filters: Any) -> int:
        """Delete the finished jobs the filters match, with their attempts.
        Refused (InvalidTransition, nothing deleted) when the filters match
        queued or running jobs too: say ``state=`` (succeeded, dead,
        cancelled), or cancel them first. No filter at all is refused unless
        ``all=True``. Returns how many were deleted."""
        f = self._deletable(filters, all)
        return _walk(lambda after: self.store.delete_batch(f, after_id=after, limit=BATCH), progress, again=True)

    def count_deletable(self, *, all: bool = False, **filters: Any) -> int:
        """How many jobs ``delete_many`` would delete with these filters now
        (its dry run): it refuses what ``delete_many`` refuses."""
        return self.store.count_jobs(self._deletable(filters, all))

    def _deletable(self, filters: dict[str, Any], everything: bool) -> JobFilter:
        f = _bulk_filter("delete_many", filters, everything)
        if f.states is not None and set(f.states) - set(FINISHED_STATES):
            raise ConfigError(f"delete_many deletes finished jobs only ({', '.join(FINISHED_STATES)}), "
                              f"not {', '.join(sorted(set(f.states) - set(FINISHED_STATES)))} ones")
        unfinished = f.restricted(_UNFINISHED)
        live = self.store.count_jobs(unfinished) if unfinished.states else 0
        if live:
            raise InvalidTransition(f"delete_many: {live} of the jobs the filter matches are not finished (queued "
                                    "or running); nothing was deleted. Add state= (succeeded, dead, cancelled) "
                                    "to delete only the finished ones, or cancel the others first")
        return f

    def rerun(self, job_id: int) -> int:
        """A new job with the finished job's task, args and options (queue,
        priority, attempts, lease, timeout, backoff, meta, tags, keys), queued
        now; its ``rerun_of`` is ``job_id``. Returns the new job's id.
        JobNotFound; InvalidTransition for a job not finished."""
        new_id = self.store.rerun(check_job_id(job_id))
        if self.transport.delivers:
            job = self.store.get_job(new_id)
            if job is not None:
                announce(self.transport, [(new_id, job.queue)])
        return new_id


def _bulk_filter(what: str, filters: dict[str, Any], everything: bool) -> JobFilter:
    f = JobFilter.of(filters, what)
    if f.is_empty() and everything is not True:
        raise ConfigError(f"{what} without a filter would act on every job; pass all=True to mean that")
    return f


def _walk(step: Callable[[int], tuple[int, int | None]], progress: Progress | None, *, again: bool) -> int:
    total = 0
    for _ in range(MAX_WALKS if again else 1):
        after: int | None = 0
        this_walk = 0
        while after is not None:
            n, after = step(after)
            this_walk += n
            if progress is not None and n:
                progress(n)
        total += this_walk
        if not this_walk:
            break
    return total
