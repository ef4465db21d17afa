"""Helpers for testing tasks: a handler's context, assertions on what was
enqueued, and a throwaway database for an app (the pytest plugin,
``tether.testing.pytest_plugin``, builds its ``tether_app`` fixture on them).

Running jobs in a test is ``app.drain()`` (see ``Tether.drain``): a real
worker in burst mode, in this process, one job at a time, until none is due.
``Tether("sqlite:///:memory:")`` is a private database for one app object.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..app import Task, Tether
from ..config import parse_database_url
from ..context import CancelReason, JobContext
from ..errors import StaleAttempt
from ..model import ClaimedJob, Job, JobState
from ..scratch import MEMORY_URL
from ..worker.drain import Drained

__all__ = [
    "MEMORY_URL",
    "Drained",
    "LocalContext",
    "assert_enqueued",
    "assert_not_enqueued",
    "context",
    "enqueued",
    "temporary_database",
]

#: how many of a task's queued jobs the assertions look at
SCAN_LIMIT = 10_000


class LocalContext(JobContext):
    """A ``JobContext`` for calling a handler directly, with no worker and no
    database: ``progress`` is recorded in ``progress_reports``,
    ``request_cancel()`` is what a cancel request arriving by heartbeat does,
    and ``lose()`` makes the next ``progress`` raise ``StaleAttempt`` as it
    would for an attempt that lost its job."""

    __test__ = False  # not a test class, whatever pytest's name patterns say

    def __init__(self, job: ClaimedJob, worker_id: str) -> None:
        super().__init__(job, worker_id, self._report)
        #: every ``progress(fraction, message)`` the handler reported, in order
        self.progress_reports: list[tuple[float | None, str | None]] = []
        self._cancel_requested = False
        self._lost = False

    def _report(self, job: ClaimedJob, fraction: float | None, message: str | None) -> bool:
        if self._lost:
            raise StaleAttempt(job.id, job.attempt, self.worker_id, "progress")
        self.progress_reports.append((fraction, message))
        return self._cancel_requested

    def request_cancel(self) -> None:
        """Someone asked to cancel the job (``app.cancel(job_id)``): the signal is set now."""
        self._cancel_requested = True
        self.cancel(CancelReason.REQUESTED)

    def lose(self) -> None:
        """This attempt lost the job (its lease lapsed and another took it)."""
        self._lost = True


def context(job_id: int = 1, attempt: int = 1, *, task: str = "test", queue: str = "default",
            args: Mapping[str, Any] | None = None, max_attempts: int = 3, lease_ttl: float = 30.0,
            timeout: float | None = None, meta: dict[str, Any] | None = None,
            worker_id: str = "test-worker", tags: Sequence[str] = ()) -> LocalContext:
    """A handler's context for a unit test: ``my_handler(context(), path="a.png")``
    (``meta`` and ``tags``: what ``ctx.meta`` and ``ctx.tags`` give)."""
    now = datetime.now(UTC)
    job = ClaimedJob(id=job_id, attempt=attempt, task=task, args=dict(args or {}), queue=queue, priority=0,
                     max_attempts=max_attempts, lease_ttl=lease_ttl, timeout=timeout, claimed_at=now, meta=meta,
                     run_at=now)
    ctx = LocalContext(job, worker_id)
    ctx._tags = list(tags)  # what a worker reads from the job's row on first use
    return ctx


# -- assertions on what was enqueued ----------------------------------------------------------
def enqueued(task: Task[Any, Any], /, **args: Any) -> list[Job]:
    """The task's queued jobs (due now or later) whose args include ``args``,
    oldest first (a typed arg, a dataclass or a ``UUID``, is matched as stored)."""
    args = task.dump_args(args)
    jobs = task.app.store.list_jobs(state=JobState.QUEUED.value, task=task.name, limit=SCAN_LIMIT)
    return sorted((j for j in jobs if _matches(j.args, args)), key=lambda j: j.id)


def assert_enqueued(task: Task[Any, Any], /, **args: Any) -> Job:
    """Assert that a job of ``task`` whose args include ``args`` is queued;
    returns it (the oldest, when several match)."""
    found = enqueued(task, **args)
    if not found:
        queued = [j.args for j in enqueued(task)]
        raise AssertionError(f"no queued job of task {task.name!r} has args including {args!r}; "
                             f"queued jobs of that task have args: {queued!r}")
    return found[0]


def assert_not_enqueued(task: Task[Any, Any], /, **args: Any) -> None:
    """Assert that no queued job of ``task`` has args including ``args``."""
    found = enqueued(task, **args)
    if found:
        raise AssertionError(f"{len(found)} queued job(s) of task {task.name!r} have args including {args!r}: "
                             f"ids {[j.id for j in found]}")


def _matches(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    return all(k in have and have[k] == v for k, v in want.items())


# -- a throwaway database for an existing app ----------------------------------------------------
@contextlib.contextmanager
def temporary_database(app: Tether, url: str | None = None) -> Iterator[Tether]:
    """Point ``app`` (your module's ``Tether``, its tasks registered) at a fresh,
    migrated database for the block, then back at its own. ``url`` defaults to
    a SQLite file in a new temporary directory, removed afterwards."""
    folder = None
    if url is None:
        folder = tempfile.mkdtemp(prefix="tether-test-")
        url = f"sqlite:///{Path(folder) / 'tether.db'}"
    # the app's own connection, and what waits on it (app.wait), put back below: a
    # wait in the block must read the block's database, not the one before it
    saved = app.dsn, app._store, app._finish_watch
    app.dsn, app._store, app._finish_watch = parse_database_url(url), None, None
    try:
        app.migrate()
        yield app
    finally:
        # the store and its watch only: the app's transport stays as it was
        if app._finish_watch is not None:
            app._finish_watch.close()
        if app._store is not None:
            app._store.close()
        app.dsn, app._store, app._finish_watch = saved
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
