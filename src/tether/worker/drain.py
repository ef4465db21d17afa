"""Draining: run the due jobs in this process until none is due, and say what
happened to each (``app.drain()``, the ``drain_queue`` of oban's testing
helpers).

A drain is a real worker in burst mode (``BurstClaimer``), one job at a time:
every job is claimed, leased, heartbeated and completed or failed through the
store as any worker would, so fencing, retries, timeouts and the attempts
audit all hold, and the app's event hooks fire. What it returns is read back
from the store: each attempt's outcome as the audit recorded it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..events import Event
from ..model import JobState, Outcome
from .appview import AppView
from .runtime import Worker

__all__ = ["Drained", "drain", "drain_async"]


@dataclass(frozen=True, slots=True)
class Drained:
    """One attempt a drain ran, in the order they started."""

    job_id: int
    attempt: int
    task: str
    #: how the attempt ended (``Outcome.SUCCEEDED``, ``FAILED``, ``TIMED_OUT``, ``CANCELLED``, ...)
    outcome: Outcome | None
    #: where the job is now: succeeded, queued (a retry is due later), dead, cancelled
    state: JobState
    #: the handler's return value when the attempt succeeded: as JSON brought it
    #: back, rebuilt as its annotated type (a dataclass, a model, ...) when typed
    result: Any = None
    #: ``"ValueError: bad input"`` when the attempt failed
    error: str | None = None
    traceback: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.outcome is Outcome.SUCCEEDED


def drain(app: AppView, queues: Iterable[str] | None = None, max_jobs: int | None = None) -> list[Drained]:
    """Blocking ``drain_async``; from a coroutine, await ``drain_async`` instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(drain_async(app, queues, max_jobs))
    raise RuntimeError("drain() blocks, and this thread runs an event loop: use `await app.drain_async()`")


async def drain_async(app: AppView, queues: Iterable[str] | None = None,
                      max_jobs: int | None = None) -> list[Drained]:
    """Run due jobs of ``queues`` (default: every registered task's queue), one
    at a time, until none is due or ``max_jobs`` have started; jobs scheduled
    for later (``delay``, ``run_at``, a retry's backoff) are not due."""
    if max_jobs is not None and (not isinstance(max_jobs, int) or isinstance(max_jobs, bool) or max_jobs < 0):
        raise ConfigError(f"max_jobs must be an int >= 0 (or None: no limit), got {max_jobs!r}")
    if max_jobs == 0:
        return []
    worker = Worker(app, queues=queues, concurrency=1, claim_batch=1, prefetch=False, burst=True,
                    shutdown_timeout=math.inf)
    started: list[tuple[int, int, str]] = []

    def on_started(event: Event) -> None:
        if event.worker != worker.id or event.job_id is None or event.attempt is None:
            return  # another worker of the same app
        started.append((event.job_id, event.attempt, event.task or ""))
        if max_jobs is not None and len(started) >= max_jobs:
            worker.stop()  # no more claims; this job runs to its end

    app.events.subscribe("job.started", on_started)
    try:
        await worker.run()
    finally:
        app.events.unsubscribe("job.started", on_started)
    store = app.store
    jobs = {job_id: await asyncio.to_thread(store.get_job, job_id) for job_id in {j for j, _, _ in started}}
    out = []
    for job_id, attempt, task in started:
        job = jobs[job_id]
        assert job is not None
        row = next((a for a in job.attempts if a.attempt == attempt), None)
        outcome = row.outcome if row is not None else None
        handler = app.tasks.get(task)
        result = job.result if outcome is Outcome.SUCCEEDED else None
        out.append(Drained(job_id=job_id, attempt=attempt, task=task, outcome=outcome, state=job.state,
                           result=result if handler is None else handler.load_result(result),
                           error=row.error if row is not None else None,
                           traceback=row.traceback if row is not None else None))
    return out
