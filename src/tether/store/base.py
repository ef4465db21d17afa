"""The store interface: the only seam between tether and a database.

**Internal**: this interface may change between releases without notice. The
runtime and the faces (CLI, dashboard) talk to a ``Store``; only
``tether.store.open_store`` names a concrete backend.

Every method is one statement or one short transaction, and every method that
a worker calls about a job it holds is *fenced*: it matches the row on
``id AND attempt AND locked_by AND state = 'running'``. A fenced write that
matches nothing changes nothing and raises ``StaleAttempt`` (heartbeat reports
``Beat.LOST`` instead, since a heartbeat is how a worker learns it lost a job).

Times come from the database clock. Every time-dependent method takes an
optional ``now`` so tests can move the clock without sleeping; production code
never passes it.

Methods are thread-safe: each backend gives every thread its own connection.
``enqueue_async`` may be awaited on any event loop, one after another or at once.
A worker's round (``claim_async``, ``complete_async``, ``complete_and_claim_async``)
is awaited on the worker's loop, at most a few at once.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from datetime import datetime
from functools import partial
from typing import TypeVar

from ..model import (
    LIVE_WITHIN,
    Attempt,
    Beat,
    Buried,
    ClaimedJob,
    DueJob,
    Job,
    JobId,
    JobState,
    NewJob,
    Outcome,
    Reaped,
    Stats,
    UnknownTaskJobs,
)
from .buckets import Buckets
from .control import JobControl, Schedules
from .flows import Batches, Workflows
from .many import ManyJobs
from .pruning import check_prune
from .push import Listener, PushChannels
from .shared_tx import SharedTransactions
from .worker_rows import WorkerRows

T = TypeVar("T")

__all__ = ["Listener", "Store", "check_prune"]


class Store(PushChannels, SharedTransactions, Workflows, Batches, JobControl, ManyJobs, WorkerRows, Schedules,
            abc.ABC):
    backend: str
    #: how often an idle worker polls when no push channel wakes it (seconds)
    default_poll_interval: float
    #: whether a worker should claim ahead (prefetch) while its handlers are
    #: short: worth it where the statement runs in another process (a database
    #: server), whose work then overlaps the worker's own
    claims_ahead: bool = True
    #: while prefetching, a claim may take this many times the worker's claim
    #: batch (up to its MAX_CLAIM_BATCH): more where each round costs more
    prefetch_factor: int = 2
    #: whether claims carry the successes waiting however many jobs they take
    #: (else only up to the worker's CARRY_MAX): where each round is a request
    #: of its own, one round fewer gains more than a report beside the claim
    always_carry: bool = False
    #: while prefetching, how many claims a worker may have sent and not yet
    #: had answered (each of up to a prefetch batch): more than one where a
    #: round passes through more than one process, whose work then overlaps
    claims_in_flight: int = 1

    def round_connections(self, size: int) -> None:
        """On a worker's event loop: how many statements of its rounds may be
        in flight at once (PostgreSQL: its round connections here, one opened now)."""

    # -- schema ---------------------------------------------------------------
    @abc.abstractmethod
    def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied."""

    @abc.abstractmethod
    def check_schema(self) -> None:
        """Raise SchemaMissing unless every migration has been applied."""

    @abc.abstractmethod
    def schema_objects(self) -> dict[str, list[str]]:
        """Tables and their columns, plus indexes, as the database reports them."""

    # -- producers --------------------------------------------------------------
    @abc.abstractmethod
    def enqueue(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        """Insert jobs in one statement; return their ids in order.

        A job whose ``dedup_key`` matches an active (queued or running) job is not
        inserted; the active job's id is returned in its place.
        """

    async def enqueue_async(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        """``enqueue`` for a coroutine. This default runs it on a worker thread;
        PostgreSQL talks to the database from the event loop itself."""
        return await asyncio.to_thread(self.enqueue, jobs, now=now)

    @abc.abstractmethod
    def get_job(self, job_id: int) -> Job | None: ...

    @abc.abstractmethod
    def list_jobs(
        self, *, state: str | None = None, queue: str | None = None, task: str | None = None, limit: int = 50
    ) -> list[Job]: ...

    @abc.abstractmethod
    def recent_attempts(self, outcomes: Sequence[Outcome], *, limit: int = 50) -> list[Attempt]:
        """Finished attempts with one of these outcomes, the most recently finished first."""

    @abc.abstractmethod
    def throughput(self, *, buckets: int, bucket_seconds: int, now: datetime | None = None) -> Buckets:
        """Finished attempts by outcome in each of ``buckets`` buckets of
        ``bucket_seconds``, oldest first, every bucket present (zeros too).

        Buckets are aligned to the epoch (a minute bucket starts on the
        minute) and the last is the one ``now`` falls in; an attempt counts
        in the bucket its ``finished_at`` falls in, an edge in the later one.
        At most ``buckets.MAX_BUCKETS`` buckets of at most a day (ConfigError).
        """

    @abc.abstractmethod
    def cancel(self, job_id: int, *, now: datetime | None = None) -> JobState:
        """Queued: cancelled at once. Running: a cancel request for its worker.

        Returns the state after the call; raises JobNotFound, or
        InvalidTransition for a job already finished.
        """

    @abc.abstractmethod
    def retry(self, job_id: int, *, now: datetime | None = None) -> str:
        """A dead or cancelled job back to queued (due now), with at least one
        attempt left; returns its queue (for the caller to announce it on a
        transport). Raises JobNotFound, or InvalidTransition for a job in
        another state or whose dedup key an active job holds again."""

    @abc.abstractmethod
    def stats(self) -> Stats:
        """Counts, oldest due job per queue, live workers, and ``unknown``: the
        due jobs whose task no live worker knows (``unknown_tasks()``)."""

    @abc.abstractmethod
    def unknown_tasks(self, *, since: float = LIVE_WITHIN, now: datetime | None = None) -> list[UnknownTaskJobs]:
        """Queued, due jobs by (queue, task) whose task no worker seen in the
        last ``since`` seconds (and not stopped) knows: no such worker serves
        the queue and registered a handler of that name. A worker registered
        without its tasks (an older tether) counts as knowing every task."""

    @abc.abstractmethod
    def bury_unknown(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[Buried]:
        """End dead (reason recorded in ``last_error``) up to ``limit`` queued
        jobs on ``queues`` due for at least ``grace`` seconds,
        whose task no worker seen in the last ``grace`` seconds (stopped or
        not) that serves their queue knows. Jobs of a task any such worker
        knows are never touched."""

    def expire(self, worker: str, *, limit: int, now: datetime | None = None) -> list[Buried]:
        """End up to ``limit`` queued jobs whose ``expires_at`` has passed:
        cancelled, with an attempts row of outcome ``expired`` recorded for
        ``worker`` (no claim ever starts such a job: the claims judge expiry
        themselves). The oldest expiry first; safe on every worker at once.
        A store that cannot (a tether server's client: the server sweeps)
        raises NotImplementedError."""
        raise NotImplementedError(f"the {self.backend} store does not expire jobs; its server does")

    # -- workers: claim, heartbeat, report (all fenced) ---------------------------
    @abc.abstractmethod
    def claim(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        """Take up to ``limit`` due jobs in one statement: running, leased, attempt+1.

        With ``tasks``, only jobs of those tasks (the worker's handlers): a job
        of any other task stays queued, untouched, for a worker that knows it,
        and reading past such jobs costs nothing however many wait (the claim
        walks an index by (queue, task)). None: any task (tools and tests)."""

    @abc.abstractmethod
    def claim_ids(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        """Claim these jobs (ids a transport delivered) as ``claim`` would, each
        only if it is still queued, due, on one of ``queues`` and (with
        ``tasks``) of one of those tasks; ids left out of the answer are owned
        by someone, finished, not due, of another task, or unknown."""

    @abc.abstractmethod
    def due_unclaimed(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[DueJob]:
        """Queued jobs on ``queues`` that are due and that no delivery seems to
        carry: due for more than ``grace`` seconds, or due later than they
        were created (delayed jobs, retries: nothing published them). Up to ``limit``, in
        claim order."""

    @abc.abstractmethod
    def heartbeat(
        self,
        worker: str,
        held: Sequence[tuple[int, int]],
        lease_ttl: float,
        *,
        now: datetime | None = None,
    ) -> dict[int, Beat]:
        """Renew every lease in ``held`` ((id, attempt) pairs) in one statement.

        Also marks the worker as seen. Jobs whose fence fails come back LOST,
        and so do jobs at or past their attempt's deadline (claimed_at +
        timeout): a lease never outlives it, so none is left to renew; those
        rows are not written, and the reaper times the attempt out.
        """

    @abc.abstractmethod
    def progress(
        self,
        worker: str,
        job_id: int,
        attempt: int,
        fraction: float | None,
        message: str | None,
        lease_ttl: float,
        *,
        now: datetime | None = None,
    ) -> bool:
        """Record progress and renew the lease; return True if a cancel was requested.

        Fenced like ``heartbeat``, and refused like it at or past the attempt's
        deadline: StaleAttempt, nothing written."""

    @abc.abstractmethod
    def complete(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *, now: datetime | None = None
    ) -> set[int]:
        """Mark (id, attempt, result_json) rows succeeded in one statement.

        Returns the ids accepted; an id missing from the answer failed its fence.
        """

    def complete_and_claim(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        """``complete(done)`` and then ``claim(...)``: a worker's usual round
        trip. A backend that can does both in one statement (PostgreSQL) or one
        transaction (SQLite); the completions are fenced exactly as ``complete``
        fences them. Returns (ids accepted, jobs claimed)."""
        accepted = self.complete(worker, done, now=now) if done else set()
        return accepted, self.claim(worker, queues, limit, lease_ttl, now=now, tasks=tasks)

    def complete_and_claim_ids(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        """``complete(done)`` and then ``claim_ids(ids, ...)``: a delivering
        transport's round, as ``complete_and_claim`` is a database claim's. A
        backend that can does both in one statement or transaction; the
        completions are fenced as ``complete`` fences them, and the claim sees
        them done (their slots and exclusive keys free). This default (the
        HTTP store's) is the two calls, one after the other."""
        accepted = self.complete(worker, done, now=now) if done else set()
        return accepted, self.claim_ids(worker, ids, queues, lease_ttl, now=now, tasks=tasks)

    # -- a worker's round, from its event loop ----------------------------------------
    # ``claim`` and the rest for a coroutine: through ``_round``, on ``executor`` (the worker's
    # database threads) unless the backend's ``_round`` says otherwise (SQLite: on the loop while
    # the write lock is free, rounds.py). PostgreSQL sends the statement from the loop itself.
    async def _round(self, executor: Executor | None, call: Callable[[], T]) -> T:
        # in the caller's context (a tether server's request collects what its endings said: server/flows.py)
        return await asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, call)

    async def claim_async(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return await self._round(executor, partial(self.claim, worker, queues, limit, lease_ttl, now=now, tasks=tasks))

    async def claim_ids_async(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        """``claim_ids`` for a coroutine (a delivering transport's claim)."""
        return await self._round(executor, partial(self.claim_ids, worker, ids, queues, lease_ttl, now=now,
                                                   tasks=tasks))

    async def complete_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *,
        executor: Executor | None = None, now: datetime | None = None,
    ) -> set[int]:
        return await self._round(executor, partial(self.complete, worker, done, now=now))

    async def complete_and_claim_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return await self._round(
            executor, partial(self.complete_and_claim, worker, done, queues, limit, lease_ttl, now=now, tasks=tasks))

    async def complete_and_claim_ids_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return await self._round(
            executor, partial(self.complete_and_claim_ids, worker, done, ids, queues, lease_ttl, now=now, tasks=tasks))

    @abc.abstractmethod
    def fail(
        self,
        worker: str,
        job_id: int,
        attempt: int,
        *,
        outcome: Outcome,
        error: str,
        traceback: str | None = None,
        retry: bool = True,
        now: datetime | None = None,
        delay: float | None = None,
    ) -> JobState:
        """Fenced: retry with backoff, or dead once the budget is spent (or when
        ``retry`` is False). ``outcome`` CANCELLED ends the job cancelled.
        ``delay``: seconds before the retry, instead of the exponential backoff.
        ``outcome`` SNOOZED (``tether.Retry``) queues the job again after
        ``delay`` without spending its budget (as ``release`` does); DISCARDED
        comes with ``retry=False`` (``tether.Discard``): dead at once."""

    @abc.abstractmethod
    def release(self, worker: str, job_id: int, attempt: int, *, now: datetime | None = None) -> JobState:
        """Fenced graceful hand-back to queued, without spending the budget; or,
        when a cancel is pending, the job's ending: cancelled (the answer says which)."""

    # -- maintenance --------------------------------------------------------------
    @abc.abstractmethod
    def reap(self, limit: int, *, now: datetime | None = None) -> list[Reaped]:
        """Send up to ``limit`` lapsed leases, oldest first, down the retry-or-dead path."""

    @abc.abstractmethod
    def db_now(self) -> datetime:
        """The database clock (the machine's clock for SQLite)."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Drop every table tether created here (``tether chaos`` cleans up its
        scratch schema with it). Irreversible."""

    def integrity_check(self) -> list[str]:
        """Problems the database reports with its own storage; empty when fine."""
        return []

    @abc.abstractmethod
    def close(self) -> None: ...

    async def aclose(self) -> None:
        """``close`` for a coroutine, off its event loop (closing may wait on
        a backend's threads)."""
        await asyncio.to_thread(self.close)
