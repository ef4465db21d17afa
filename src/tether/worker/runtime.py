"""The worker: a supervisor of services.

It checks the schema, registers, recovers its dead predecessors' jobs
(``Reconciler``), starts its services, wires their hand-offs, and handles
signals and shutdown. The services, each in a module of its own:

- ``Claimer`` (event loop): claim rounds, prefetch, where job ids come from;
- ``Executor`` (event loop; ``def`` handlers on ``tether-handler-*`` threads):
  handler slots, running attempts, timeouts and cancellation;
- ``Reporter`` (event loop): fenced outcomes, successes in batches or carried
  by the next claim, retried reports checked against the attempts audit;
- ``Heartbeater`` (thread ``tether-heartbeat``): one statement per tick renews
  every lease held, and fences the worker off the ones it lost; on a thread of
  its own so a handler that hogs the loop or the CPU cannot starve it;
- periodic services (``PeriodicService``, on the loop, their statements on the
  ``tether-db-*`` threads): ``Reaper``, ``UnknownTasks`` (jobs of tasks no
  live worker knows), and ``Sweeper`` with a delivering transport.

Job ids reach the claimer through the transport (``tether.transport``): the
database itself (polling, woken by NOTIFY on the ``tether-listen`` thread), or
NATS (thread ``tether-nats``). Either way the database decides who owns a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ..config import DEFAULT_QUEUE, Timers, validate_queue
from ..errors import ConfigError
from ..model import FiredTick, WorkerInfo
from ..store import Listener, Store
from ..transport import Transport, announce
from .appview import AppView
from .burst import BurstClaimer
from .calls import Runners
from .claimer import STOP_GRACE, Claimer
from .executor import Executor
from .expiry import Expiry
from .heartbeat import Heartbeater
from .history import recorder_from_env
from .identity import host_name, make_worker_id, process_start_time
from .inflight import InFlight
from .middleware import unwrapped
from .pruner import Pruner
from .reaper import Reaper
from .reconcile import Reconciler
from .reporter import CARRY_MAX, Reporter
from .scheduler import Scheduler, sync_none
from .service import PeriodicService
from .state import WorkerState, wait_event
from .sweeper import Sweeper
from .unknown import DEFAULT_UNKNOWN_TASK_GRACE, UnknownTasks

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_SHUTDOWN_TIMEOUT", "Worker"]

log = logging.getLogger("tether.worker")

DEFAULT_CONCURRENCY = 10
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
#: after the shutdown timeout, how long to wait for releases to be written
RELEASE_GRACE = 10.0
#: how long a worker waits at start for its transport to come up before polling
TRANSPORT_START_WAIT = 3.0


class Worker:
    def __init__(
        self,
        app: AppView,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        queues: Iterable[str] | None = None,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        poll_interval: float | None = None,
        claim_batch: int | None = None,
        prefetch: bool = True,
        burst: bool = False,
        unknown_task_grace: float | None = DEFAULT_UNKNOWN_TASK_GRACE,
        isolation: str = "thread",
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | str | None = None,
    ) -> None:
        if shutdown_timeout < 0:
            raise ConfigError(f"shutdown_timeout must be >= 0 seconds, got {shutdown_timeout!r}")
        if poll_interval is not None and poll_interval <= 0:
            raise ConfigError(f"poll_interval must be positive, got {poll_interval!r}")
        self.app = app
        if queues is None:
            queues = sorted({t.options.queue for t in app.tasks.values()}) or [DEFAULT_QUEUE]
        if isinstance(queues, str):  # else each letter would be a queue, and the worker would run nothing
            raise ConfigError(f"queues must be a list of queue names, not the string {queues!r}: "
                              f"write queues=[{queues!r}]")
        queues = [validate_queue(q) for q in queues]
        if not queues:
            raise ConfigError("a worker needs at least one queue")
        app.transport.check(app.timers)
        self.host = host_name()
        self.id = make_worker_id(self.host)
        self.state = s = WorkerState(app, worker_id=self.id, history=recorder_from_env(self.id), log=log,
                                     queues=queues)
        self.shutdown_timeout = shutdown_timeout
        # The services, and their hand-offs: the executor hands outcomes to the
        # reporter, which tells the executor of attempts it finds lost; the
        # claimer asks the executor for room and carries the reporter's successes.
        reporter = Reporter(s, carry=False)
        self.executor = executor = Executor(s, reporter, app.tasks, concurrency=concurrency,
                                            claim_batch=claim_batch, prefetch=prefetch,
                                            max_payload_bytes=app.max_payload_bytes, runners=Runners(
            app.tasks, app.middlewares, isolation=isolation, worker_id=self.id, max_payload_bytes=app.max_payload_bytes,
            max_tasks_per_child=max_tasks_per_child, max_memory_per_child=max_memory_per_child,
            forked=getattr(app, "_forked", None)))
        #: whether claims carry successes (complete_and_claim, or with a
        #: delivering transport complete_and_claim_ids): small ones do, and
        #: any through a tether server (each round is a request)
        reporter.carry = s.store.always_carry or (
            executor.ahead_batch if executor.prefetch else executor.claim_batch) <= CARRY_MAX
        reporter.lost = executor.lost
        self.reporter = reporter
        interval = poll_interval or s.store.default_poll_interval
        #: burst: stop once no job is due and none is running (``BurstClaimer``)
        self.burst = burst
        self.claimer = BurstClaimer(s, executor, reporter, poll_interval=interval, on_empty=self.stop) if burst \
            else Claimer(s, executor, reporter, poll_interval=interval)
        self.heartbeater = Heartbeater(
            s.store, self.id, s.inflight,
            interval=s.timers.heartbeat_interval, lease_ttl=s.timers.lease_ttl,
            on_lost=executor.beat_lost, on_cancel_requested=executor.cancel_requested, history=s.history,
            events=s.events,
        )
        self.reaper = Reaper(s.store, interval=s.timers.reaper_interval, events=s.events,
                             on_requeued=reporter.republish, history=s.history)
        self.reaper.on_tick = self._made_due
        self.sweeper = Sweeper(s.store, s.transport, queues)
        self.sweeper.on_tick = self._swept
        self.reconciler = Reconciler(s.store, worker_id=self.id, host=self.host, reaper=self.reaper)
        #: called on the event loop once the worker is registered, has recovered
        #: its dead predecessors' jobs and serves (a supervisor's readiness signal)
        self.on_started: Callable[[], object] | None = None
        #: set by a caller that has just checked the schema itself (``tether
        #: worker`` does, to fail in one line before the event loop): the start
        #: then skips its own check, a round trip (issue 47)
        self.schema_checked = False
        #: the timer-driven duties this worker runs
        self.unknown_tasks = UnknownTasks(s.store, queues, grace=unknown_task_grace, events=s.events)
        self.services: list[PeriodicService] = [self.reaper, self.unknown_tasks, *Pruner.for_app(s.store, app)]
        if s.store.backend != "http":  # through a tether server, the server ends expired jobs
            self.expiry = Expiry(s.store, self.id, events=s.events)
            self.services.append(self.expiry)
        if s.transport.delivers:
            self.services.append(self.sweeper)
        #: fires the app's schedules (I6; its first tick syncs them) and the
        #: dynamic ones (app.add_schedule) of the tasks it runs (on its
        #: queues); an app that declares none syncs none at its start
        self.scheduler: Scheduler | None = None
        if app.schedule_specs or self._served_tasks():
            self.scheduler = Scheduler(s.store, list(app.schedule_specs.values()), grace=s.timers.reaper_interval,
                                       events=s.events, on_fired=self._fired, tasks=self._served_tasks(),
                                       tags={name: t.options.tags for name, t in app.tasks.items()})
            self.scheduler.on_tick = self._made_due
            self.services.append(self.scheduler)

    def _served_tasks(self) -> list[str]:
        """The app's tasks whose queue this worker serves."""
        return sorted(name for name, t in self.app.tasks.items() if t.options.queue in self.state.queues)

    # -- read-only views of the configuration and the state --------------------------------
    @property
    def store(self) -> Store:
        return self.state.store

    @property
    def timers(self) -> Timers:
        return self.state.timers

    @property
    def transport(self) -> Transport:
        return self.state.transport

    @property
    def queues(self) -> list[str]:
        return self.state.queues

    @property
    def concurrency(self) -> int:
        return self.executor.concurrency

    @property
    def claim_batch(self) -> int:
        return self.executor.claim_batch

    @property
    def poll_interval(self) -> float:
        return self.claimer.poll_interval

    @property
    def inflight(self) -> InFlight:
        return self.state.inflight

    @property
    def counts(self) -> Counter[str]:
        return self.state.counts

    # -- control ----------------------------------------------------------------------
    def stop(self, *, immediate: bool = False) -> None:
        """Stop claiming and shut down; thread-safe. ``immediate`` skips the wait
        for in-flight handlers: they are cancelled and released at once."""
        s = self.state
        s.stopping = True
        if immediate:
            s.stop_now = True
        if s.loop is not None:
            with contextlib.suppress(RuntimeError):
                s.loop.call_soon_threadsafe(s.nudge.set)
                s.loop.call_soon_threadsafe(s.stop_event.set)

    def _on_signal(self, signum: int) -> None:
        if self.state.stopping:
            self.state.log.warning("second %s: stopping now, releasing %d job(s)", signal.Signals(signum).name,
                                   len(self.inflight))
            self.stop(immediate=True)
        else:
            self.state.log.warning(
                "%s: no new claims; waiting up to %gs for %d job(s) (send again to stop now)",
                signal.Signals(signum).name, self.shutdown_timeout, len(self.inflight),
            )
            self.stop()

    # -- the main coroutine -------------------------------------------------------------
    async def run(self, *, install_signal_handlers: bool = False) -> None:
        s = self.state
        loop = asyncio.get_running_loop()
        s.bind(loop)
        # Claims that carry the successes leave a report little to overlap
        # with: one round connection (a worker then holds three: that, one
        # pooled for its heartbeat and services, and LISTEN). Larger claims
        # have the reporter write successes beside them, on a second.
        s.store.round_connections(1 if self.reporter.carry else 2)
        self.reporter.bind()
        self.executor.bind()
        self.claimer.bind()
        try:
            await self._start_up()
        except BaseException:
            self.executor.handlers.shutdown(wait=False)
            await s.close_db(STOP_GRACE)
            raise
        listener = s.transport.wake(s.store, self.claimer.on_notify)
        if s.transport.delivers:
            s.transport.start(s.queues)  # (NATS: the client may run on this loop from here on)
            try:
                await asyncio.to_thread(s.transport.ready, TRANSPORT_START_WAIT)
            except BaseException:
                await s.transport.stop(s.queues)
                raise
        self.heartbeater.start()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        s.log.info("worker %s started: queues=%s concurrency=%d lease_ttl=%gs heartbeat=%gs reaper=%gs transport=%s",
                   self.id, ",".join(s.queues), self.concurrency, s.timers.lease_ttl,
                   s.timers.heartbeat_interval, s.timers.reaper_interval, self._wakeups(listener))
        if self.on_started is not None:
            self.on_started()
        await self._serve(loop, listener, install_signal_handlers)

    async def _start_up(self) -> None:
        """Check the schema, register, recover dead predecessors' jobs, and,
        if the app declares no schedule, say so to the database."""
        s = self.state
        if not self.schema_checked:
            await s.db(s.store.check_schema)
        s.tasks = sorted(self.app.tasks)  # the handlers now, which the claims name and the row records
        if self.scheduler is not None:  # and whose dynamic schedules it fires
            self.scheduler.tasks = self._served_tasks()
        bare = unwrapped({n: t.is_async for n, t in self.app.tasks.items()}, self.app.middlewares)
        if bare:
            log.warning("no middleware wraps task(s) %s: a middleware wraps handlers of its own kind (def or "
                        "async def), and every one registered is of the other kind", ", ".join(bare))
        await s.db(s.store.register_worker, WorkerInfo(
            id=self.id, host=self.host, pid=os.getpid(), proc_start=process_start_time(os.getpid()),
            started_at=None, last_seen=None, queues=s.queues, concurrency=self.concurrency,  # type: ignore[arg-type]
            tasks=s.tasks,
        ))
        if s.history is not None:
            s.history.record("started", host=self.host, queues=s.queues)
        try:
            recovered = await s.db(self.reconciler.run_once)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.db(s.store.stop_worker, self.id), STOP_GRACE)
            raise
        s.counts["recovered_at_start"] += len(recovered)
        # (not beside the recovery, on the other database thread: that opened
        # the pool's second connection, a fork on the server, to save a round trip)
        if not self.app.schedule_specs:  # so that the schedules this app dropped are shown orphaned
            await s.db(sync_none, s.store)

    async def _serve(self, loop: asyncio.AbstractEventLoop, listener: Listener | None,
                     install_signal_handlers: bool) -> None:
        s = self.state
        started = time.monotonic()
        background: list[asyncio.Task[Any]] = [loop.create_task(self.reporter.serve(), name="tether-reporter")]
        background += [loop.create_task(svc.serve(s.db), name=f"tether-{svc.name}") for svc in self.services]
        background.append(s.stop_waiter)
        cancelled = False
        try:
            await self.claimer.serve()
            await self._drain()
        except asyncio.CancelledError:
            cancelled = True
            self.stop(immediate=True)
            await asyncio.shield(self._drain())
        finally:
            for t in background:
                t.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            self.heartbeater.stop()
            if listener is not None:
                listener.close()
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            # Bounded: a worker told to stop while the database is unreachable
            # still exits; its row simply keeps an old last_seen.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.db(s.store.stop_worker, self.id), STOP_GRACE)
            self.executor.handlers.shutdown(wait=False)
            await asyncio.to_thread(self.executor.runners.close)  # children: told to exit, or killed
            if s.transport.delivers:  # before this loop ends: a NATS client running on it goes
                with contextlib.suppress(Exception):
                    await s.transport.stop(s.queues)
            await s.close_db(STOP_GRACE)
            s.log.info("worker %s stopped after %s: %s", self.id, _duration(time.monotonic() - started),
                       summary(s.counts))
            if s.history is not None:
                s.history.record("stopped", counts=dict(s.counts))
                s.history.close()
        if cancelled:
            raise asyncio.CancelledError

    def _wakeups(self, listener: Listener | None) -> str:
        """How job ids reach this worker, as its start line says it: what is
        actually used, not what was asked for (SQLite has no NOTIFY: it polls)."""
        t, every = self.state.transport, f"{self.poll_interval:g}s"
        if t.delivers:
            return f"{t.name} (the database every {t.fallback_interval:g}s as a fallback, every {every} while it is down)"
        if listener is not None:
            return f"{t.name} (LISTEN/NOTIFY, and polling every {every})"
        return f"poll (every {every})"

    def _fired(self, fired: list[FiredTick]) -> None:
        """Database thread: announce the jobs a scheduler tick made (a delivering
        transport publishes them; the database transport's NOTIFY went with the insert)."""
        announce(self.state.transport, [(t.job_id, t.queue) for t in fired if t.job_id is not None])

    def _made_due(self, jobs: Any) -> None:
        """A reaper or scheduler tick made jobs due (recovered, fired): wake the claimer."""
        if jobs:
            self.state.nudge.set()

    def _swept(self, sent: Any) -> None:
        self.state.counts["swept"] += sent

    async def _drain(self) -> None:
        s, ex = self.state, self.executor
        deadline = time.monotonic() + self.shutdown_timeout
        while len(s.inflight) and not s.stop_now and time.monotonic() < deadline:
            s.nudge.clear()
            ex.unhold_overdue()  # buffered jobs start as slots free, but wait no longer than they would have
            await wait_event(s.nudge, min(0.5, max(0.01, deadline - time.monotonic())))
        s.stop_now = True  # from here on no buffered job starts: they are handed back
        ex.unhold()
        leftovers = ex.cancel_running()
        if leftovers:
            s.log.warning("releasing %d job(s) still running at shutdown", len(leftovers))
        grace = time.monotonic() + RELEASE_GRACE
        while len(s.inflight) and time.monotonic() < grace:
            await asyncio.sleep(0.02)


#: the outcomes a worker's closing line names first, in this order; other counts follow
_OUTCOMES = ("succeeded", "failed", "timed_out", "cancelled", "released", "lost", "stale_reports")


def summary(counts: Counter[str]) -> str:
    """A worker's counts as its closing log line reads them: "120 succeeded,
    2 failed, 1 released; claimed 123 in 41 claims, ...", zeros left out."""
    outcomes = ", ".join(f"{counts[k]} {k.replace('_', ' ')}" for k in _OUTCOMES if counts[k])
    rest = ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in sorted(counts.items()) if n and k not in _OUTCOMES)
    return "; ".join(part for part in (outcomes or "no jobs finished", rest) if part)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"
