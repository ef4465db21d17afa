"""The worker: claims jobs in batches sized to its free slots, runs their
handlers, reports their outcomes (fenced), and shuts down gracefully.

Threads and their jobs:

- the event loop: claiming, running ``async def`` handlers, batching reports;
  on PostgreSQL it also sends the round's statements (claims, carried and
  batched successes) itself, over connections of its own;
- ``tether-db-*`` (two): every other store call the loop makes (and, on the
  other backends, the round's statements too), so claims and completions
  overlap and the loop never blocks on the database;
- ``tether-heartbeat``: renews leases and fences the worker off lost ones, on a
  thread of its own so a handler that hogs the loop or the CPU cannot starve it;
- ``tether-handler-*``: ``def`` handlers;
- ``tether-listen``: PostgreSQL LISTEN, when the backend has it;
- ``tether-nats``: the NATS link, when the transport is NATS JetStream.

How job ids reach the claimer is the transport's business
(``tether.transport``): the database itself (polling, woken by NOTIFY), or NATS,
whose messages each lead to a fenced claim of that one job by id
(``Store.claim_ids``); while NATS is unreachable the worker polls the database,
and even while it is up it claims from the database every
``fallback_interval``. Either way the database decides who owns a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import signal
import sys
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from ..config import DEFAULT_QUEUE, dump_json, validate_queue
from ..context import CancelReason, JobCancelled, JobContext
from ..errors import ConfigError, PayloadError, StaleAttempt
from ..events import Event, after_attempt
from ..logs import FieldsAdapter, job_fields
from ..model import ClaimedJob, JobState, Outcome, Reaped, WorkerInfo
from ..store import Listener
from ..transport import Delivery
from . import failpoints
from .heartbeat import Heartbeater
from .history import recorder_from_env
from .identity import host_name, make_worker_id, process_start_time
from .inflight import InFlight, Running
from .pool import DaemonPool
from .reaper import Reaper
from .reconcile import Reconciler
from .sweeper import Sweeper

if TYPE_CHECKING:
    from ..app import Task, Tether

__all__ = ["Worker"]

log = logging.getLogger("tether.worker")
T = TypeVar("T")

MAX_CLAIM_BATCH = 200
#: how long the claimer waits for more free slots before claiming just a few
COALESCE_WAIT = 0.005
#: leases a worker may hold per unit of concurrency (the surplus covers finished
#: jobs whose reports are in flight, so claiming overlaps reporting)
LEASES_PER_SLOT = 2
#: a report that failed (database unreachable) is retried this often until the
#: job's local lease deadline passes; after that the reaper owns the job
REPORT_RETRY = 0.5
#: after the shutdown timeout, how long to wait for releases to be written
RELEASE_GRACE = 10.0
#: how long the final "worker stopped" write may take before we exit without it
STOP_GRACE = 3.0
#: how long one transport fetch waits for a first message
FETCH_WAIT = 1.0
#: how long a worker waits at start for its transport to come up before polling
TRANSPORT_START_WAIT = 3.0
#: how long finished jobs' successes wait for the claimer to carry them in its
#: next claim (one statement, one commit) before the reporter writes them alone
CARRY_WAIT = 0.05
#: claims carry successes only in workers whose claims take at most this many
#: jobs. In small rounds the statement's own cost (a round trip, a commit,
#: executor start-up) is most of it, and carrying halves it. In large ones the
#: rows are the cost: successes written by the reporter while the next claim
#: is in flight run beside it on a second connection, and the round takes as
#: long as the longer of the two, not both. On PostgreSQL (100,000 no-op jobs,
#: medians of 3): 1 x 100 (claims of up to 200) carrying ran 17% fewer jobs/s
#: for the same CPU per job; 1 x 50 (claims of up to 100) ran as many jobs/s
#: for 13% less CPU per job (a statement's fixed cost on the database is about
#: 0.17 ms); 1 x 10: -20% jobs/s when not carrying.
CARRY_MAX = 128
#: prefetch: while handlers finish within this (a running average, seconds),
#: the claimer claims one batch ahead of its free slots, so that the next
#: claim's statement runs while this batch's handlers do
PREFETCH_BELOW = 0.025
#: a prefetched job waits at most this long for a slot; then the buffer is
#: released (fenced, budget untouched) and prefetching pauses
PREFETCH_HOLD_MAX = 0.5
#: weight of the newest handler duration in that running average
PREFETCH_ALPHA = 0.2
#: while prefetching, a claim may take this many times the claim batch (up to
#: MAX_CLAIM_BATCH): handlers that short empty the extra in a wave or two
PREFETCH_FACTOR = 2


class Worker:
    def __init__(
        self,
        app: Tether,
        *,
        concurrency: int = 10,
        queues: Iterable[str] | None = None,
        shutdown_timeout: float = 30.0,
        poll_interval: float | None = None,
        claim_batch: int | None = None,
        prefetch: bool = True,
    ) -> None:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if shutdown_timeout < 0:
            raise ConfigError(f"shutdown_timeout must be >= 0 seconds, got {shutdown_timeout!r}")
        if poll_interval is not None and poll_interval <= 0:
            raise ConfigError(f"poll_interval must be positive, got {poll_interval!r}")
        self.app = app
        self.store = app.store
        self.timers = app.timers
        self.concurrency = concurrency
        if queues is None:
            queues = sorted({t.options.queue for t in app.tasks.values()}) or [DEFAULT_QUEUE]
        self.queues = [validate_queue(q) for q in queues]
        if not self.queues:
            raise ConfigError("a worker needs at least one queue")
        self.shutdown_timeout = shutdown_timeout
        self.poll_interval = poll_interval or self.store.default_poll_interval
        self.claim_batch = min(claim_batch or concurrency, MAX_CLAIM_BATCH)
        self._ahead_batch = min(PREFETCH_FACTOR * self.claim_batch, MAX_CLAIM_BATCH)
        self._min_claim = max(1, self.claim_batch // 4)
        self.host = host_name()
        self.id = make_worker_id(self.host)
        self.log = FieldsAdapter(log, {"worker": self.id})
        self.inflight = InFlight()
        self.history = recorder_from_env(self.id)  # None unless a chaos run asks
        self.events = app.events
        self.transport = app.transport
        self.transport.check(self.timers)
        self.reaper = Reaper(self.store, events=self.events, on_requeued=self._republish)
        self.sweeper = Sweeper(self.store, self.transport, self.queues)
        self._transport_ok: bool | None = None
        self._last_db_claim = -math.inf  # the first round claims from the database
        self.reconciler = Reconciler(self.store, worker_id=self.id, host=self.host, reaper=self.reaper)
        self.heartbeater = Heartbeater(
            self.store, self.id, self.inflight,
            interval=self.timers.heartbeat_interval, lease_ttl=self.timers.lease_ttl,
            on_lost=self._beat_lost, on_cancel_requested=self._cancel_requested, history=self.history,
            events=self.events,
        )
        self.counts: Counter[str] = Counter()
        self._busy = 0  # handlers running now; the concurrency limit applies to these
        self._handlers = DaemonPool()
        self._db_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tether-db")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nudge: asyncio.Event | None = None
        self._stop_event: asyncio.Event | None = None
        self._stop_waiter: asyncio.Task[Any] | None = None
        self._stopping = False
        self._stop_now = False
        self._done: list[tuple[Running, str | None]] = []
        self._report_wake: asyncio.Event | None = None
        #: set while the claimer waits for work: successes have no claim to ride
        #: with, so the reporter writes them at once
        self._claimer_idle: asyncio.Event | None = None
        self._reports: set[asyncio.Task[None]] = set()
        #: claimed jobs waiting for a handler slot (prefetch), oldest first
        self._ready: deque[Running] = deque()
        #: prefetch only where the store gains from it (not SQLite), and without
        #: a delivering transport: there each message leads to a claim of its
        #: own job, and the transport holds the rest
        self._prefetch = prefetch and self.store.claims_ahead and not self.transport.delivers
        #: whether claims carry successes (complete_and_claim): small ones do;
        #: with a delivering transport each claim is of named jobs and carries none
        self._carry = (self._ahead_batch if self._prefetch else self.claim_batch) <= CARRY_MAX \
            and not self.transport.delivers
        self._avg_run = math.inf  # running average of handler durations, seconds
        # Bound once: each job's context and handler would otherwise bind them anew.
        self._progress_fn = self._progress
        self._on_ctx_cancel_fn = self._on_ctx_cancel
        self._finished_fn = self._finished

    # -- control ----------------------------------------------------------------------
    def stop(self, *, immediate: bool = False) -> None:
        """Stop claiming and shut down; thread-safe. ``immediate`` skips the wait
        for in-flight handlers: they are cancelled and released at once."""
        self._stopping = True
        if immediate:
            self._stop_now = True
        if self._loop is not None and self._nudge is not None and self._stop_event is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._nudge.set)
                self._loop.call_soon_threadsafe(self._stop_event.set)

    def _on_signal(self, signum: int) -> None:
        if self._stopping:
            self.log.warning("second %s: stopping now, releasing %d job(s)", signal.Signals(signum).name, len(self.inflight))
            self.stop(immediate=True)
        else:
            self.log.warning(
                "%s: no new claims; waiting up to %gs for %d job(s) (send again to stop now)",
                signal.Signals(signum).name, self.shutdown_timeout, len(self.inflight),
            )
            self.stop()

    # -- the main coroutine -------------------------------------------------------------
    async def run(self, *, install_signal_handlers: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._nudge = asyncio.Event()
        self._report_wake = asyncio.Event()
        self._claimer_idle = asyncio.Event()
        self._stop_event = asyncio.Event()
        if self._stopping:
            self._stop_event.set()
        self._stop_waiter = loop.create_task(self._stop_event.wait(), name="tether-stop-waiter")
        try:
            await self._start_up()
        except BaseException:
            self._handlers.shutdown(wait=False)
            self._db_pool.shutdown(wait=False, cancel_futures=True)
            raise
        listener = self.transport.wake(self.store, self._on_notify)
        if self.transport.delivers:
            self.transport.start(self.queues)
            await asyncio.to_thread(self.transport.ready, TRANSPORT_START_WAIT)
        self.heartbeater.start()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        self.log.info("worker %s started: queues=%s concurrency=%d lease_ttl=%gs heartbeat=%gs reaper=%gs transport=%s",
                 self.id, ",".join(self.queues), self.concurrency, self.timers.lease_ttl,
                 self.timers.heartbeat_interval, self.timers.reaper_interval, self.transport.name)
        await self._serve(loop, listener, install_signal_handlers)

    async def _start_up(self) -> None:
        """Check the schema, register, and recover dead predecessors' jobs."""
        await self._db(self.store.check_schema)
        await self._db(self.store.register_worker, WorkerInfo(
            id=self.id, host=self.host, pid=os.getpid(), proc_start=process_start_time(os.getpid()),
            started_at=None, last_seen=None, queues=self.queues, concurrency=self.concurrency,  # type: ignore[arg-type]
        ))
        if self.history is not None:
            self.history.record("started", host=self.host, queues=self.queues)
        try:
            recovered = await self._db(self.reconciler.run_once)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._db(self.store.stop_worker, self.id), STOP_GRACE)
            raise
        self.counts["recovered_at_start"] += len(recovered)

    async def _serve(self, loop: asyncio.AbstractEventLoop, listener: Listener | None,
                     install_signal_handlers: bool) -> None:
        reporter = loop.create_task(self._report_loop(), name="tether-reporter")
        reaper = loop.create_task(self._reap_loop(), name="tether-reaper")
        assert self._stop_waiter is not None
        background: tuple[asyncio.Task[Any], ...] = (reaper, reporter, self._stop_waiter)
        if self.transport.delivers:
            background += (loop.create_task(self._sweep_loop(), name="tether-sweeper"),)
        cancelled = False
        try:
            await self._claim_loop()
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
                await asyncio.wait_for(self._db(self.store.stop_worker, self.id), STOP_GRACE)
            self._handlers.shutdown(wait=False)
            self._db_pool.shutdown(wait=False, cancel_futures=True)
            self.log.info("worker %s stopped: %s", self.id, dict(self.counts))
            if self.history is not None:
                self.history.record("stopped", counts=dict(self.counts))
                self.history.close()
        if cancelled:
            raise asyncio.CancelledError

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._db_pool, partial(fn, *args))

    # -- claiming -----------------------------------------------------------------------
    def _on_notify(self, queue: str) -> None:
        """From the LISTEN thread: wake the claimer if the queue is ours."""
        if (queue == "*" or queue in self.queues) and self._loop is not None and self._nudge is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._nudge.set)

    async def _claim_loop(self) -> None:
        try:
            await self._claim_rounds()
        finally:
            assert self._claimer_idle is not None
            self._claimer_idle.set()  # no more claims: the reporter writes every success itself

    async def _claim_rounds(self) -> None:
        assert self._nudge is not None and self._claimer_idle is not None
        failures = 0
        ahead: _Claim | None = None  # sent before the last claim's jobs were taken
        claim: _Claim | None
        while not self._stopping or ahead is not None:
            self._nudge.clear()  # before the claim: a nudge during it is not lost
            if ahead is not None:
                claim, ahead, fetched = ahead, None, False
                want, sent_at = claim.want, claim.sent_at
            else:
                self._expire_held()
                free = self._room()
                if 0 < free < self._min_claim and self._busy:
                    # Only a few slots are free and more are about to be: wait a moment
                    # so one claim takes a batch instead of several claims taking one.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._batch_gather(), COALESCE_WAIT)
                    free = self._room()
                if free <= 0:
                    await self._idle()
                    continue
                want = min(free, self._batch())
                sent_at = time.monotonic()
                fetched = self._via_transport()
                claim = None if fetched else self._send(want)
            try:
                got = await (self._fetch_and_claim(want) if claim is None else self._claim_any(claim))
                if got is None:
                    return  # stopping
            except Exception as exc:
                failures += 1
                self.log.warning("claim failed (%s); retrying", exc)
                await asyncio.sleep(min(5.0, 0.2 * 2**failures))
                continue
            failures = 0
            full = len(got) == want
            if full and claim is not None and self._prefetching():
                # Pipeline: send the next claim (carrying the successes waiting)
                # before taking these jobs, so its statement runs on the
                # database while this batch is set up and run here.
                room = self._room() - len(got)
                if room >= self._min_claim:
                    self.counts["claims_ahead"] += 1
                    ahead = self._send(min(room, self._ahead_batch))
                    await asyncio.sleep(0)  # let it go out before these jobs are set up
            self.counts["claimed"] += len(got)
            for job, delivery in got:
                self._take(job, sent_at, delivery)
            if ahead is None and not ((full or fetched) and self._room() > 0):
                await self._idle()  # a fetch has already waited for work: no idle wait after one

    async def _idle(self) -> None:
        """Wait for a reason to claim: a nudge (a slot freed, a NOTIFY, a
        reaped job) or the poll interval; sooner when buffered jobs are due to
        be released."""
        assert self._nudge is not None and self._claimer_idle is not None
        wait = self.poll_interval
        if self._ready:
            wait = min(wait, max(0.0, self._ready[0].started + PREFETCH_HOLD_MAX - time.monotonic()))
        self._claimer_idle.set()  # idle exactly while waiting: every wake-up leads to a claim
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._nudge.wait(), wait)
        self._claimer_idle.clear()

    async def _batch_gather(self) -> None:
        assert self._nudge is not None
        while 0 < self._room() < self._min_claim and self._busy and not self._stopping:
            self._nudge.clear()
            await self._nudge.wait()

    def _room(self) -> int:
        """How many jobs the next claim may take: free handler slots, plus a
        prefetch batch while prefetching, less what already waits in the buffer.
        Bounded so that leases held (running handlers, the buffer, and finished
        ones whose reports are still being written) stay under twice the
        concurrency (plus the prefetch) when the database is slow to take
        reports."""
        ahead = self._ahead_batch if self._prefetching() else 0
        return min(self.concurrency + ahead - self._busy - len(self._ready),
                   LEASES_PER_SLOT * self.concurrency + ahead - len(self.inflight))

    def _batch(self) -> int:
        """How many jobs one claim may take: more while prefetching."""
        return self._ahead_batch if self._prefetching() else self.claim_batch

    def _prefetching(self) -> bool:
        """Claim ahead only while handlers are short: a prefetched job's lease
        and timeout start at its claim, and other workers cannot take it, so it
        must not wait long for a slot."""
        return self._prefetch and self._avg_run < PREFETCH_BELOW and not self._stopping

    def _expire_held(self) -> None:
        """Release the buffer once its oldest job has waited PREFETCH_HOLD_MAX
        for a slot (long handlers came after short ones); prefetching pauses
        until handlers are short again."""
        if self._ready and self._ready[0].started + PREFETCH_HOLD_MAX <= time.monotonic():
            self._avg_run = max(self._avg_run, PREFETCH_HOLD_MAX)
            self.log.info("releasing %d prefetched job(s): no handler slot freed within %gs",
                          len(self._ready), PREFETCH_HOLD_MAX)
            self._unhold()

    def _unhold(self) -> None:
        """Hand every buffered job back (fenced release, budget untouched)."""
        while self._ready:
            running = self._ready.popleft()
            self.counts["prefetch_released"] += 1
            if self.history is not None:
                self.history.record("handed_back", job=running.job.id, attempt=running.job.attempt)
            self._settle_unstarted(running, running.ctx.cancel_reason)

    def _via_transport(self) -> bool:
        """Take this round's jobs from the transport (True) or claim from the
        database (False): always the database without a delivering transport,
        while it is unreachable, and once every ``fallback_interval`` anyway."""
        t = self.transport
        if not t.delivers:
            return False
        ok = t.healthy
        if ok != self._transport_ok:
            if ok:
                log.warning("transport %s is up: taking job ids from it", t.name)
            else:
                log.warning("transport %s is unreachable: polling the database every %gs until it is back",
                            t.name, self.poll_interval)
            self._transport_ok = ok
        now = time.monotonic()
        if not ok or now - self._last_db_claim >= t.fallback_interval:
            self._last_db_claim = now
            return False
        return True

    async def _fetch_and_claim(self, want: int) -> list[tuple[ClaimedJob, Delivery | None]] | None:
        """Up to ``want`` messages, then one fenced claim of exactly their jobs.
        A message whose job the claim refuses (held, finished, not due, a
        repeat) is acked at once: the database has already said no."""
        deliveries = await self.transport.fetch(want, FETCH_WAIT, self.queues)
        if not deliveries:
            return []
        first: dict[int, Delivery] = {}
        for d in deliveries:
            if d.job_id in first:
                self.transport.ack(d)  # the same job twice in one batch
                self.counts["deliveries_refused"] += 1
            else:
                first[d.job_id] = d
        try:
            jobs = None if self._stopping else await self._claim(want, ids=list(first))
        except Exception:
            for d in first.values():
                self.transport.nak(d)
            raise
        if jobs is None:  # stopping: anything claimed was released again
            for d in first.values():
                self.transport.nak(d)
            return None
        claimed = {j.id for j in jobs}
        for job_id, d in first.items():
            if job_id not in claimed:
                self.transport.ack(d)
                self.counts["deliveries_refused"] += 1
        self.counts["deliveries_claimed"] += len(jobs)
        return [(j, first[j.id]) for j in jobs]

    async def _claim_any(self, claim: _Claim) -> list[tuple[ClaimedJob, Delivery | None]] | None:
        self.counts["db_claims"] += 1
        jobs = await self._receive(claim)
        return None if jobs is None else [(j, None) for j in jobs]

    async def _claim(self, want: int, *, ids: list[int] | None = None) -> list[ClaimedJob] | None:
        return await self._receive(self._send(want, ids=ids))

    def _send(self, want: int, *, ids: list[int] | None = None) -> _Claim:
        """Send one claim (of any due jobs, or of exactly ``ids``). Successes
        waiting to be written ride with a claim of any jobs: one round trip,
        one commit. The statement goes out when the loop next runs its tasks:
        a caller with other work to do first yields once (``asyncio.sleep(0)``)."""
        carried: list[tuple[Running, str | None]] = []
        store, pool = self.store, self._db_pool
        call: Coroutine[Any, Any, Any]
        if ids is not None:
            call = self._db(store.claim_ids, self.id, ids, self.queues, self.timers.lease_ttl)
        elif self._done and self._carry:
            carried, self._done = self._done, []
            call = store.complete_and_claim_async(self.id, _rows(carried), self.queues, want, self.timers.lease_ttl,
                                                  executor=pool)
        else:
            call = store.claim_async(self.id, self.queues, want, self.timers.lease_ttl, executor=pool)
        assert self._loop is not None
        return _Claim(self._loop.create_task(call), want, carried, time.monotonic())

    async def _receive(self, claim: _Claim) -> list[ClaimedJob] | None:
        """A sent claim's jobs, raced against stop(): a worker asked to stop
        while its claim hangs on an unreachable database must still stop. Jobs
        a late claim returns are released at once (fenced, budget untouched)."""
        assert self._stop_waiter is not None
        fut, carried, sent_at = claim.fut, claim.carried, claim.sent_at
        try:
            done, _ = await asyncio.wait({fut, self._stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
            if fut in done:
                return self._claimed(fut.result(), carried, sent_at)
            try:
                jobs = self._claimed(await asyncio.wait_for(fut, STOP_GRACE), carried, sent_at)
            except Exception as exc:  # includes the timeout: the reaper owns whatever it took
                self.log.warning("stopping with a claim still in flight (%s)", exc or type(exc).__name__)
                if carried:
                    self._complete_later(carried)
                return None
        except BaseException:
            if carried:
                # Their fate is unknown (the statement may have committed): write
                # them again; a refusal is then checked against the audit.
                self._complete_later(carried)
            raise
        for job in jobs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._db(self.store.release, self.id, job.id, job.attempt), STOP_GRACE)
        return None

    def _claimed(self, answer: Any, carried: list[tuple[Running, str | None]], sent_at: float) -> list[ClaimedJob]:
        """A claim's jobs; when it carried successes, tell their handlers' story first."""
        if not carried:
            return list(answer)
        accepted, jobs = answer
        self.counts["successes_carried"] += len(carried)
        self._completed(carried, accepted, sent_at)
        carried.clear()  # written: an exception from here on must not write them again
        return list(jobs)

    # -- running handlers ----------------------------------------------------------------
    def _take(self, job: ClaimedJob, sent_at: float, delivery: Delivery | None = None) -> None:
        """A job the claim returned: run it if a slot is free, else buffer it."""
        running = self._hold(job, sent_at, delivery)
        if running is None:
            return
        if self._busy < self.concurrency and not self._ready:
            self._run(running)
        else:
            self.counts["prefetched"] += 1
            self._ready.append(running)
            if self.history is not None:
                self.history.record("buffered", job=job.id, attempt=job.attempt)

    def _start_ready(self) -> None:
        """Start buffered jobs in the free handler slots, oldest first."""
        while self._ready and self._busy < self.concurrency and not self._stop_now:
            running = self._ready.popleft()
            reason = running.ctx.cancel_reason
            if running.lost or reason is not None:
                self._settle_unstarted(running, reason)
            else:
                self._run(running)

    def _settle_unstarted(self, running: Running, reason: str | None) -> None:
        """A buffered job that will not run here: lost while it waited (the
        heartbeat said so), cancelled on request, or handed back."""
        running.reporting = True
        if running.lost or reason == CancelReason.LOST:
            self._forget(running)
        elif reason == CancelReason.REQUESTED:
            self._report(running, self._fail, Outcome.CANCELLED, "cancelled on request", None, False)
        else:
            self._report(running, self._release)

    def _hold(self, job: ClaimedJob, sent_at: float, delivery: Delivery | None) -> Running | None:
        """Take on a claimed job: its local deadlines (from the claim), the
        in-flight entry the heartbeat renews, its span. None when no handler is
        registered for its task (its failure is being reported)."""
        ctx = JobContext(job, self.id, self._progress_fn, self._on_ctx_cancel_fn)
        local = sent_at + job.lease_ttl
        hard = None
        if job.timeout:
            hard = sent_at + job.timeout
            local = min(local, hard)
        running = Running(job, ctx, local, sent_at, hard, delivery=delivery)
        earlier = self.inflight.get(job.id)
        if earlier is not None and earlier.job.attempt < job.attempt:
            # Our own older attempt's lease lapsed and was reaped, and we claimed
            # the job again before a heartbeat could tell us: it has lost the job.
            self._lost(earlier, f"its lease lapsed and this worker claimed the job again as attempt {job.attempt}")
        self.inflight.add(running)
        if self.history is not None:
            self.history.record("claimed", job=job.id, attempt=job.attempt, sent=sent_at, db=job.claimed_at)
        if failpoints.ARMED:
            failpoints.hit("after_claim")
        tracing = self.app.tracing
        if tracing is not None:
            running.span = tracing.start_attempt(job, self.id)
        if job.task not in self.app.tasks:
            known = ", ".join(sorted(self.app.tasks)) or "none"
            self._report(running, self._fail, Outcome.FAILED,
                         f"unknown task {job.task!r}: no handler is registered under that name in worker "
                         f"{self.id} (known: {known})", None, True)
            return None
        return running

    def _run(self, running: Running) -> None:
        """Start the handler in a free slot."""
        assert self._loop is not None
        job, ctx = running.job, running.ctx
        task = self.app.tasks[job.task]
        running.started = time.monotonic()
        if self.events.active:
            wait = (job.claimed_at - job.run_at).total_seconds() if job.run_at is not None else None
            self.events.emit(Event("job.started", job_id=job.id, attempt=job.attempt, task=job.task, queue=job.queue,
                                   worker=self.id, state=JobState.RUNNING, queue_wait=wait))
        fut: asyncio.Future[Any]
        tracing = self.app.tracing
        self._busy += 1  # before the start: an eager task (3.12+) may end within it
        if task.is_async:
            # The task runs _drive around the handler's coroutine, which reports
            # the outcome as its last step: no done callback, and so no second
            # trip through the loop, per job. Calling the handler only binds the
            # arguments; a binding error (args that do not fit) fails the
            # attempt as a raise inside would.
            try:
                coro = (task.fn(ctx, **job.args) if tracing is None else  # the span is current while it runs
                        tracing.call_async(running.span, task.fn, ctx, job.args))
            except Exception as exc:
                fut = self._loop.create_future()
                fut.set_exception(exc)
                fut.add_done_callback(partial(self._finished_fn, running))
            else:
                fut = _start(self._loop, self._drive(running, coro))
        else:
            if tracing is None:
                fut = self._loop.run_in_executor(self._handlers, _call_sync, task, ctx, job.args)
            else:
                fut = self._loop.run_in_executor(self._handlers, tracing.call_sync, running.span, task.fn, ctx,
                                                 job.args)
            fut.add_done_callback(partial(self._finished_fn, running))
        running.handler = fut
        hard = running.hard_deadline  # from the claim: a prefetched job's wait counts against it
        if hard is not None:
            self._loop.call_at(self._loop.time() + (hard - time.monotonic()), self._timed_out, running)

    def _progress(self, job: ClaimedJob, fraction: float | None, message: str | None) -> bool:
        sent_at = time.monotonic()
        cancel = self.store.progress(self.id, job.id, job.attempt, fraction, message, self.timers.lease_ttl)
        self.inflight.renewed(job.id, job.attempt, sent_at)
        if self.history is not None:  # a progress report renews the lease as a heartbeat does
            self.history.record("hb", job=job.id, attempt=job.attempt, beat="renewed", sent=sent_at, via="progress")
        return cancel

    def _timed_out(self, running: Running) -> None:
        if running.handler is not None and not running.handler.done():
            running.ctx.cancel(CancelReason.TIMED_OUT)

    def _on_ctx_cancel(self, ctx: JobContext) -> None:
        """Any thread: the ctx's cancel signal was set; interrupt the handler on the loop."""
        running = self.inflight.get(ctx.job_id)
        if running is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._interrupt, running)

    def _interrupt(self, running: Running) -> None:
        fut = running.handler
        if fut is None or fut.done():
            return
        # A coroutine is cancelled at its next await. A thread cannot be
        # interrupted: on a cancel request it reads ctx.cancelled and decides; when
        # the attempt is lost, timed out or shut down we stop waiting for it.
        if isinstance(fut, asyncio.Task) or running.lost or running.ctx.cancel_reason != CancelReason.REQUESTED:
            fut.cancel()

    def _lost(self, running: Running, why: str) -> None:
        """Heartbeat thread: this attempt no longer owns its job."""
        if running.lost:
            return
        running.lost = True
        self.counts["lost"] += 1
        if running.span is not None:
            _ended(running, "lost", why)
        if self.history is not None:
            self.history.record("lost", job=running.job.id, attempt=running.job.attempt, why=why)
        self.log.warning("job %s attempt %s lost: %s; cancelling its handler", running.job.id, running.job.attempt, why,
                    extra=job_fields(running.job, self.id))
        if self.events.active:
            self._emit("job.lost", running, error=why)
        if not running.ctx.cancel(CancelReason.LOST):
            self._on_ctx_cancel(running.ctx)  # already cancelled for another reason: interrupt anyway

    def _beat_lost(self, running: Running, why: str) -> None:
        """Heartbeat thread. Once the handler has finished, its report decides:
        the write that ended the lease may be that report's own."""
        if not running.reporting:
            self._lost(running, why)

    def _cancel_requested(self, running: Running) -> None:
        if running.ctx.cancel(CancelReason.REQUESTED):
            self.log.info("job %s: cancel requested; telling its handler", running.job.id,
                     extra=job_fields(running.job, self.id))

    # -- outcomes --------------------------------------------------------------------------
    async def _drive(self, running: Running, coro: Coroutine[Any, Any, Any]) -> None:
        """An async handler's task: the handler, then its outcome, in the same
        step. A cancellation (and KeyboardInterrupt, SystemExit) goes on up
        once reported, so the task ends cancelled as the handler did; any
        other exception is the attempt's outcome, reported and not raised."""
        try:
            result = await coro
        except Exception as exc:
            self._handler_ended(running, None, exc)
            return
        except BaseException as exc:
            self._handler_ended(running, None, exc)
            raise
        self._handler_ended(running, result, None)

    def _finished(self, running: Running, fut: asyncio.Future[Any]) -> None:
        """A handler's future is done (a ``def`` handler's thread, or a call
        that failed to bind its args)."""
        if fut.cancelled():
            self._handler_ended(running, None, asyncio.CancelledError())
        else:
            exc = fut.exception()
            self._handler_ended(running, None if exc is not None else fut.result(), exc)

    def _handler_ended(self, running: Running, result: Any, exc: BaseException | None) -> None:
        """The handler returned ``result`` or raised ``exc``: free its slot and
        report the outcome."""
        job, ctx = running.job, running.ctx
        running.reporting = True
        self._busy -= 1
        took = time.monotonic() - running.started
        self._avg_run = took if self._avg_run == math.inf else self._avg_run + PREFETCH_ALPHA * (took - self._avg_run)
        if self._ready:
            self._start_ready()
        if self._nudge is not None:
            self._nudge.set()  # a handler slot is free: claim while this report is written
        if self.history is not None:
            self.history.record("handler_end", job=job.id, attempt=job.attempt, ok=exc is None)
        if running.lost:
            self._forget(running)
            return
        if isinstance(exc, (asyncio.CancelledError, JobCancelled)) or (exc is not None and ctx.cancelled):
            reason = ctx.cancel_reason
            if reason == CancelReason.REQUESTED:
                self._report(running, self._fail, Outcome.CANCELLED, "cancelled on request", None, False)
            elif reason == CancelReason.TIMED_OUT:
                self._report(running, self._fail, Outcome.TIMED_OUT,
                             f"attempt timed out after {job.timeout:g}s", None, True)
            elif reason == CancelReason.SHUTDOWN:
                self._report(running, self._release)
            elif reason == CancelReason.LOST:
                self._forget(running)
            else:
                self._report(running, self._fail, Outcome.FAILED, "handler was cancelled", _tb(exc), True)
            return
        if isinstance(exc, StaleAttempt):
            self._lost(running, str(exc))
            self._forget(running)
            return
        if exc is not None:
            self._report(running, self._fail, Outcome.FAILED, f"{type(exc).__name__}: {exc}", _tb(exc), True)
            return
        try:
            result_json = None if result is None else dump_json(result, f"result of task {job.task!r}",
                                                               self.app.max_payload_bytes)
        except PayloadError as perr:
            # Retrying cannot make a result JSON: the job ends dead with the reason.
            self._report(running, self._fail, Outcome.FAILED, str(perr), None, False)
            return
        assert self._report_wake is not None and self._claimer_idle is not None
        self._done.append((running, result_json))
        if self._room() > 0 and not self._stopping:
            self._claimer_idle.clear()  # the nudge above wakes the claimer, which will carry this success
        self._report_wake.set()

    def _forget(self, running: Running) -> None:
        """The attempt is over here: its outcome is written (or it was lost, and
        the database's recovery owns the job). Only now is its message acked."""
        self._let_go(running)
        if self._nudge is not None:
            self._nudge.set()

    def _let_go(self, running: Running) -> None:
        """``_forget`` without waking the claimer: for a batch, which wakes it once."""
        if running.delivery is not None:
            self.transport.ack(running.delivery)
            running.delivery = None
        if running.span is not None:
            self._end_span(running)
        self.inflight.remove(running)

    async def _report_loop(self) -> None:
        """Write successes in batches: one fenced statement for all that finished
        since the last write. In a worker whose claims carry them
        (``complete_and_claim``), this writes only what no claim is about to carry."""
        assert self._report_wake is not None and self._claimer_idle is not None and self._loop is not None
        while True:
            await self._report_wake.wait()
            self._report_wake.clear()
            if self._carry:
                # Leave them to the claimer while it is claiming or about to;
                # waking to find it active again (more jobs finished meanwhile),
                # keep leaving them, up to CARRY_WAIT.
                deadline = self._loop.time() + CARRY_WAIT
                while self._done and not self._claimer_idle.is_set():
                    remaining = deadline - self._loop.time()
                    if remaining <= 0:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._claimer_idle.wait(), remaining)
            batch, self._done = self._done, []
            if batch:
                await self._complete(batch)

    def _complete_later(self, batch: list[tuple[Running, str | None]]) -> None:
        """Write these successes again, in the background, as a retry."""
        assert self._loop is not None
        t = self._loop.create_task(self._complete(batch, retried=True))
        self._reports.add(t)
        t.add_done_callback(self._reports.discard)

    async def _complete(self, batch: list[tuple[Running, str | None]], *, retried: bool = False) -> None:
        rows = _rows(batch)
        while True:
            sent_at = time.monotonic()
            try:
                accepted = set(await self.store.complete_async(self.id, rows, executor=self._db_pool))
                break
            except Exception as exc:
                retried = True
                self.log.warning("completing %d job(s) failed (%s); retrying", len(rows), exc)
                now = time.monotonic()
                for r, _ in batch:
                    if r.lost or r.local_deadline <= now:
                        self._lost(r, "could not report success before the lease lapsed")
                        self._forget(r)
                batch = [(r, res) for r, res in batch if not r.lost]
                rows = _rows(batch)
                if not batch:
                    return
                await asyncio.sleep(REPORT_RETRY)
        if retried:
            # A try whose answer was lost may have been written: the retry then
            # finds the job no longer running. Ask the attempts audit, rather
            # than report a recorded success as refused.
            for r, _ in batch:
                if r.job.id not in accepted and await self._db(self._recorded, r, {Outcome.SUCCEEDED}) is not None:
                    accepted.add(r.job.id)
        self._completed(batch, accepted, sent_at)

    def _completed(self, batch: list[tuple[Running, str | None]], accepted: set[int], sent_at: float) -> None:
        """The answer to a write of these successes: ``accepted`` passed their fence."""
        history, emit = self.history, self.events.active
        refused = 0
        for r, _ in batch:
            job = r.job
            ok = job.id in accepted
            if history is not None:
                history.record("report", job=job.id, attempt=job.attempt, op="complete", accepted=ok, sent=sent_at)
            if r.span is not None:
                _ended(r, *(("succeeded", None, "succeeded") if ok else
                            ("lost", "its success was refused: the attempt had lost the job", None)))
            if not ok:
                refused += 1
                self.log.warning("job %s attempt %s finished here but its success was refused: the attempt had "
                            "lost the job (at-least-once: it may run again or already has)", job.id, job.attempt,
                            extra=job_fields(job, self.id))
            elif emit:
                self._emit("job.succeeded", r, state=JobState.SUCCEEDED, outcome=Outcome.SUCCEEDED)
            self._let_go(r)
        self.counts["succeeded"] += len(batch) - refused
        if refused:
            self.counts["stale_reports"] += refused
        if self._nudge is not None:
            self._nudge.set()

    def _report(self, running: Running, fn: Callable[..., Any], *args: Any) -> None:
        assert self._loop is not None
        t = self._loop.create_task(self._report_one(running, fn, *args))
        self._reports.add(t)
        t.add_done_callback(self._reports.discard)

    async def _report_one(self, running: Running, fn: Callable[..., Any], *args: Any) -> None:
        tried = False
        try:
            while not running.lost:
                sent_at = time.monotonic()
                try:
                    await self._db(fn, running, *args)
                    if self.history is not None:
                        self.history.record("report", job=running.job.id, attempt=running.job.attempt,
                                            op=fn.__name__.strip("_"), accepted=True, sent=sent_at)
                    return
                except StaleAttempt as exc:
                    # After a try whose answer was lost, the refusal may be our own
                    # earlier write: the attempts audit says whether it was.
                    wrote = {args[0]} if fn == self._fail else {Outcome.RELEASED}
                    state = await self._db(self._recorded, running, wrote) if tried else None
                    if state is not None:
                        await self._db(partial(fn, running, *args, recorded=state))
                        if self.history is not None:
                            self.history.record("report", job=running.job.id, attempt=running.job.attempt,
                                                op=fn.__name__.strip("_"), accepted=True, sent=sent_at)
                        return
                    if running.span is not None:
                        _ended(running, "lost", str(exc))
                    self.counts["stale_reports"] += 1
                    self.log.warning("%s", exc, extra=job_fields(running.job, self.id))
                    if self.history is not None:
                        self.history.record("report", job=running.job.id, attempt=running.job.attempt,
                                            op=fn.__name__.strip("_"), accepted=False, sent=sent_at)
                    return
                except Exception as exc:
                    tried = True
                    if running.local_deadline <= time.monotonic():
                        self._lost(running, f"could not report before the lease lapsed ({exc})")
                        return
                    self.log.warning("report for job %s failed (%s); retrying", running.job.id, exc,
                                extra=job_fields(running.job, self.id))
                    await asyncio.sleep(REPORT_RETRY)
        finally:
            self._forget(running)

    def _recorded(self, running: Running, outcomes: set[Outcome]) -> JobState | None:
        """Database thread: whether this attempt's outcome (one of ``outcomes``)
        is in the attempts audit, written by us; if so, the state it left the
        job in (queued if the job has been claimed again since)."""
        job = self.store.get_job(running.job.id)
        if job is None or not any(a.attempt == running.job.attempt and a.worker == self.id and a.outcome in outcomes
                                  for a in job.attempts):
            return None
        return JobState.QUEUED if job.state is JobState.RUNNING else job.state

    def _fail(self, running: Running, outcome: Outcome, error: str, tb: str | None, retry: bool, *,
              recorded: JobState | None = None) -> None:
        """Write a failed attempt (``recorded``: an earlier try already did) and tell the world."""
        state = recorded or self.store.fail(self.id, running.job.id, running.job.attempt, outcome=outcome,
                                            error=error, traceback=tb, retry=retry)
        self.counts[str(outcome)] += 1
        if running.span is not None:
            _ended(running, outcome, error, state)
        level = logging.WARNING if state in (JobState.DEAD,) else logging.INFO
        self.log.log(level, "job %s attempt %s %s: %s -> %s", running.job.id, running.job.attempt, outcome, error, state,
                extra=job_fields(running.job, self.id))
        if self.events.active:
            if outcome is not Outcome.CANCELLED:
                self._emit("job.failed", running, state=state, outcome=outcome, error=error)
            follow = after_attempt(state)
            if follow is not None:
                self._emit(follow, running, state=state, outcome=outcome, error=error)

    def _emit(self, name: str, running: Running, *, state: JobState | None = None, outcome: Outcome | None = None,
              error: str | None = None) -> None:
        job = running.job
        self.events.emit(Event(name, job_id=job.id, attempt=job.attempt, task=job.task, queue=job.queue,
                               worker=self.id, state=state, outcome=outcome, error=error,
                               duration=time.monotonic() - running.started))

    def _end_span(self, running: Running) -> None:
        outcome, error, state = running.ended or ("lost", None, None)
        from ..otel import Tracing  # only ever imported when the app is instrumented

        Tracing.end_attempt(running.span, outcome, error, state)
        running.span = None

    def _release(self, running: Running, *, recorded: JobState | None = None) -> None:
        state = recorded or self.store.release(self.id, running.job.id, running.job.attempt)
        self.counts["released"] += 1
        if running.span is not None:
            _ended(running, Outcome.RELEASED, None, state)
        if state is JobState.QUEUED:
            self.transport.publish([(running.job.id, running.job.queue)], retry=True)

    def _republish(self, requeued: list[Reaped]) -> None:
        """Database thread: the reaper (or start-up reconciliation) sent these
        back to queued; announce them again, marked as retries."""
        sent = self.transport.publish([(r.id, r.queue) for r in requeued], retry=True)
        self.counts["republished"] += sent
        if self.transport.delivers:
            log.info("republished %d of %d requeued job(s) as retries (ids %s)", sent, len(requeued),
                     ", ".join(str(r.id) for r in requeued[:10]))

    # -- maintenance and shutdown ------------------------------------------------------------
    async def _reap_loop(self) -> None:
        interval = self.timers.reaper_interval
        # Spread workers out so they do not all reap in the same instant.
        await asyncio.sleep(random.uniform(0, interval))
        while True:
            started = time.monotonic()
            try:
                reaped = await self._db(self.reaper.run_until_clear)
            except Exception as exc:
                self.log.warning("reaper tick failed: %s", exc)
                if self.history is not None:
                    self.history.record("reap", started=started, ok=False, error=str(exc)[:200])
            else:
                if self.history is not None:
                    self.history.record("reap", started=started, ok=True, jobs=[
                        [r.id, r.attempt, r.lease_until.timestamp() if r.lease_until else None] for r in reaped])
                if reaped and self._nudge is not None:
                    self._nudge.set()  # recovered jobs are due now: claim them if we have room
            await asyncio.sleep(interval * random.uniform(0.9, 1.0))

    async def _sweep_loop(self) -> None:
        interval = self.transport.sweep_interval
        while True:
            await asyncio.sleep(interval * random.uniform(0.9, 1.0))
            try:
                self.counts["swept"] += await self._db(self.sweeper.run_once)
            except Exception as exc:
                log.warning("transport sweep failed: %s", exc)

    async def _drain(self) -> None:
        assert self._nudge is not None
        deadline = time.monotonic() + self.shutdown_timeout
        while len(self.inflight) and not self._stop_now and time.monotonic() < deadline:
            self._nudge.clear()
            self._expire_held()  # buffered jobs start as slots free, but wait no longer than they would have
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), min(0.5, max(0.01, deadline - time.monotonic())))
        self._stop_now = True  # from here on no buffered job starts: they are handed back
        self._unhold()
        leftovers = [r for r in self.inflight.all() if r.handler is not None and not r.handler.done()]
        if leftovers:
            self.log.warning("releasing %d job(s) still running at shutdown", len(leftovers), extra={"worker": self.id})
        for running in leftovers:
            # A pending cancel request keeps its reason (the job ends cancelled);
            # otherwise the job is released without spending its budget.
            running.ctx.cancel(CancelReason.SHUTDOWN)
            if running.handler is not None:
                running.handler.cancel()
        grace = time.monotonic() + RELEASE_GRACE
        while len(self.inflight) and time.monotonic() < grace:
            await asyncio.sleep(0.02)


@dataclass(eq=False)
class _Claim:
    """A claim sent to the database and not yet answered."""

    fut: asyncio.Future[Any]
    want: int
    #: successes riding with it (complete_and_claim), written once it answers
    carried: list[tuple[Running, str | None]]
    #: monotonic time it was sent: the jobs' local deadlines count from here
    sent_at: float


def _rows(batch: list[tuple[Running, str | None]]) -> list[tuple[int, int, str | None]]:
    """Finished attempts as the (id, attempt, result JSON) rows complete takes."""
    return [(r.job.id, r.job.attempt, res) for r, res in batch]


if sys.version_info >= (3, 12):
    def _start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """A handler's task, started at once (an eager task, Python 3.12+): it
        runs up to its first real wait now, as the current task, and one that
        finishes without waiting costs no trip through the loop."""
        return asyncio.Task(coro, loop=loop, eager_start=True)
else:
    def _start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """A handler's task (eager where Python has eager tasks, 3.12+)."""
        return loop.create_task(coro)


def _call_sync(task: Task[Any, Any], ctx: JobContext, args: dict[str, Any]) -> Any:
    return task.fn(ctx, **args)


def _ended(running: Running, outcome: str, error: str | None = None, state: str | None = None) -> None:
    """Note how the attempt ended, for its span (ended in ``_forget``)."""
    if running.ended is None:
        running.ended = (str(outcome), error, None if state is None else str(state))


def _tb(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return "".join(traceback.format_exception(exc))
