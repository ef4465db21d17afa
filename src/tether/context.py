"""JobContext: what a handler gets as its first argument.

``ctx.job_id`` and ``ctx.attempt`` together name this delivery. Delivery is
at-least-once: a worker that was paused or cut off may still be running an
attempt that was already handed to someone else, so side effects must be
idempotent, keyed on ``(job_id, attempt)`` or on ``job_id`` alone.

Writes to tether's own database can do better: ``ctx.transaction()`` commits
them together with the job's success, fenced by this attempt, so they land
exactly once per job (see ``JobContext.transaction``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

from .config import MAX_DELAY
from .errors import ConfigError, StaleAttempt, TetherError
from .model import ClaimedJob, Job

__all__ = ["CancelReason", "Discard", "JobCancelled", "JobContext", "JoinedTransaction", "MemberBatch", "Retry",
           "Transaction"]


class CancelReason:
    REQUESTED = "cancel requested"
    LOST = "lost ownership"  # the fence failed, or the lease could not be renewed in time
    TIMED_OUT = "timed out"
    SHUTDOWN = "worker shutting down"


#: the most member ids ``ctx.batch.member_ids`` reads in one page
MAX_MEMBER_PAGE = 10_000


class MemberBatch:
    """``ctx.batch``: the batch of a running member (issue 42)."""

    def __init__(self, store: Any, job_id: int) -> None:
        self._store = store
        self._job_id = job_id

    @property
    def id(self) -> int | None:
        """The batch this job is a member of, or a callback of."""
        return None if self._store is None else self._store.job_batch(self._job_id, callback=True)

    def info(self) -> Any:
        """The batch's ``BatchInfo`` (its members' counts by state, its callbacks' job
        ids), for a member or a callback; None for a job of no batch."""
        batch_id = self.id
        return None if batch_id is None else self._store.get_batch(batch_id)

    def member_ids(self, *, after: int = 0, limit: int = 1000) -> list[int]:
        """A page of the batch's member job ids, ascending, those above
        ``after`` (at most ``limit``, 1 to 10,000): pass the last id of a page
        as ``after`` for the next; an empty page is the end. For a member or a
        callback; [] for a job of no batch."""
        if not 1 <= limit <= MAX_MEMBER_PAGE:
            raise ConfigError(f"limit must be between 1 and {MAX_MEMBER_PAGE}, got {limit!r}")
        batch_id = self.id
        return [] if batch_id is None else list(self._store.batch_members(batch_id, after=after, limit=limit))

    def iter_member_ids(self, *, page: int = 1000) -> Iterator[int]:
        """Every member job id, ascending, read a page at a time."""
        after = 0
        while ids := self.member_ids(after=after, limit=page):
            yield from ids
            after = ids[-1]

    def add(self, spec: Any) -> int:
        """Add a member (a job spec, ``task.spec(**args)``); its job id."""
        return self.add_specs([spec])[0]

    def add_specs(self, specs: list[Any]) -> list[int]:
        """Add several members in one transaction; their job ids."""
        if self._store is None:
            raise ConfigError("ctx.batch needs a worker's context (this one has no store)")
        for spec in specs:
            if getattr(spec, "job", None) is None:
                raise ConfigError(f"ctx.batch.add() takes a job spec, task.spec(**args), not a {type(spec).__name__}")
        ids: list[int] = self._store.batch_add(self._job_id, [spec.job for spec in specs])
        return ids


class JobCancelled(TetherError):
    """Raised by ``ctx.raise_if_cancelled()``; the worker maps it to the right ending.
    Also raised by ``app.wait`` for a job that ended cancelled (``job``: the
    finished ``Job``)."""

    def __init__(self, job_id: int, reason: str, job: Job | None = None) -> None:
        self.job_id = job_id
        self.reason = reason
        self.job = job
        super().__init__(f"job {job_id}: {reason}")


class Transaction(Protocol):
    """What ``ctx.transaction()`` returns: ``with`` it in a ``def`` handler,
    ``async with`` it in an ``async def`` one; either gives the connection
    (psycopg on PostgreSQL, sqlite3 on SQLite)."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> bool: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: object) -> bool: ...


class JoinedTransaction(Protocol):
    """What ``ctx.transaction_on(connection)`` returns: ``with`` it inside a
    transaction of yours on that connection (``with ctx.transaction_on(conn)
    as tx:`` binds this same handle); the block's end writes the attempt's
    fenced success there, uncommitted. Then say how your commit went:
    ``committed()``, or ``failed()`` if it rolled back or raised."""

    def __enter__(self) -> JoinedTransaction: ...

    def __exit__(self, *exc: object) -> bool: ...

    def committed(self) -> None: ...

    def failed(self) -> None: ...


#: Guards every context's cancel signal. Cancels are rare and brief, so one lock
#: serves all; a lock and an Event per attempt cost more than the rest of the
#: context (a tenth of the event loop's time on no-op jobs at high concurrency).
_CANCEL_LOCK = threading.Lock()


class JobContext:
    """Per-attempt handle: identity, progress reporting and the cancel signal."""

    def __init__(
        self,
        job: ClaimedJob,
        worker_id: str,
        report_progress: Callable[[ClaimedJob, float | None, str | None], bool],
        on_cancel: Callable[[JobContext], None] | None = None,
        open_transaction: Callable[..., Any] | None = None,
        load_job: Callable[[int], Job | None] | None = None,
    ) -> None:
        """Made by the worker, one per attempt (positional: it is on the hot
        path). ``report_progress(job, fraction, message)`` writes progress and
        says whether a cancel was requested; one function serves every
        attempt, so none is made per job."""
        self._job = job
        self.worker_id = worker_id
        self._report_progress = report_progress
        self._on_cancel = on_cancel
        self._open_transaction = open_transaction
        self._load_job = load_job
        self._tags: list[str] | None = None
        self._reason: str | None = None  # set once, under _CANCEL_LOCK: the cancel signal itself
        self._event: threading.Event | None = None  # made only for a handler that waits on it

    #: the worker's store, for what a handler reads only when it asks (ctx.upstream,
    #: ctx.workflow_id): never added to the claim (issue 42). Set by the worker.
    _links: Any = None

    # -- workflows (issue 42) ---------------------------------------------------------
    @property
    def workflow_id(self) -> int | None:
        """The workflow run this job is a step of; None for an ordinary job (read when asked)."""
        if self._links is None:
            return None
        found: int | None = self._links.job_workflow(self.job_id)
        return found

    @property
    def upstream(self) -> dict[str, Any]:
        """{step name: result} of this step's direct dependencies (JSON values;
        None for one that ended dead or cancelled: ``upstream_states`` says
        which, for an ``on_failure="run"`` step). Read when first asked."""
        return {name: None if result is None else json.loads(result)
                for name, (_, result) in self._upstream().items()}

    @property
    def upstream_states(self) -> dict[str, str]:
        """{step name: the state it ended in} of this step's direct dependencies."""
        return {name: str(state) for name, (state, _) in self._upstream().items()}

    @property
    def batch_id(self) -> int | None:
        """The batch this job is a member of; None for any other job (read when asked)."""
        if self._links is None:
            return None
        found: int | None = self._links.job_batch(self.job_id)
        return found

    @property
    def batch(self) -> MemberBatch:
        """This member's batch: ``ctx.batch.add(task.spec(...))`` adds a member,
        counted before the batch can complete."""
        return MemberBatch(self._links, self.job_id)

    def _upstream(self) -> dict[str, tuple[Any, str | None]]:
        cached: dict[str, tuple[Any, str | None]] | None = self.__dict__.get("_upstream_rows")
        if cached is None:
            cached = {} if self._links is None else self._links.upstream_results(self.job_id)
            self.__dict__["_upstream_rows"] = cached
        return cached

    # -- identity -------------------------------------------------------------------
    @property
    def job_id(self) -> int:
        return self._job.id

    @property
    def attempt(self) -> int:
        """This claim's fencing token; rises by one on every claim of the job."""
        return self._job.attempt

    @property
    def task(self) -> str:
        return self._job.task

    @property
    def queue(self) -> str:
        return self._job.queue

    @property
    def args(self) -> dict[str, Any]:
        return self._job.args

    @property
    def max_attempts(self) -> int:
        return self._job.max_attempts

    @property
    def meta(self) -> dict[str, Any] | None:
        return self._job.meta

    @property
    def tags(self) -> list[str]:
        """The job's tags (its task's and its call's; ``[]``: none). Read from
        the job's row on first use (one query, which an ``async def`` handler
        waits for on its loop: read it once, early): a claim carries no tags,
        as its statements are kept short (tests/test_sqlfile.py)."""
        if self._tags is None:
            job = self._load_job(self._job.id) if self._load_job is not None else None
            self._tags = list(job.tags or []) if job is not None else []
        return list(self._tags)

    @property
    def scheduled_for(self) -> datetime | None:
        """The schedule tick this job was fired for (a timezone-aware UTC
        datetime; ``astimezone`` it for the schedule's zone); None for a job
        enqueued any other way."""
        return self._job.scheduled_for

    # -- progress (a heartbeat) -------------------------------------------------------
    def progress(self, fraction: float | None = None, message: str | None = None) -> None:
        """Record progress on the job and renew its lease (progress is a heartbeat).

        Raises ``StaleAttempt`` if this attempt no longer owns the job, or has
        reached its timeout (no lease is left to renew); the handler should
        stop: the job is, or is about to be, someone else's.
        """
        if fraction is not None and not 0.0 <= float(fraction) <= 1.0:
            raise ValueError(f"progress fraction must be between 0 and 1, got {fraction!r}")
        if message is not None and len(message) > 1000:
            message = message[:997] + "..."
        try:
            cancel_requested = self._report_progress(self._job, None if fraction is None else float(fraction), message)
        except StaleAttempt:
            self.cancel(CancelReason.LOST)
            raise
        if cancel_requested:
            self.cancel(CancelReason.REQUESTED)

    # -- the job's own database, committed with its success ----------------------------
    def transaction(self) -> Transaction:
        """A transaction on the job's own database whose commit is this
        attempt's success::

            with ctx.transaction() as conn:        # `async with` in an async def handler
                conn.execute("UPDATE accounts ...")

        The block runs in a transaction (psycopg connection on PostgreSQL,
        sqlite3 on SQLite); after it, the job's success is written in the same
        transaction, fenced as ``complete`` is (this job, this attempt, this
        worker, still running), and the transaction commits. If this attempt
        no longer owns the job (its lease lapsed and the job moved on),
        everything rolls back and ``StaleAttempt`` is raised: a zombie's writes
        never land. An exception in the block rolls back and fails the attempt
        as usual. So writes made here happen **exactly once per job**; effects
        outside the database stay at-least-once.

        Once per attempt. The handler's return value is still the job's
        result (written just after the commit; the job reads succeeded from
        the commit on). Not available through a tether server (ConfigError).
        """
        if self._open_transaction is None:
            raise ConfigError("ctx.transaction() is available to handlers a worker runs; this JobContext has no "
                              "worker behind it")
        return self._open_transaction(self)  # type: ignore[no-any-return]

    def transaction_on(self, connection: object) -> JoinedTransaction:
        """``transaction()`` inside a transaction the caller already holds on
        ``connection`` (a psycopg 3 connection not in autocommit, or a sqlite3
        connection in a transaction, to the job's own database): for a
        framework whose ORM owns the connection, as
        ``tether.contrib.django``'s ``context.transaction()`` does with
        Django's ``atomic()``. The block's end writes the fenced success on
        that connection without committing (``StaleAttempt`` if the attempt
        no longer owns the job: roll back); the caller commits at once and
        then calls ``committed()`` (or ``failed()``). ``def`` handlers only."""
        if self._open_transaction is None:
            raise ConfigError("ctx.transaction_on() is available to handlers a worker runs; this JobContext has "
                              "no worker behind it")
        return self._open_transaction(self, connection)  # type: ignore[no-any-return]

    # -- cancellation ---------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested, the attempt timed out, the worker is
        shutting down, or this attempt lost ownership of the job."""
        return self._reason is not None

    @property
    def cancel_reason(self) -> str | None:
        return self._reason

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block a thread handler until cancelled (or the timeout); True if cancelled."""
        with _CANCEL_LOCK:
            if self._reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def raise_if_cancelled(self) -> None:
        reason = self._reason
        if reason is not None:
            raise JobCancelled(self.job_id, reason)

    def cancel(self, reason: str) -> bool:
        """Set the cancel signal (first reason wins); True if this call set it."""
        with _CANCEL_LOCK:
            if self._reason is not None:
                return False
            self._reason = reason
            event = self._event
        if event is not None:
            event.set()
        if self._on_cancel is not None:
            self._on_cancel(self)
        return True


# -- retry policies: what a handler may raise (issue 20) -----------------------------------


class Retry(Exception):
    """Raise in a handler to run the job again after ``delay`` seconds without
    counting a failure (a snooze): the attempt is recorded as ``snoozed`` and
    the job's ``max_attempts`` budget is not spent. A delay outside 0 to
    ``MAX_DELAY`` (100 years) is refused here, where the handler raises it:
    the ConfigError is then the handler's failure, its message in the attempt's
    error, rather than a snooze no database can store."""

    def __init__(self, delay: float = 0.0) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= MAX_DELAY:
            raise ConfigError(f"tether.Retry(delay=...) must be from 0 to {MAX_DELAY:.0f} seconds (100 years), "
                              f"got {delay!r}")
        self.delay = float(delay)
        super().__init__(f"retry in {self.delay:g}s")

    def __reduce__(self) -> tuple[type[Retry], tuple[float]]:
        # from a handler's child process (isolation="process"): rebuilt from its delay, not its message
        return (Retry, (self.delay,))


class Discard(Exception):
    """Raise in a handler to end the job ``dead`` at once, whatever attempts
    are left; ``reason`` is recorded as the attempt's error and the job's.
    ``raise Discard(reason) from exc`` records ``exc``'s traceback too."""

    def __init__(self, reason: str = "discarded") -> None:
        self.reason = str(reason)
        super().__init__(self.reason)
