"""The claimer: claim rounds, prefetch, and where job ids come from.

Each round asks the executor how much it may take (``Executor.room``), then
claims that many due jobs in one statement, or, with a delivering transport
(NATS), fetches up to that many messages and claims exactly their jobs by id
(``Store.claim_ids``): either way the database decides who owns a job. While
the transport is unreachable it claims from the database every round, and even
while it is up, every ``fallback_interval``. Every claim names the tasks the
worker has handlers for (``WorkerState.tasks``): a job of any other task is
left queued, its budget untouched, for a worker that knows it
(``worker/unknown.py`` says what becomes of jobs that no worker knows).

Successes waiting to be written ride with the next claim (``complete_and_claim``,
or ``complete_and_claim_ids`` for delivered ids: one round trip, one commit)
when the reporter carries. While a fetch waits for messages with none yet
(``FETCH_IDLE``), the claimer counts as idle: the reporter writes successes
itself rather than hold them for a claim that may be a second away.
While handlers are short the claimer pipelines: it sends the next claim before
setting up this one's jobs, so the next statement runs on the database while
these run here; with a delivering transport, the next round (its fetch, then
its claim of the delivered ids) runs as a task meanwhile.

Between rounds it idles until nudged (a slot freed, a NOTIFY, a reaped job, a
stop) or for ``poll_interval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..model import ClaimedJob
from ..transport import Delivery
from .executor import Executor
from .reporter import Reporter, Success, data_error, rows_of
from .state import WorkerState, wait_event

__all__ = ["COALESCE_WAIT", "FETCH_IDLE", "FETCH_WAIT", "STOP_GRACE", "Claimer"]

#: how long the claimer waits for more free slots before claiming just a few
COALESCE_WAIT = 0.005
#: how long one transport fetch waits for a first message
FETCH_WAIT = 1.0
#: a fetch still without messages after this long is waiting for work: the
#: claimer counts as idle (successes are written without waiting to be carried)
FETCH_IDLE = 0.005
#: how long a claim in flight at a stop may take before the worker stops without
#: its answer (the reaper then owns whatever it took); also bounds the releases
STOP_GRACE = 3.0
#: after a failed claim, the wait before the next grows from this, doubling, to CLAIM_RETRY_MAX
CLAIM_RETRY_BASE = 0.2
CLAIM_RETRY_MAX = 5.0

Got = list[tuple[ClaimedJob, Delivery | None]]


@dataclass(eq=False)
class _Claim:
    """A claim sent to the database and not yet answered."""

    fut: asyncio.Future[Any]
    want: int
    #: successes riding with it (complete_and_claim), written once it answers
    carried: list[Success]
    #: monotonic time it was sent: the jobs' local deadlines count from here
    sent_at: float


@dataclass(eq=False)
class _Fetch:
    """A transport round (fetch, then a claim of exactly the delivered ids) sent ahead."""

    task: asyncio.Task[Got | None]
    want: int
    #: monotonic time it began: before its claim was sent, so its jobs' local deadlines err early
    sent_at: float


class Claimer:
    def __init__(self, state: WorkerState, executor: Executor, reporter: Reporter, *,
                 poll_interval: float) -> None:
        if not isinstance(poll_interval, int | float) or not 0 < poll_interval < math.inf:
            raise ConfigError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        self.state = state
        self.executor = executor
        self.reporter = reporter
        self.poll_interval = float(poll_interval)
        #: a claim this small is worth a short wait for more free slots
        self.min_claim = max(1, executor.claim_batch // 4)
        self._transport_ok: bool | None = None
        self._last_db_claim = -math.inf  # the first round claims from the database
        self._nudge: asyncio.Event
        self._idle: asyncio.Event

    def bind(self) -> None:
        self._nudge = self.state.nudge
        self._idle = self.state.claimer_idle

    def on_notify(self, queue: str) -> None:
        """From the LISTEN thread: wake the claimer if the queue is ours."""
        if queue == "*" or queue in self.state.queues:
            self.state.wake_claimer()

    # -- rounds --------------------------------------------------------------------------
    async def serve(self) -> None:
        """Claim rounds until the worker stops."""
        try:
            await self._rounds()
        finally:
            self._idle.set()  # no more claims: the reporter writes every success itself

    async def _rounds(self) -> None:
        s, ex = self.state, self.executor
        failures = 0
        #: sent before the last round's jobs were taken, oldest first: database
        #: claims (up to the store's claims_in_flight), or one transport round
        #: (fetch, then claim those ids) running as a task
        ahead: deque[_Claim | _Fetch] = deque()
        claim: _Claim | None
        fetching: _Fetch | None
        while not s.stopping or ahead:
            self._nudge.clear()  # before the claim: a nudge during it is not lost
            fetching = None
            first = ahead.popleft() if ahead else None
            if isinstance(first, _Fetch):
                fetching, claim, fetched = first, None, True
                want, sent_at = fetching.want, fetching.sent_at
            elif first is not None:
                claim, fetched = first, False
                want, sent_at = claim.want, claim.sent_at
            else:
                ex.unhold_overdue()
                free = ex.room()
                if 0 < free < self.min_claim and ex.busy:
                    # Only a few slots are free and more are about to be: wait a moment
                    # so one claim takes a batch instead of several claims taking one.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(COALESCE_WAIT):  # not wait_for: see state.wait_event
                            await self._batch_gather()
                    free = ex.room()
                if free <= 0:
                    await self.idle()
                    continue
                want = min(free, ex.batch())
                sent_at = time.monotonic()
                fetched = self._via_transport()
                claim = None if fetched else self.send(want)
            try:
                got = await (fetching.task if fetching is not None else
                             self._fetch_and_claim(want) if claim is None else self._claim_any(claim))
                if got is None:
                    continue  # stopping: any claims still ahead are answered in turn, then the loop ends
            except Exception as exc:
                failures += 1
                s.log.warning("claim failed (%s); retrying%s", exc, " (the successes it carried are written apart)"
                              if data_error(exc) else "")
                await asyncio.sleep(min(CLAIM_RETRY_MAX, CLAIM_RETRY_BASE * 2**failures))
                continue
            failures = 0
            full = len(got) == want
            if full and ex.prefetching():
                # Pipeline: send the next claim (carrying the successes waiting)
                # before taking these jobs, so its statement runs on the
                # database while this batch is set up and run here. A transport
                # round likewise: its fetch and then its claim of the delivered
                # ids run while this batch does.
                room = ex.room() - len(got) - sum(a.want for a in ahead)
                # (Not a database claim ahead while the transport is up: the
                # next round is the transport's; this one was the fallback.
                # After a transport round, the next one asks _via_transport as
                # an unpipelined round does, so that a stream of full rounds
                # still makes the database fallback claim every
                # fallback_interval: it takes the jobs no message carries.
                # More than one ahead only of database claims, where the store
                # gains from it: claims_in_flight.)
                sent = False
                while (room >= self.min_claim and (fetched or not self._fetching())
                       and (not ahead or (not fetched and len(ahead) < s.store.claims_in_flight
                                          and isinstance(ahead[-1], _Claim)))):
                    s.counts["claims_ahead"] += 1
                    if ahead:
                        s.counts["claims_ahead_of_another"] += 1
                    by_fetch = fetched and self._via_transport()
                    ahead.append((self._fetch_ahead if by_fetch else self.send)(min(room, ex.ahead())))
                    room -= ahead[-1].want
                    sent = True
                    if by_fetch:
                        break
                if sent:
                    await asyncio.sleep(0)  # let them go out before these jobs are set up
            s.counts["claimed"] += len(got)
            take = ex.take
            for job, delivery in got:
                take(job, sent_at, delivery)
            # A fetch has already waited for work: no idle wait after one. Nor
            # after a database round while the transport is up: the next round
            # fetches from it, and the poll interval is only the fallback's period.
            if not ahead and not ((full or fetched or self._fetching()) and ex.room() > 0):
                await self.idle()

    async def idle(self) -> None:
        """Wait for a reason to claim: a nudge (a slot freed, a NOTIFY, a
        reaped job) or the poll interval; sooner when buffered jobs are due to
        be released, or when a delivering transport that was down is back."""
        now = time.monotonic()
        until = now + self.poll_interval
        expires = self.executor.hold_expires()
        if expires is not None:
            until = min(until, expires)
        transport = self.state.transport
        self._idle.set()  # idle exactly while waiting: every wake-up leads to a claim
        while True:
            wait = max(0.0, until - now)
            if transport.delivers:
                wait = min(wait, FETCH_WAIT)  # look again for the transport's return
            if await wait_event(self._nudge, wait):
                break  # nudged
            now = time.monotonic()
            if now >= until or self._fetching():
                break
        self._idle.clear()

    def _fetching(self) -> bool:
        """Whether the next round may take its jobs from a delivering transport (it is up)."""
        transport = self.state.transport
        return transport.delivers and transport.healthy

    async def _batch_gather(self) -> None:
        ex = self.executor
        while 0 < ex.room() < self.min_claim and ex.busy and not self.state.stopping:
            self._nudge.clear()
            await self._nudge.wait()

    # -- where job ids come from ------------------------------------------------------------
    def _via_transport(self) -> bool:
        """Take this round's jobs from the transport (True) or claim from the
        database (False): always the database without a delivering transport,
        while it is unreachable, and once every ``fallback_interval`` anyway."""
        t = self.state.transport
        if not t.delivers:
            return False
        ok = t.healthy
        if ok != self._transport_ok:
            if ok:  # the first time is the worker's start, not news; a return after an outage is
                level = logging.INFO if self._transport_ok is None else logging.WARNING
                self.state.log.log(level, "transport %s is up: taking job ids from it", t.name)
            else:
                self.state.log.warning("transport %s is unreachable: polling the database every %gs until it is "
                                       "back", t.name, self.poll_interval)
            self._transport_ok = ok
        now = time.monotonic()
        if not ok or now - self._last_db_claim >= t.fallback_interval:
            self._last_db_claim = now
            return False
        return True

    async def _fetch_and_claim(self, want: int) -> Got | None:
        """Up to ``want`` messages, then one fenced claim of exactly their jobs.
        A message whose job the claim refuses (held, finished, not due, a
        repeat) is acked at once: the database has already said no."""
        s = self.state
        transport = s.transport
        assert s.loop is not None
        # What the transport holds already needs no wait, and so no idle timer
        deliveries = transport.fetch_buffered(want, s.queues)
        if not deliveries:
            waiting = s.loop.call_later(FETCH_IDLE, self._fetch_idle)
            try:
                deliveries = await transport.fetch(want, FETCH_WAIT, s.queues)
            finally:
                waiting.cancel()
                if s.fetch_waiting:
                    s.fetch_waiting = False
                    self._idle.clear()
            if not deliveries:
                return []
        first: dict[int, Delivery] = {}
        for d in deliveries:
            if d.job_id in first:
                transport.ack(d)  # the same job twice in one batch
                s.counts["deliveries_refused"] += 1
            else:
                first[d.job_id] = d
        try:
            jobs = None if s.stopping else await self._receive(self.send(want, ids=list(first)))
        except Exception:
            for d in first.values():
                transport.nak(d)
            raise
        if jobs is None:  # stopping: anything claimed was released again
            for d in first.values():
                transport.nak(d)
            return None
        claimed = {j.id for j in jobs}
        for job_id, d in first.items():
            if job_id not in claimed:
                transport.ack(d)
                s.counts["deliveries_refused"] += 1
        s.counts["deliveries_claimed"] += len(jobs)
        return [(j, first[j.id]) for j in jobs]

    def _fetch_ahead(self, want: int) -> _Fetch:
        assert self.state.loop is not None
        return _Fetch(self.state.loop.create_task(self._fetch_and_claim(want)), want, time.monotonic())

    def _fetch_idle(self) -> None:
        """The fetch has waited FETCH_IDLE without a message: idle until it returns."""
        self.state.fetch_waiting = True
        self._idle.set()

    async def _claim_any(self, claim: _Claim) -> Got | None:
        jobs = await self._receive(claim)
        # Counted once answered: a claim still on its way may yet take a job
        # enqueued after the count moved (a caller on the worker's own loop,
        # an ASGI app's request handler, enqueues before the statement goes out)
        self.state.counts["db_claims"] += 1
        return None if jobs is None else [(j, None) for j in jobs]

    # -- one claim ------------------------------------------------------------------------
    def send(self, want: int, *, ids: list[int] | None = None) -> _Claim:
        """Send one claim (of any due jobs, or of exactly ``ids``). Successes
        waiting to be written ride with it: one round trip, one commit. The statement goes out when the loop next runs its tasks:
        a caller with other work to do first yields once (``asyncio.sleep(0)``)."""
        s, reporter = self.state, self.reporter
        carried: list[Success] = []
        store, pool, ttl = s.store, s.db_pool, s.timers.lease_ttl
        call: Coroutine[Any, Any, Any]
        if reporter.successes and reporter.carry:
            carried, reporter.successes = reporter.successes, []
            call = store.complete_and_claim_async(
                s.id, rows_of(carried), s.queues, want, ttl, executor=pool, tasks=s.tasks,
            ) if ids is None else store.complete_and_claim_ids_async(
                s.id, rows_of(carried), ids, s.queues, ttl, executor=pool, tasks=s.tasks)
        elif ids is not None:
            call = store.claim_ids_async(s.id, ids, s.queues, ttl, executor=pool, tasks=s.tasks)
        else:
            call = store.claim_async(s.id, s.queues, want, ttl, executor=pool, tasks=s.tasks)
        assert s.loop is not None
        return _Claim(s.loop.create_task(call), want, carried, time.monotonic())

    async def _receive(self, claim: _Claim) -> list[ClaimedJob] | None:
        """A sent claim's jobs, raced against stop(): a worker asked to stop
        while its claim hangs on an unreachable database must still stop. Jobs
        a late claim returns are released at once (fenced, budget untouched)."""
        s = self.state
        fut, carried, sent_at = claim.fut, claim.carried, claim.sent_at
        try:
            done, _ = await asyncio.wait({fut, s.stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
            if fut in done:
                return self._claimed(fut.result(), carried, sent_at)
            try:
                jobs = self._claimed(await asyncio.wait_for(fut, STOP_GRACE), carried, sent_at)
            except Exception as exc:  # includes the timeout: the reaper owns whatever it took
                s.log.warning("stopping with a claim still in flight (%s)", str(exc) or type(exc).__name__)
                if carried:
                    self.reporter.complete_later(carried)
                return None
        except BaseException:
            if carried:
                # Their fate is unknown (the statement may have committed): write
                # them again; a refusal is then checked against the audit.
                self.reporter.complete_later(carried)
            raise
        for job in jobs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.db(s.store.release, s.id, job.id, job.attempt), STOP_GRACE)
        return None

    def _claimed(self, answer: Any, carried: list[Success], sent_at: float) -> list[ClaimedJob]:
        """A claim's jobs; when it carried successes, tell their handlers' story first."""
        if not carried:
            return list(answer)
        accepted, jobs = answer
        self.state.counts["successes_carried"] += len(carried)
        self.reporter.completed(carried, accepted, sent_at)
        carried.clear()  # written: an exception from here on must not write them again
        return list(jobs)
