"""The application object: task registry, enqueue API and admin calls."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypedDict, TypeVar, Unpack, overload

from .batches import BatchesMixin
from .callers import write_on, write_on_async
from .config import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_LEASE_TTL,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_QUEUE,
    DEFAULT_REAPER_INTERVAL,
    Timers,
    parse_database_url,
)
from .context import JobCancelled, JobContext
from .errors import ConfigError, JobFailed, UnknownTask
from .events import Event, EventHook, Events, ending_event
from .handlers import HandlerHooks
from .logs import configure_worker_logging
from .many import ManyJobsApp
from .model import Job, JobId, JobState, NewJob, ScheduleInfo, ScheduleSpec
from .naming import default_task_name, script_loaded_twice, validate_task_name
from .payload import check_job_id
from .periodic import DEFAULT_CATCH_UP, check_schedule, check_stacked, merge_declared, schedule_spec
from .queue_control import QueueControl
from .schedule_control import ScheduleControl
from .scratch import scratch_database
from .search import check_tags
from .store import Store, open_store
from .store.caller import driver_connection
from .store.waiting import FinishWatch
from .task import JobDefaults, JobOptions, Task, TaskCall, TaskOptions
from .tracing import Tracer
from .transport import Transport, announce, due_now, open_transport
from .worker.pruner import RETENTION_DEFAULTS, RetentionSpec, parse_retention
from .workflows import WorkflowsMixin, flows_listener

if TYPE_CHECKING:  # imported by worker() and drain(): a producer's `import tether` needs neither (issue 47)
    from .worker.drain import Drained
    from .worker.runtime import Worker

__all__ = ["JobOptions", "Task", "TaskCall", "TaskOptions", "Tether", "WorkerOptions"]

P = ParamSpec("P")
R = TypeVar("R")
Handler = Callable[..., Any]


class WorkerOptions(TypedDict, total=False):
    concurrency: int
    queues: Iterable[str] | None
    shutdown_timeout: float
    poll_interval: float | None
    claim_batch: int | None
    prefetch: bool
    burst: bool
    unknown_task_grace: float | None
    isolation: str  # "thread" or "process" (worker/isolation.py); and with "process":
    max_tasks_per_child: int | None
    max_memory_per_child: int | str | None


def _ended(job: Job) -> Job:
    """A finished job for ``wait``: itself if it succeeded, else the error."""
    if job.state is JobState.DEAD:
        raise JobFailed(job)
    if job.state is JobState.CANCELLED:
        raise JobCancelled(job.id, "cancelled", job)
    return job


class Tether(WorkflowsMixin, BatchesMixin, QueueControl, ScheduleControl, ManyJobsApp, HandlerHooks):
    """A tether application: where jobs live, which tasks exist, and the timers.

    ``Tether()`` uses ``TETHER_DATABASE_URL``, else ``sqlite:///tether.db`` in the
    working directory. Nothing connects until the first call that needs to.
    ``transport`` says how job ids reach workers: ``None`` (the database:
    LISTEN/NOTIFY on PostgreSQL, polling on SQLite), ``"poll"``, or a NATS URL
    (``"nats://127.0.0.1:4222"``, or a ``NatsTransport``), to which enqueue then
    publishes each job after the database has committed it. Not given, it is
    ``TETHER_TRANSPORT`` when that is set, as for ``tether worker``: an app that
    enqueues (a web process) publishes to the NATS its workers were started
    with, instead of leaving each job to the sweep (seconds late).

    ``Tether("http://host:port", token=...)`` talks to a ``tether server``
    instead of a database (the token may also come from ``TETHER_TOKEN``).

    ``Tether("sqlite:///:memory:")``, for tests: a database private to this
    object, its tables made on first use, gone with it (``tether.scratch``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        reaper_interval: float = DEFAULT_REAPER_INTERVAL,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        transport: str | Transport | None = None,
        token: str | None = None,
        retention: RetentionSpec | None = RETENTION_DEFAULTS,
    ) -> None:
        url, self.scratch = scratch_database(self, url)  # the memory URL's temporary directory
        self.dsn = parse_database_url(url)
        #: how long finished jobs are kept, by state, in seconds (workers prune the
        #: rest; through a tether server, its --retention applies instead): by default
        #: ``{"succeeded": "7d", "cancelled": "30d", "dead": "30d"}``; a state given
        #: None, or ``retention=None``, is kept forever
        self.retention = parse_retention(retention)
        self.token = token  # for a tether server URL (http/https); else TETHER_TOKEN
        self.timers = Timers(lease_ttl=lease_ttl, heartbeat_interval=heartbeat_interval,
                             reaper_interval=reaper_interval)
        self.transport = open_transport(transport if transport is not None
                                        else os.environ.get("TETHER_TRANSPORT") or None)
        self.transport.check(self.timers)
        if max_payload_bytes < 1:
            raise ConfigError(f"max_payload_bytes must be positive, got {max_payload_bytes!r}")
        self.max_payload_bytes = max_payload_bytes
        self.tasks: dict[str, Task[Any, Any]] = {}
        #: the schedules declared with ``@app.periodic``, by name (the task's name)
        self.schedule_specs: dict[str, ScheduleSpec] = {}
        #: lifecycle hooks (see ``on``)
        self.events = Events()
        self.middlewares = []  # @app.middleware (tether.handlers)
        self.enqueue_middlewares = []  # @app.enqueue_middleware (tether.spec)
        #: OpenTelemetry tracing, set by ``tether.otel.instrument(app)``
        self.tracing: Tracer | None = None
        self._store: Store | None = None
        self._store_lock = threading.Lock()
        self._finish_watch: FinishWatch | None = None

    def __repr__(self) -> str:
        return f"<Tether {self.dsn.backend} tasks={sorted(self.tasks)}>"

    # -- registry -------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[Concatenate[JobContext, P], R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_ttl: float | None = None,
        timeout: float | None = None,
        retry_backoff: float | Callable[[int], float] = DEFAULT_BACKOFF_BASE,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
        tags: Sequence[str] = (),
        isolation: str = "thread",
        limit_key: str | Callable[..., str] | None = None,
    ) -> Callable[[Callable[Concatenate[JobContext, P], R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_ttl: float | None = None,
        timeout: float | None = None,
        retry_backoff: float | Callable[[int], float] = DEFAULT_BACKOFF_BASE,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
        tags: Sequence[str] = (),
        isolation: str = "thread",
        limit_key: str | Callable[..., str] | None = None,
    ) -> Any:
        """Register a handler: ``def f(ctx, **args)`` or ``async def f(ctx, **args)``.
        Its name defaults to ``module.qualname``, the module named as importers
        name it even when it runs as a script (see ``tether.naming``).

        Retry policy: ``retry_on`` (an exception class or a tuple of them): only
        those are retried, any other ends the job dead at once; ``retry_backoff``:
        seconds before the first retry, doubling (capped at an hour, jittered),
        or a callable ``(attempt) -> seconds``. A handler may also raise
        ``tether.Retry(delay=...)`` (again later, no failure counted) or
        ``tether.Discard(reason)`` (dead now). ``isolation="process"``: the def
        handler runs in a child process, killed when its attempt ends.
        ``limit_key``: the key ``configure_limit``'s per-key limits count each
        job under, or a callable of the job's args that returns it (called
        on the producer at enqueue)."""

        def register(f: Callable[..., Any]) -> Task[Any, Any]:
            if isinstance(f, Task):
                raise ConfigError(f"@app.task over task {f.name!r}, which is registered already: to schedule "
                                  "a task, put @app.periodic(...) above @app.task(...), or use either alone")
            task_name = validate_task_name(name or default_task_name(f))
            if task_name in self.tasks:
                raise ConfigError(f"task {task_name!r} is registered twice")
            opts = JobOptions(queue=queue, priority=priority, max_attempts=max_attempts, lease_ttl=lease_ttl,
                               timeout=timeout, retry_backoff=retry_backoff,
                               retry_on=(retry_on,) if isinstance(retry_on, type) else retry_on,
                               tags=check_tags(f"task {task_name!r}", tags), limit_key=limit_key)
            t: Task[Any, Any] = Task(self, f, task_name, opts.checked(self.timers, f"task {task_name!r}"), isolation)
            self.tasks[task_name] = t
            return t

        return register(fn) if fn is not None else register

    # -- schedules ----------------------------------------------------------------------
    def periodic(
        self,
        cron: str,
        /,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        args: Mapping[str, Any] | None = None,
        catch_up: int = DEFAULT_CATCH_UP,
        overlap: bool = True,
        **options: Unpack[JobDefaults],
    ) -> Callable[[Callable[Concatenate[JobContext, P], R]], Task[P, R]]:
        """Register a task that the database also fires on a schedule: each
        tick of ``cron`` (five fields, six with seconds first, or ``@hourly``,
        ``@daily``, ...) in ``timezone`` becomes exactly one job with ``args``,
        whatever number of workers run (I6). ``catch_up``: after every worker
        was down, fire at most this many of the missed ticks (the latest
        ones). ``overlap=False``: skip a tick while the previous job is still
        queued or running. The handler reads its tick as ``ctx.scheduled_for``.
        The rest are ``@app.task``'s options (``queue``, ``retry_on``, ...).
        Above ``@app.task``, it schedules that task, which keeps its options."""
        check_schedule(cron, timezone, catch_up, overlap, args)
        register = self.task(name=name, **options)

        def schedule(f: Callable[Concatenate[JobContext, P], R]) -> Task[P, R]:
            if isinstance(f, Task):  # @app.periodic(...) over @app.task(...)
                check_stacked(f, self, name, options, f.name in self.schedule_specs)
                t: Task[P, R] = f
            else:
                t = register(f)
            try:
                spec = schedule_spec(t, cron=cron, timezone=timezone, args=args, catch_up=catch_up,
                                     overlap=overlap, max_payload_bytes=self.max_payload_bytes)
            except Exception:
                if t is not f:
                    del self.tasks[t.name]
                raise
            self.schedule_specs[t.name] = spec
            return t

        return schedule

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule in the database (orphaned ones too: no longer declared
        by the app that synced last) and the ones this app declares that no
        worker has synced yet: cron, time zone, next tick, last tick fired and
        its job."""
        stored = self.store.list_schedules()
        known = {s.name for s in stored}
        unsynced = [spec for name, spec in self.schedule_specs.items() if name not in known]
        return merge_declared(stored, unsynced, self.store.db_now()) if unsynced else stored

    def on(self, event: str) -> Callable[[EventHook], EventHook]:
        """Subscribe a hook to a lifecycle event: ``@app.on("job.failed")``; it is
        called with an ``Event``. ``"*"`` subscribes to every event. Hooks run
        inline on the thread that made the change; one that raises is logged
        and ignored."""
        return self.events.on(event)

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTask(f"no task named {name!r} is registered (known: {known})") from None

    # -- store ------------------------------------------------------------------------
    @property
    def store(self) -> Store:
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    store = open_store(self.dsn, token=self.token)
                    if self.scratch is not None:
                        store.migrate()  # a private database: nobody else would create its tables
                    store.add_flow_listener(flows_listener(self.events, self.transport))
                    self._store = store
        return self._store

    def close(self) -> None:
        if self._finish_watch is not None:
            self._finish_watch.close()
            self._finish_watch = None
        self.transport.close()
        if self._store is not None:
            self._store.close()
            self._store = None

    async def aclose(self) -> None:
        """``close`` from a coroutine, without blocking its event loop."""
        if self._finish_watch is not None:
            watch, self._finish_watch = self._finish_watch, None
            await asyncio.to_thread(watch.close)
        await asyncio.to_thread(self.transport.close)
        if self._store is not None:
            store, self._store = self._store, None
            await store.aclose()

    def migrate(self) -> list[str]:
        """Create or upgrade tether's tables; returns the migrations applied."""
        return self.store.migrate()

    # -- producers --------------------------------------------------------------------
    def enqueue(self, task: str, /, *, connection: object = None, **kwargs: Any) -> JobId:
        """Enqueue by task name (the name must be registered on this app);
        ``connection``: join that connection's transaction (see ``Task.using``)."""
        t = self.get_task(task)
        return t.enqueue(**kwargs) if connection is None else t.using(connection=connection).enqueue(**kwargs)

    def enqueue_many(self, task: str, many: Iterable[Mapping[str, Any]], /, *, connection: object = None) -> list[JobId]:
        """``enqueue_many`` by task name."""
        t = self.get_task(task)
        return t.enqueue_many(many) if connection is None else t.using(connection=connection).enqueue_many(many)

    def _enqueue(self, jobs: list[NewJob], connection: object = None) -> list[JobId]:
        write = self._write if connection is None else partial(write_on, self, connection)
        if self.tracing is not None:
            return self.tracing.enqueue(jobs, write)
        return write(jobs)

    def _write(self, jobs: list[NewJob]) -> list[JobId]:
        ids = self.store.enqueue(jobs)
        self._enqueued(jobs, ids)
        if self.transport.delivers:  # after the commit: a job is announced only once it exists
            announce(self.transport, due_now(jobs, ids))
        return ids

    async def _enqueue_async(self, jobs: list[NewJob], connection: object = None) -> list[JobId]:
        write = self._write_async if connection is None else partial(write_on_async, self, connection)
        if self.tracing is not None:
            return await self.tracing.enqueue_async(jobs, write)
        return await write(jobs)

    async def _write_async(self, jobs: list[NewJob]) -> list[JobId]:
        store = self._store
        if store is None:  # opening it connects and waits: not on the event loop
            store = await asyncio.to_thread(lambda: self.store)
        ids = await store.enqueue_async(jobs)
        self._enqueued(jobs, ids)
        if self.transport.delivers:
            # publish waits for the broker's acknowledgement (NATS: on its own
            # thread and loop): off this loop.
            await asyncio.to_thread(announce, self.transport, due_now(jobs, ids))
        return ids

    def _enqueued(self, jobs: list[NewJob], ids: list[JobId]) -> None:
        if self.events.active:
            for job_id, job in zip(ids, jobs, strict=True):
                self.events.emit(Event("job.enqueued", job_id=job_id, task=job.task, queue=job.queue,
                                       state=JobState.QUEUED))

    # -- results ----------------------------------------------------------------------
    def wait(self, job_id: int, timeout: float | None = None) -> Job:
        """Block until the job finishes and return it (``job.result`` is what its
        handler returned). Raises ``JobFailed`` (dead; ``.error`` is its last
        error), ``JobCancelled``, ``TimeoutError`` after ``timeout`` seconds, or
        ``JobNotFound``. Woken by a notification on PostgreSQL; elsewhere it
        polls, 50 ms apart at first, up to 1 s. Enqueue, then wait:
        ``app.wait(task.enqueue(...), timeout=30)``."""
        return self._typed(_ended(self._watch().wait(check_job_id(job_id), timeout)))

    async def wait_async(self, job_id: int, timeout: float | None = None) -> Job:
        """``wait`` for a coroutine (its event loop is never blocked)."""
        watch = self._finish_watch
        if watch is None:  # opening the store connects: not on the event loop
            watch = await asyncio.to_thread(self._watch)
        return self._typed(_ended(await watch.wait_async(check_job_id(job_id), timeout)))

    def _typed(self, job: Job) -> Job:
        """``job`` with its result rebuilt as its task's annotated return type
        (a dataclass, a model, ...: convert.py), when this app knows the task."""
        task = self.tasks.get(job.task) if job.result is not None else None
        return job if task is None else replace(job, result=task.load_result(job.result))

    def _watch(self) -> FinishWatch:
        with self._store_lock:
            watch = self._finish_watch
        if watch is None:
            store = self.store
            with self._store_lock:
                if self._finish_watch is None:
                    self._finish_watch = FinishWatch(store)
                watch = self._finish_watch
        return watch

    def get_job(self, job_id: int, *, connection: object = None) -> Job | None:
        """The job and its attempts, or None. ``connection``: read it through
        that connection, inside its transaction, as ``enqueue(connection=...)``
        writes: a job that transaction enqueued is found before the commit."""
        job_id = check_job_id(job_id)
        if connection is None:
            job = self.store.get_job(job_id)
        else:
            job = self.store.get_job_on(driver_connection(connection), job_id)
        return None if job is None else self._typed(job)

    def cancel(self, job_id: int) -> JobState:
        """Cancel a job; a queued one ends cancelled at once (``job.cancelled`` fires
        here), a running one is told at its worker's next heartbeat (and the
        worker's app fires ``job.cancelled`` when it ends)."""
        job_id = check_job_id(job_id)
        state = self.store.cancel(job_id)
        if state is JobState.CANCELLED and self.events.active:
            self.events.emit(Event(ending_event(state), job_id=job_id, state=state))
        return state

    def retry(self, job_id: int) -> None:
        """A dead or cancelled job back to queued, due now. With a delivering
        transport (NATS) it is then published, marked as a retry, so a worker
        takes it at once; should that publish fail, the retry stands and the
        sweep publishes the job."""
        job_id = check_job_id(job_id)
        queue = self.store.retry(job_id)
        if self.transport.delivers:
            announce(self.transport, [(job_id, queue)], retry=True)

    # -- workers ----------------------------------------------------------------------
    def worker(self, **options: Unpack[WorkerOptions]) -> Worker:
        """A worker for this app (not started): ``concurrency`` (10), ``queues``
        (every registered task's queue), ``shutdown_timeout`` (30 s),
        ``poll_interval`` (the backend's), ``claim_batch`` (= concurrency) and
        ``prefetch`` (True: while handlers are short, claim ahead, up to twice
        the claim batch a claim), ``burst`` (False: True stops the worker
        once no job is due and none is running) and ``unknown_task_grace`` (an
        hour: jobs of a task no worker has known that long end dead; None: never)."""
        if (twice := script_loaded_twice(self)) is not None:
            logging.getLogger("tether.worker").warning("%s", twice)
        from .worker.runtime import Worker
        return Worker(self, **options)

    def run_worker(self, *, processes: int = 1, **options: Unpack[WorkerOptions]) -> None:
        """Run a worker until SIGTERM/SIGINT (blocking): the first signal stops
        claiming and waits ``shutdown_timeout`` for running jobs, then releases
        the rest; a second signal stops at once. ``processes``: more than one
        becomes ``tether worker --processes N`` (``tether.handlers``)."""
        if processes != 1:
            return self._run_processes(processes, options)
        if not logging.getLogger().handlers:  # `python app.py` with no logging set up: `tether worker`'s log
            configure_worker_logging()
        asyncio.run(self.worker(**options).run(install_signal_handlers=True))

    async def run_worker_async(self, *, signals: bool = False, **options: Unpack[WorkerOptions]) -> None:
        """Run a worker inside a running event loop; stop it by cancelling this
        coroutine (running jobs are released at once) or with ``worker.stop()``.
        ``signals``: while it runs, SIGTERM and SIGINT stop it as they stop
        ``run_worker`` (the main thread's loop; the signals' default handlers
        are back once it returns). Without it the program's own handling of
        signals stands, and a SIGTERM nothing handles ends the process at once."""
        if signals and threading.current_thread() is not threading.main_thread():
            raise ConfigError("run_worker_async(signals=True) must run on the main thread: only it receives signals")
        await self.worker(**options).run(install_signal_handlers=signals)

    # -- running jobs here (tests, scripts) -----------------------------------------------
    def drain(self, queues: Iterable[str] | None = None, max_jobs: int | None = None) -> list[Drained]:
        """Run due jobs here, one at a time, through a real burst worker, until
        none is due or ``max_jobs`` started; a ``Drained`` per attempt
        (``tether.worker.drain``)."""
        from .worker.drain import drain
        return drain(self, queues, max_jobs)

    async def drain_async(self, queues: Iterable[str] | None = None, max_jobs: int | None = None) -> list[Drained]:
        """``drain`` from a coroutine: the worker runs on this event loop."""
        from .worker.drain import drain_async
        return await drain_async(self, queues, max_jobs)
