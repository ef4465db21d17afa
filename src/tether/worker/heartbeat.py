"""The heartbeater: one statement per worker per tick renews every lease it holds.

It runs on its own thread with its own connection, so a handler that blocks the
event loop (``time.sleep`` in ``async def``) or spins the CPU cannot starve it.
It is also where the worker fences itself: a lease that could not be renewed
before its local deadline is treated as lost and its handler is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ..config import MIN_BEATS_PER_TTL
from ..context import CancelReason
from ..errors import StaleAttempt
from ..events import Event, Events
from ..logs import job_fields
from ..model import Beat, ClaimedJob
from ..payload import describe, storable_text
from ..store import Store
from . import failpoints
from .history import HistoryRecorder
from .inflight import InFlight, Running
from .state import WorkerState

__all__ = ["Heartbeater", "report_progress"]

log = logging.getLogger("tether.heartbeat")

#: after a failed beat, try again this soon rather than a whole interval later
RETRY_AFTER_FAILURE = 1.0
#: the fence thread re-reads the deadlines at least this often
FENCE_IDLE_CHECK = 0.25
#: the beat thread re-reads the held jobs' leases at least this often: a job
#: claimed while it sleeps may hold a lease that needs a beat sooner
LEASE_CHECK = 0.25
#: the shortest time between two beats, however short a lease
MIN_PERIOD = 0.05


class Heartbeater:
    def __init__(
        self,
        store: Store,
        worker_id: str,
        inflight: InFlight,
        *,
        interval: float,
        lease_ttl: float,
        on_lost: Callable[[Running, str], None],
        on_cancel_requested: Callable[[Running], None],
        history: HistoryRecorder | None = None,
        events: Events | None = None,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.inflight = inflight
        self.interval = interval
        self.lease_ttl = lease_ttl
        self.on_lost = on_lost
        self.on_cancel_requested = on_cancel_requested
        self.history = history
        self.events = events
        self.beats = 0
        self.failures = 0
        self.consecutive_failures = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def run_once(self) -> dict[int, Beat]:
        """One tick: renew every held lease in one statement and act on what came
        back (lost: cancel the handler; cancel requested: tell it)."""
        held = self.inflight.held()
        if failpoints.ARMED:
            failpoints.hit("during_heartbeat")
        sent_at = time.monotonic()
        try:
            beats = self.store.heartbeat(self.worker_id, held, self.lease_ttl)
        except Exception as exc:
            self.failures += 1
            self.consecutive_failures += 1
            log.warning("heartbeat failed (%s held): %s", len(held), exc, extra={"worker": self.worker_id})
            if self.events is not None and self.events.active:
                self.events.emit(Event("worker.heartbeat_error", worker=self.worker_id, error=str(exc)))
            beats = {}
        else:
            self.beats += 1
            self.consecutive_failures = 0
            if self.history is not None:
                for (job_id, attempt) in held:
                    self.history.record("hb", job=job_id, attempt=attempt, beat=str(beats.get(job_id, Beat.LOST)),
                                        sent=sent_at)
            for (job_id, attempt), beat in ((h, beats.get(h[0], Beat.LOST)) for h in held):
                running = self.inflight.get(job_id)
                if running is None or running.job.attempt != attempt:
                    continue  # finished meanwhile
                if beat is Beat.LOST:
                    # The database refuses to renew at or past the attempt's
                    # deadline, and our hard deadline is never later than its:
                    # past it, the timeout is why (and the reaper records it so)
                    if not self._time_out(running, past=running.hard_deadline):
                        self.on_lost(running, "heartbeat fence failed: the job was recovered or re-claimed")
                    continue
                self.inflight.renewed(job_id, attempt, sent_at)
                if beat is Beat.CANCEL_REQUESTED:
                    self.on_cancel_requested(running)
        return beats

    def period(self) -> float:
        """Seconds between beats: the worker's interval, or less while it holds
        a job whose own lease is shorter than MIN_BEATS_PER_TTL intervals.

        A per-task or per-job ``lease_ttl`` is checked against the timers of
        the app that registered or enqueued it (``Timers.check_job_ttl``), not
        against this worker's: a job enqueued with ``lease_ttl=20`` (two of the
        producer's 10 s beats) and claimed by a worker beating every 25 s lost
        its lease before the first beat, and was reaped and claimed again while
        its first attempt still ran. The claim grants the job's own lease and
        every beat renews it, so the beat comes sooner instead: at least
        MIN_BEATS_PER_TTL per held lease, as config.Timers asks of the worker's
        own. Still one statement per tick, for every held job."""
        shortest = min((r.job.lease_ttl for r in self.inflight.all() if not r.lost), default=None)
        if shortest is None or shortest >= self.interval * MIN_BEATS_PER_TTL:
            return self.interval
        return max(MIN_PERIOD, shortest / MIN_BEATS_PER_TTL)

    def fence_overdue(self) -> list[Running]:
        overdue = self.inflight.overdue(time.monotonic())
        for running in overdue:
            # (renewals stop at the timeout, InFlight.renewed: a local deadline
            # that reached it is the timeout's, not a lease that lapsed)
            hard = running.hard_deadline
            if not self._time_out(running, past=hard if hard is not None and running.local_deadline >= hard else None):
                self.on_lost(running, "lease could not be renewed before it lapsed")
        return overdue

    @staticmethod
    def _time_out(running: Running, *, past: float | None) -> bool:
        """At or past ``past``, the attempt's timeout (monotonic): the attempt
        timed out. Tell its handler, as the loop's own timer does at the same
        moment (executor._timed_out), and its outcome is written timed_out,
        fenced (refused, harmlessly, should the reaper have ended it first).
        The fence and a beat refused past the deadline both raced that timer;
        judged lost when they won, nothing was reported, the job stayed
        running until the reaper, and drain() returned it running."""
        if past is None or time.monotonic() < past:
            return False
        running.timing_out = True
        running.ctx.cancel(CancelReason.TIMED_OUT)
        return True

    # -- the threads ----------------------------------------------------------------
    # Two threads: the beat thread does the I/O; the fence thread does none, so
    # a heartbeat stuck on a half-open connection (packets silently dropped)
    # cannot stop the worker from fencing itself when a lease lapses.
    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._beat_loop, name="tether-heartbeat", daemon=True),
            threading.Thread(target=self._fence_loop, name="tether-fence", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            # The beat thread may be stuck in a call to an unreachable database;
            # it is a daemon and holds nothing, so we do not wait long for it.
            t.join(timeout=1)

    def _beat_loop(self) -> None:
        # Due ``period()`` after the last beat was sent, re-read every
        # LEASE_CHECK while waiting: a claim meanwhile may bring it forward
        # (a lease claimed after the last beat then gets its first renewal
        # within half of it, as the beat before the claim counts from earlier).
        last = time.monotonic()
        while not self._stop.is_set():
            period = self.period()
            if self.consecutive_failures:
                period = min(period, RETRY_AFTER_FAILURE)
            wait = last + period - time.monotonic()
            if wait > 0:
                self._stop.wait(min(wait, LEASE_CHECK))
                continue
            last = time.monotonic()
            self.run_once()

    def _fence_loop(self) -> None:
        while not self._stop.is_set():
            self.fence_overdue()
            deadlines = [r.local_deadline for r in self.inflight.all()
                         if not r.lost and not r.reporting and not r.timing_out]
            wake = min(deadlines, default=time.monotonic() + FENCE_IDLE_CHECK)
            # Claims may add earlier deadlines while we sleep: never sleep long.
            self._stop.wait(max(0.01, min(wake - time.monotonic(), FENCE_IDLE_CHECK)))


def report_progress(state: WorkerState, job: ClaimedJob, fraction: float | None, message: str | None) -> bool:
    """``ctx.progress()``: record it and renew the job's lease, as a heartbeat
    does; True when a cancel was requested. A report the store refuses for
    ownership (``StaleAttempt``) goes to the handler. One the store cannot
    take (an outage: the database, or a tether server, unreachable or
    restarting) is a missed heartbeat, not the handler's failure: the
    heartbeat keeps trying, and should the lease's local deadline pass first,
    the handler is cancelled as lost, as it would be without the report. (It
    used to raise into the handler, so a 2 s server restart failed every job
    that reported progress, an attempt spent each time.)"""
    sent_at = time.monotonic()
    text = storable_text(message)  # the handler's text: NUL and lone surrogates escaped, never refused
    try:
        store = state.store
        if isinstance(store, NoWaitProgress) and _on_a_loop():  # (SQLite, from an async def handler)
            got = store.progress_nowait(state.id, job.id, job.attempt, fraction, text, state.timers.lease_ttl)
            if got is None:  # another connection writes now: a missed beat, not worth a wait on the loop
                log.debug("job %s attempt %s: progress not recorded (the write lock is busy)", job.id, job.attempt)
                return False
            cancel = got
        else:
            cancel = store.progress(state.id, job.id, job.attempt, fraction, text, state.timers.lease_ttl)
    except StaleAttempt:
        raise
    except Exception as exc:
        state.log.warning("job %s attempt %s: progress not recorded (%s); its lease is renewed by the heartbeat "
                          "once the store answers", job.id, job.attempt, describe(exc), extra=job_fields(job, state.id))
        return False
    state.inflight.renewed(job.id, job.attempt, sent_at)
    if state.history is not None:  # a progress report renews the lease as a heartbeat does
        state.history.record("hb", job=job.id, attempt=job.attempt, beat="renewed", sent=sent_at, via="progress")
    return cancel


@runtime_checkable
class NoWaitProgress(Protocol):
    """A store whose progress write may wait for a lock its own event loop
    must free (SQLite: ``store/sqlite/rounds.py``); from a loop it writes
    only if it need not wait (None: it would have)."""

    def progress_nowait(self, worker: str, job_id: int, attempt: int, fraction: float | None,
                        message: str | None, lease_ttl: float) -> bool | None: ...


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
