"""The executor: handler slots, and everything about running one attempt.

It takes the jobs a claim returned (``take``): each gets its local deadlines
(counted from the claim's send time), its in-flight entry (which the heartbeat
renews) and its span, then a free slot or a place in the prefetch buffer.
``async def`` handlers run as tasks on the loop (eager on Python 3.12+), ``def``
handlers on the ``tether-handler-*`` threads. When a handler ends, its slot is
freed, the claimer woken, and the outcome handed to the reporter: successes to
its batch, anything else as a fenced failure, cancellation or release.

Cancellation has four reasons (``CancelReason``): requested (through the
heartbeat), timed out (the attempt's ``timeout``), lost (the heartbeat's fence
failed, or the worker fenced itself), and shutdown. A coroutine is cancelled at
its next await; a thread cannot be interrupted, so a ``def`` handler reads
``ctx.cancelled`` on a request, and for the other reasons we stop waiting for it.

The executor also decides how much a claim may take (``room``): free slots,
plus a prefetch batch while handlers are short (``prefetching``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from functools import partial
from typing import Any

from ..context import CancelReason, JobCancelled, JobContext
from ..errors import ConfigError, PayloadError, StaleAttempt
from ..events import Event
from ..logs import job_fields
from ..model import ClaimedJob, JobState, Outcome
from ..payload import dump_json, traceback_text
from ..transport import Delivery
from . import failpoints
from .appview import TaskView
from .calls import Runners
from .calls import call_sync as _call_sync
from .calls import start_task as _start
from .heartbeat import report_progress
from .inflight import Running
from .isolation import REAP_WAIT
from .policy import on_error
from .pool import HandlerThreads, ThreadCall
from .reporter import Reporter, ended
from .state import WorkerState
from .transactions import (
    committing_thread,
    open_transaction,
    refuse_progress_in_block,
    result_after_commit,
    settle_unsaid,
)

__all__ = [
    "LEASES_PER_SLOT",
    "MAX_CLAIM_BATCH",
    "PREFETCH_ALPHA",
    "PREFETCH_BELOW",
    "PREFETCH_HOLD_MAX",
    "Executor",
]

#: the most jobs one claim may take, whatever the concurrency
MAX_CLAIM_BATCH = 200
#: leases a worker may hold per slot and per job claimed ahead (the surplus: finished
#: jobs whose reports are in flight, riding on claims, so claiming overlaps reporting)
LEASES_PER_SLOT = 2
#: prefetch: while handlers finish within this (a running average, seconds),
#: the claimer claims one batch ahead of its free slots, so that the next
#: claim's statement runs while this batch's handlers do
PREFETCH_BELOW = 0.025
#: a prefetched job waits at most this long for a slot; then the buffer is
#: released (fenced, budget untouched) and prefetching pauses
PREFETCH_HOLD_MAX = 0.5
#: weight of the newest handler duration in that running average
PREFETCH_ALPHA = 0.2
#: while prefetching, a claim ahead takes the store's ``prefetch_factor`` claim
#: batches (8 on PostgreSQL and through a server; at most MAX_CLAIM_BATCH), but no
#: more than the handlers' running average empties in about this (2 at least)
PREFETCH_DRAIN = 0.05


class Executor:
    def __init__(self, state: WorkerState, reporter: Reporter, tasks: Mapping[str, TaskView], *, concurrency: int,
                 claim_batch: int | None, prefetch: bool, max_payload_bytes: int, runners: Runners) -> None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if claim_batch is not None and (not isinstance(claim_batch, int) or claim_batch < 1):
            raise ConfigError(f"claim_batch must be an int >= 1 (or None: the concurrency), got {claim_batch!r}")
        self.state = state
        self.reporter = reporter
        self.tasks = tasks
        self.concurrency = concurrency
        self.max_payload_bytes = max_payload_bytes
        #: what each task's handler call is: middleware, process isolation (calls.py)
        self.runners = runners
        #: how many jobs one claim takes when not prefetching
        self.claim_batch = min(claim_batch or concurrency, MAX_CLAIM_BATCH)
        #: the most a claim ahead takes (the store's prefetch_factor batches)
        self.ahead_batch = min(state.store.prefetch_factor * self.claim_batch, MAX_CLAIM_BATCH)
        #: prefetch only where the store gains from it (not SQLite); with a
        #: delivering transport too, where the next round (a fetch, then a claim
        #: of the delivered ids) runs while this one's jobs do
        self.prefetch = prefetch and state.store.claims_ahead
        self.busy = 0  # handlers running now; the concurrency limit applies to these
        #: claimed jobs waiting for a handler slot (prefetch), oldest first
        self.ready: deque[Running] = deque()
        self.avg_run = math.inf  # running average of handler durations, seconds
        #: the threads of ``def`` handlers (started as needed)
        self.handlers = HandlerThreads()
        # Bound once: each job's context and handler would otherwise bind them anew.
        self._progress_fn = self.progress
        self._on_ctx_cancel_fn = self.on_ctx_cancel
        self._finished_fn = self._finished
        self._transaction_fn = partial(open_transaction, state)
        self._load_job_fn = state.store.get_job
        self._nudge: asyncio.Event

    def bind(self) -> None:
        self._nudge = self.state.nudge
        self.runners.refresh()  # the tasks registered by now
        assert self.state.loop is not None
        self.handlers.bind(self.state.loop, self._thread_done, self._straggler_returned)

    # -- how much to claim ----------------------------------------------------------------
    def room(self) -> int:
        """How many jobs the next claim may take: free slots, plus the claims
        ahead while prefetching, less the buffer; leases held (running, buffered,
        reports in flight) stay under LEASES_PER_SLOT times both."""
        ahead = self.ahead() * self.state.store.claims_in_flight if self.prefetching() else 0
        return min(self.concurrency + ahead - self.busy - len(self.ready),
                   LEASES_PER_SLOT * (self.concurrency + ahead) - len(self.state.inflight))

    def batch(self) -> int:
        """How many jobs one claim may take: more while prefetching."""
        return self.ahead() if self.prefetching() else self.claim_batch

    def ahead(self) -> int:
        """How many jobs a claim ahead may take (PREFETCH_DRAIN; each claim in flight buffers one)."""
        drain = int(PREFETCH_DRAIN / max(self.avg_run * self.state.store.claims_in_flight, 1e-6))
        return min(min(self.state.store.prefetch_factor, max(2, drain)) * self.claim_batch, self.ahead_batch)

    def prefetching(self) -> bool:
        """Claim ahead only while handlers are short: a prefetched job's lease and
        timeout start at its claim, and no other worker can take it meanwhile."""
        return self.prefetch and self.avg_run < PREFETCH_BELOW and not self.state.stopping

    # -- taking jobs on -------------------------------------------------------------------
    def take(self, job: ClaimedJob, sent_at: float, delivery: Delivery | None = None) -> None:
        """A job the claim returned: run it if a slot is free, else buffer it."""
        running = self._hold(job, sent_at, delivery)
        if running is None:
            return
        if self.busy < self.concurrency and not self.ready:
            self._run(running)
        else:
            self.state.counts["prefetched"] += 1
            self.ready.append(running)
            if self.state.history is not None:
                self.state.history.record("buffered", job=job.id, attempt=job.attempt)

    def _hold(self, job: ClaimedJob, sent_at: float, delivery: Delivery | None) -> Running | None:
        """Take on a claimed job: its local deadlines (from the claim), the
        in-flight entry the heartbeat renews, its span. None when no handler is
        registered for its task (its failure is being reported)."""
        s = self.state
        ctx = JobContext(job, s.id, self._progress_fn, self._on_ctx_cancel_fn, self._transaction_fn,
                         self._load_job_fn)
        ctx._links = s.store
        local = sent_at + job.lease_ttl
        hard = None
        if job.timeout:
            hard = sent_at + job.timeout
            local = min(local, hard)
        running = Running(job, ctx, local, sent_at, hard, delivery=delivery)
        earlier = s.inflight.get(job.id)
        if earlier is not None and earlier.job.attempt < job.attempt:
            # Our own older attempt's lease lapsed and was reaped, and we claimed
            # the job again before a heartbeat could tell us: it has lost the job.
            self.lost(earlier, f"its lease lapsed and this worker claimed the job again as attempt {job.attempt}")
        s.inflight.add(running)
        if s.history is not None:
            s.history.record("claimed", job=job.id, attempt=job.attempt, sent=sent_at, db=job.claimed_at)
        if failpoints.ARMED:
            failpoints.hit("after_claim")
        tracing = s.tracing
        if tracing is not None:
            running.span = tracing.start_attempt(job, s.id)
        if job.task not in self.tasks:
            # A safety net: claims name this worker's tasks, so only a job
            # claimed without them gets here (a handler unregistered after
            # start-up, a store that ignored the list). Hand it back, its
            # budget untouched, for a worker that knows it: failing it would
            # spend the budget of a good job on a worker's ignorance. And stop
            # naming the task in claims, or this worker would take it again
            # at once, round after round.
            s.counts["released_unknown_task"] += 1
            s.tasks = [t for t in s.tasks if t in self.tasks]
            s.log.warning("job %s: no handler for task %r in this worker (known: %s); released for a worker "
                          "that has one", job.id, job.task, ", ".join(sorted(self.tasks)) or "none",
                          extra={"job_id": job.id, "task": job.task})
            self.reporter.release(running)
            return None
        return running

    def start_ready(self) -> None:
        """Start buffered jobs in the free handler slots, oldest first."""
        while self.ready and self.busy < self.concurrency and not self.state.stop_now:
            running = self.ready.popleft()
            reason = running.ctx.cancel_reason
            if running.lost or reason is not None:
                self._settle_unstarted(running, reason)
            else:
                self._run(running)

    def unhold_overdue(self) -> None:
        """Release the buffer once its oldest job has waited PREFETCH_HOLD_MAX
        for a slot (long handlers came after short ones); prefetching pauses
        until handlers are short again."""
        if self.ready and self.ready[0].started + PREFETCH_HOLD_MAX <= time.monotonic():
            self.avg_run = max(self.avg_run, PREFETCH_HOLD_MAX)
            self.state.log.info("releasing %d prefetched job(s): no handler slot freed within %gs",
                                len(self.ready), PREFETCH_HOLD_MAX)
            self.unhold()

    def hold_expires(self) -> float | None:
        """Monotonic time the buffer's oldest job is due to be released, if any."""
        return self.ready[0].started + PREFETCH_HOLD_MAX if self.ready else None

    def unhold(self) -> None:
        """Hand every buffered job back (fenced release, budget untouched)."""
        while self.ready:
            running = self.ready.popleft()
            self.state.counts["prefetch_released"] += 1
            if self.state.history is not None:
                self.state.history.record("handed_back", job=running.job.id, attempt=running.job.attempt)
            self._settle_unstarted(running, running.ctx.cancel_reason)

    def _settle_unstarted(self, running: Running, reason: str | None) -> None:
        """A buffered job that will not run here: lost while it waited (the
        heartbeat said so), cancelled on request, or handed back."""
        running.reporting = True
        if running.lost or reason == CancelReason.LOST:
            self.reporter.forget(running)
        elif reason == CancelReason.REQUESTED:
            self.reporter.fail(running, Outcome.CANCELLED, "cancelled on request", None, False)
        else:
            self.reporter.release(running)

    # -- running handlers -----------------------------------------------------------------
    def _run(self, running: Running) -> None:
        """Start the handler in a free slot."""
        s = self.state
        loop = s.loop
        assert loop is not None
        job, ctx = running.job, running.ctx
        task = self.tasks[job.task]
        if self.runners.plain:  # no middleware, no process isolation: the handler itself, nothing to look up
            run = task.run
        else:
            run, running.isolated = self.runners.get(job.task, task)
        running.started = time.monotonic()
        if s.events.active:
            wait = (job.claimed_at - job.run_at).total_seconds() if job.run_at is not None else None
            s.events.emit(Event("job.started", job_id=job.id, attempt=job.attempt, task=job.task, queue=job.queue,
                                worker=s.id, state=JobState.RUNNING, queue_wait=wait))
        tracing = s.tracing
        self.busy += 1  # before the start: an eager task (3.12+) may end within it
        if task.is_async:
            # The task runs _drive around the handler's coroutine, which reports
            # the outcome as its last step: no done callback, and so no second
            # trip through the loop, per job. Calling the handler only binds the
            # arguments; a binding error (args that do not fit) fails the
            # attempt as a raise inside would.
            fut: asyncio.Future[Any]
            try:
                coro = (run(ctx, **job.args) if tracing is None else  # the span is current while it runs
                        tracing.call_async(running.span, run, ctx, job.args))
            except Exception as exc:
                fut = loop.create_future()
                fut.set_exception(exc)
                fut.add_done_callback(partial(self._finished_fn, running))
            else:
                fut = _start(loop, self._drive(running, coro))
            running.handler = fut
        else:
            # A def handler's call goes to the handler threads; its outcome
            # comes back in a batch with the others that finished meanwhile
            # (_thread_done), on a later turn of this loop.
            call = (ThreadCall(self.handlers, running, _call_sync, (run, ctx, job.args)) if tracing is None else
                    ThreadCall(self.handlers, running, tracing.call_sync, (running.span, run, ctx, job.args)))
            running.handler = call
            self.handlers.submit(call)
        hard = running.hard_deadline  # from the claim: a prefetched job's wait counts against it
        if hard is not None:
            loop.call_at(loop.time() + (hard - time.monotonic()), self._timed_out, running)

    async def _drive(self, running: Running, coro: Coroutine[Any, Any, Any]) -> None:
        """An async handler's task: the handler, then its outcome, in the same
        step. A cancellation goes on up once reported, so the task ends
        cancelled as the handler did; anything else it raises, SystemExit and
        KeyboardInterrupt included, is the attempt's outcome, as from a def
        handler: raised on, it would stop the loop before the outcome is
        written, and every worker that claimed the job again would stop too."""
        try:
            result = await coro
        except asyncio.CancelledError as exc:
            self._handler_ended(running, None, exc)
            raise
        except BaseException as exc:
            self._handler_ended(running, None, exc)
            return
        self._handler_ended(running, result, None)

    def _finished(self, running: Running, fut: asyncio.Future[Any]) -> None:
        """An ``async def`` handler's call that failed to bind its args."""
        if fut.cancelled():
            self._handler_ended(running, None, asyncio.CancelledError())
        else:
            exc = fut.exception()
            self._handler_ended(running, None if exc is not None else fut.result(), exc)

    def _thread_done(self, call: ThreadCall) -> None:
        """A ``def`` handler's call ended (or the worker stopped waiting for it)."""
        if call.cancelled():
            # Its thread may still be running the handler: the attempt's outcome
            # goes now, its slot only once the thread returns (_straggler_returned).
            self._handler_ended(call.owner, None, asyncio.CancelledError(), keep_slot=call.straggler)
        else:
            self._handler_ended(call.owner, call.result, call.exc)

    def _straggler_returned(self, call: ThreadCall) -> None:
        """A cancelled ``def`` handler's thread has returned: free the slot it
        kept (if _thread_done has not yet run, it frees the slot itself)."""
        running: Running = call.owner
        if running.slot_kept:
            running.slot_kept = False
            self.busy -= 1
            took = time.monotonic() - running.started
            self.state.log.log(logging.INFO if running.isolated else logging.WARNING,
                               "job %d attempt %d: its %s %.1fs after it started, past the end of its attempt; its "
                               "slot is free again", running.job.id, running.job.attempt, "handler's process was "
                               "killed and reaped" if running.isolated else "def handler returned", took)
            if self.ready:
                self.start_ready()
            self._nudge.set()

    def _handler_ended(self, running: Running, result: Any, exc: BaseException | None, *,
                       keep_slot: bool = False) -> None:
        """The handler returned ``result`` or raised ``exc``: free its slot and
        hand the outcome to the reporter. ``keep_slot``: a def handler whose
        attempt ended while its thread runs on (a thread cannot be stopped):
        concurrency counts that thread until it returns."""
        job, ctx, reporter = running.job, running.ctx, self.reporter
        running.reporting = True
        if keep_slot:
            running.slot_kept = True
        if keep_slot and not running.isolated:  # (a child was killed: its slot frees once it is reaped)
            self.state.log.warning("job %d attempt %d ended, but its def handler is still running (a thread cannot "
                                   "be interrupted): its slot stays taken until it returns", job.id, job.attempt)
        else:
            self.busy -= 1
        took = time.monotonic() - running.started
        self.avg_run = took if self.avg_run == math.inf else self.avg_run + PREFETCH_ALPHA * (took - self.avg_run)
        if self.ready:
            self.start_ready()
        self._nudge.set()  # a handler slot is free: claim while this report is written
        if self.state.history is not None:
            self.state.history.record("handler_end", job=job.id, attempt=job.attempt, ok=exc is None)
        if running.joined_written is not None:  # ctx.transaction_on() without tx.committed()
            settle_unsaid(self.state, running)
        if running.settled is not None:  # ctx.transaction() committed its success: only the result is left
            reporter.settled(running, result_after_commit(self.state, running, result, exc, self.max_payload_bytes))
            return
        if running.lost:
            reporter.forget(running)
            return
        if isinstance(exc, (asyncio.CancelledError, JobCancelled)) or (exc is not None and ctx.cancelled):
            reason = ctx.cancel_reason
            if reason == CancelReason.REQUESTED:
                reporter.fail(running, Outcome.CANCELLED, "cancelled on request", None, False)
            elif reason == CancelReason.TIMED_OUT:
                reporter.fail(running, Outcome.TIMED_OUT, f"attempt timed out after {job.timeout:g}s", None, True)
            elif reason == CancelReason.SHUTDOWN:
                reporter.release(running)
            elif reason == CancelReason.LOST:
                reporter.forget(running)
            else:
                reporter.fail(running, Outcome.FAILED, "handler was cancelled", traceback_text(exc), True)
            return
        if isinstance(exc, StaleAttempt):
            self.lost(running, str(exc))
            reporter.forget(running)
            return
        if exc is not None:  # Retry, Discard, retry_on and retry_backoff: policy.py
            task = self.tasks.get(job.task)
            if type(exc) is TypeError and task is not None:  # args a deploy's new signature does not take?
                exc = task.misfit(job.args, exc)
            running.exception = exc
            reporter.fail(running, *on_error(task.options if task is not None else None, job, exc))
            return
        try:
            result_json = None if result is None else dump_json(result, f"result of task {job.task!r}",
                                                               self.max_payload_bytes)
        except PayloadError as perr:
            # Retrying cannot make a result JSON: the job ends dead with the reason.
            reporter.fail(running, Outcome.FAILED, str(perr), None, False)
            return
        reporter.successes.append((running, result_json))
        if not self.state.stopping and self.room() > 0 and not self.state.fetch_waiting:
            self.state.claimer_idle.clear()  # the nudge above wakes the claimer, which will carry this success
        reporter.wake.set()

    # -- progress, timeouts, cancellation ----------------------------------------------------
    def progress(self, job: ClaimedJob, fraction: float | None, message: str | None) -> bool:
        """A handler's progress report (its thread or the loop): a heartbeat for its job."""
        running = self.state.inflight.get(job.id)
        if running is not None and running.settled is not None:
            return False  # its ctx.transaction() committed the success: no lease left to renew, nothing to say
        if self.state.store.backend == "sqlite":
            refuse_progress_in_block(self.state, job.id)
        return report_progress(self.state, job, fraction, message)

    def _timed_out(self, running: Running) -> None:
        if running.handler is not None and not running.handler.done():
            running.ctx.cancel(CancelReason.TIMED_OUT)

    def on_ctx_cancel(self, ctx: JobContext) -> None:
        """Any thread: the ctx's cancel signal was set; interrupt the handler on the loop."""
        running = self.state.inflight.get(ctx.job_id)
        loop = self.state.loop
        if running is not None and loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._interrupt, running)

    def _interrupt(self, running: Running) -> None:
        fut = running.handler
        if fut is None or fut.done():
            return
        if running.isolated:  # killed; its call returns once the child is reaped, then the outcome (REAP_WAIT at most)
            self.runners.kill(running.ctx, now=running.lost or running.ctx.cancel_reason != CancelReason.REQUESTED)
            asyncio.get_running_loop().call_later(REAP_WAIT, fut.cancel)
            return
        # A coroutine is cancelled at its next await. A thread cannot be
        # interrupted: on a cancel request it reads ctx.cancelled and decides; when
        # the attempt is lost, timed out or shut down we stop waiting for it.
        if ((isinstance(fut, asyncio.Task) or running.lost or running.ctx.cancel_reason != CancelReason.REQUESTED)
                and not committing_thread(running)):
            fut.cancel()

    def lost(self, running: Running, why: str) -> None:
        """Any thread: this attempt no longer owns its job."""
        if running.lost:
            return
        s = self.state
        running.lost = True
        s.counts["lost"] += 1
        if running.span is not None:
            ended(running, "lost", why)
        if s.history is not None:
            s.history.record("lost", job=running.job.id, attempt=running.job.attempt, why=why)
        s.log.warning("job %s attempt %s lost: %s; cancelling its handler", running.job.id, running.job.attempt, why,
                      extra=job_fields(running.job, s.id))
        if s.events.active:
            s.emit("job.lost", running, time.monotonic() - running.started, error=why)
        if not running.ctx.cancel(CancelReason.LOST):
            self.on_ctx_cancel(running.ctx)  # already cancelled for another reason: interrupt anyway
        if running.isolated:  # at once, here (after the signal: isolation.ChildPool._start): this worker
            self.runners.kill(running.ctx, now=True)  # may be about to run the job's next attempt

    def beat_lost(self, running: Running, why: str) -> None:
        """Heartbeat thread. Once the handler has finished, its report decides:
        the write that ended the lease may be that report's own."""
        if not running.reporting:
            self.lost(running, why)

    def cancel_requested(self, running: Running) -> None:
        """Heartbeat thread: the job's cancel was requested; tell its handler."""
        if running.ctx.cancel(CancelReason.REQUESTED):
            self.state.log.info("job %s: cancel requested; telling its handler", running.job.id,
                                extra=job_fields(running.job, self.state.id))

    def cancel_running(self) -> list[Running]:
        """Shutdown: cancel every handler still running; returns them."""
        leftovers = [r for r in self.state.inflight.all() if r.handler is not None and not r.handler.done()]
        for running in leftovers:
            # A pending cancel request keeps its reason (the job ends cancelled);
            # otherwise the job is released without spending its budget.
            running.ctx.cancel(CancelReason.SHUTDOWN)
            if running.isolated:  # as _interrupt: released once the child is reaped
                self._interrupt(running)
            elif running.handler is not None and not committing_thread(running):
                running.handler.cancel()
        return leftovers
