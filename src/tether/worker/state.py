"""What a worker's services share: who the worker is, where its jobs live,
the jobs it holds, its wake-ups, and whether it is stopping.

One ``WorkerState`` per worker, made by ``runtime.Worker`` and handed to each
service. The asyncio events are made in ``bind()``, on the loop the worker
runs in; services copy the ones they touch per job into attributes of their
own at ``bind()`` so that the hot path reads them as before the split.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from ..config import Timers
from ..events import Event, Events
from ..logs import FieldsAdapter
from ..model import JobState, Outcome
from ..store import Store
from ..tracing import AttemptTracer
from ..transport import Transport
from .appview import AppView
from .history import HistoryRecorder
from .inflight import InFlight, Running

__all__ = ["DatabaseThreads", "WorkerState", "wait_event"]

T = TypeVar("T")


class DatabaseThreads(ThreadPoolExecutor):
    """The worker's (or a server's services') database threads, which know the
    calls they have not finished: a task awaiting one that is cancelled leaves
    it running."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._calls: set[Future[Any]] = set()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        call = super().submit(fn, *args, **kwargs)
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)
        return call

    def unfinished(self) -> list[Future[Any]]:
        return [call for call in tuple(self._calls) if not call.done()]

    async def close(self, timeout: float) -> int:
        """Shut down, waiting up to ``timeout`` for the calls still running
        (calls not started yet are dropped); how many were still running then."""
        self.shutdown(wait=False, cancel_futures=True)
        running = [asyncio.wrap_future(call) for call in self.unfinished()]
        if not running:
            return 0
        _, late = await asyncio.wait(running, timeout=timeout)
        return len(late)


class WorkerState:
    def __init__(self, app: AppView, *, worker_id: str, history: HistoryRecorder | None, log: logging.Logger,
                 queues: list[str]) -> None:
        self.app = app
        self.id = worker_id
        self.store: Store = app.store
        self.timers: Timers = app.timers
        self.events: Events = app.events
        self.transport: Transport = app.transport
        self.history = history
        self.log = FieldsAdapter(log, {"worker": worker_id})
        self.queues = queues
        #: the task names this worker has handlers for, sorted: its claims take
        #: only their jobs, and it registers them (read again at start-up)
        self.tasks: list[str] = sorted(app.tasks)
        self.inflight = InFlight()
        self.counts: Counter[str] = Counter()
        #: every store call off the loop but the round statements the store sends
        #: itself (and, on other backends, those too): two, so that claims and
        #: completions overlap
        self.db_pool = DatabaseThreads(max_workers=2, thread_name_prefix="tether-db")
        #: set once: no new claims; in-flight handlers may finish
        self.stopping = False
        #: set once: in-flight handlers are cancelled and released now
        self.stop_now = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # Made by bind(), on the worker's loop:
        #: wakes the claimer: a slot freed, a NOTIFY, a reaped job, a stop
        self.nudge: asyncio.Event
        #: set while the claimer waits for work: successes have no claim to ride
        #: with, so the reporter writes them at once
        self.claimer_idle: asyncio.Event
        #: True while the claimer waits on a transport fetch with nothing to
        #: take yet (``claimer_idle`` is set then): a finished job's success is
        #: written at once, as no claim will carry it soon
        self.fetch_waiting = False
        self.stop_event: asyncio.Event
        #: done when stop() was called: raced against calls that may hang
        self.stop_waiter: asyncio.Task[Any]

    @property
    def tracing(self) -> AttemptTracer | None:
        """The app's tracing, read each time (``tether.otel.instrument`` sets it)."""
        return self.app.tracing

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.nudge = asyncio.Event()
        self.claimer_idle = asyncio.Event()
        self.stop_event = asyncio.Event()
        if self.stopping:
            self.stop_event.set()
        self.stop_waiter = loop.create_task(self.stop_event.wait(), name="tether-stop-waiter")

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call on the worker's database threads."""
        assert self.loop is not None
        return await self.loop.run_in_executor(self.db_pool, partial(fn, *args))

    async def close_db(self, timeout: float) -> None:
        """Shut the database threads down, waiting up to ``timeout`` for calls
        still running on them. A service's tick cancelled at shutdown goes on
        on its thread: returning before it ends let the caller close the store
        under its statement (on SQLite, a crash: SIGSEGV in the reaper's
        statement, a CI run). Calls not started yet are dropped."""
        late = await self.db_pool.close(timeout)
        if late:
            self.log.warning("%d database call(s) still running %gs after the stop; "
                             "not waiting for them", late, timeout)

    def wake_claimer(self) -> None:
        """Any thread: wake the claimer (a no-op before the loop runs or after it closed)."""
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(self.nudge.set)

    def emit(self, name: str, running: Running, duration: float, *, state: JobState | None = None,
             outcome: Outcome | None = None, error: str | None = None) -> None:
        """An attempt's event (only called while ``events.active``)."""
        job = running.job
        self.events.emit(Event(name, job_id=job.id, attempt=job.attempt, task=job.task, queue=job.queue,
                               worker=self.id, state=state, outcome=outcome, error=error, duration=duration,
                               exception=running.exception))


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; whether it was set.

    Not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that
    arrives just as the wait ends, and the cancelled task then runs on (a
    worker's shutdown cancels its background tasks and waits for them: it
    would hang). ``asyncio.timeout`` tells its own cancellation from another's."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
