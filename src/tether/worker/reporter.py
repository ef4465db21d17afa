"""The reporter: writes each attempt's outcome, fenced, and lets the attempt go.

Successes are batched: every success that finished since the last write goes
in one statement (``Store.complete``), or rides with the claimer's next claim
(``complete_and_claim``: one round trip, one commit) when claims are small
enough to carry them (``carry``). A batch refused for the data in it (not
for want of the database) is written one success at a time, so that only the
job whose result was refused fails (``_refused``). Failures, cancellations
and releases are written one by one (``_report_one``), retried while the
attempt's local lease deadline allows; the handler's text in them (error,
traceback) is made storable first (``payload.storable_text``). A write whose
answer was lost may have landed: a retried write that is refused asks the
attempts audit whether it was our own (``_recorded``) before calling the
attempt lost.

An attempt is let go (``forget``) only once its outcome is written or it is
known lost: its transport message is acked then, its span ended, and its
in-flight entry (which the heartbeat renews) removed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import PayloadError, StaleAttempt
from ..events import ending_event, where_it_went
from ..logs import job_fields
from ..model import JobState, Outcome, Reaped
from ..payload import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS, describe, storable_text
from ..transport import Delivery
from .inflight import Running
from .state import WorkerState, wait_event

__all__ = ["CARRY_MAX", "CARRY_WAIT", "REPORT_RETRY", "Reporter", "Success", "data_error", "ended"]

log = logging.getLogger("tether.worker")

#: a report that failed (database unreachable) is retried this often until the
#: job's local lease deadline passes; after that the reaper owns the job
REPORT_RETRY = 0.5
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

#: a succeeded attempt and its result as JSON, waiting to be written (complete)
Success = tuple[Running, str | None]

#: how much of a failure's error goes in the worker's log line (the job keeps
#: up to MAX_ERROR_CHARS): a handler that raised with 2 MB of text wrote a
#: 2 MB log line
LOGGED_ERROR_CHARS = 2000


class Reporter:
    def __init__(self, state: WorkerState, *, carry: bool) -> None:
        self.state = state
        #: whether claims carry successes (``complete_and_claim``)
        self.carry = carry
        #: successes waiting to be written (or carried), oldest first
        self.successes: list[Success] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: told when an attempt is found lost while its outcome was being written
        #: (the executor's ``lost``: it cancels the handler, logs, emits)
        self.lost: Callable[[Running, str], None] = lambda running, why: None
        self.wake: asyncio.Event
        self._nudge: asyncio.Event
        self._claimer_idle: asyncio.Event

    def bind(self) -> None:
        self.wake = asyncio.Event()
        self._nudge = self.state.nudge
        self._claimer_idle = self.state.claimer_idle

    # -- successes ------------------------------------------------------------------------
    async def serve(self) -> None:
        """Write successes in batches: one fenced statement for all that finished
        since the last write. In a worker whose claims carry them
        (``complete_and_claim``), this writes only what no claim is about to carry."""
        loop = self.state.loop
        assert loop is not None
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.carry:
                # Leave them to the claimer while it is claiming or about to;
                # waking to find it active again (more jobs finished meanwhile),
                # keep leaving them, up to CARRY_WAIT.
                deadline = loop.time() + CARRY_WAIT
                while self.successes and not self._claimer_idle.is_set():
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    await wait_event(self._claimer_idle, remaining)
            batch, self.successes = self.successes, []
            if batch:
                await self.complete(batch)

    def complete_later(self, batch: list[Success]) -> None:
        """Write these successes again, in the background, as a retry."""
        self._spawn(self.complete(batch, retried=True))

    async def complete(self, batch: list[Success], *, retried: bool = False) -> None:
        s = self.state
        rows = rows_of(batch)
        while True:
            sent_at = time.monotonic()
            try:
                accepted = set(await s.store.complete_async(s.id, rows, executor=s.db_pool))
                break
            except Exception as exc:
                if data_error(exc):
                    await self._refused(batch, exc)
                    return
                retried = True
                s.log.warning("completing %d job(s) failed (%s); retrying", len(rows), exc)
                now = time.monotonic()
                for r, _ in batch:
                    if r.lost or r.local_deadline <= now:
                        self.lost(r, "could not report success before the lease lapsed")
                        self.forget(r)
                batch = [(r, res) for r, res in batch if not r.lost]
                rows = rows_of(batch)
                if not batch:
                    return
                await asyncio.sleep(REPORT_RETRY)
        if retried:
            # A try whose answer was lost may have been written: the retry then
            # finds the job no longer running. Ask the attempts audit, rather
            # than report a recorded success as refused.
            for r, _ in batch:
                if r.job.id not in accepted and await s.db(self._recorded, r, {Outcome.SUCCEEDED}) is not None:
                    accepted.add(r.job.id)
        self.completed(batch, accepted, sent_at)

    async def _refused(self, batch: list[Success], exc: Exception) -> None:
        """A write of these successes was refused for the data in it
        (``data_error``), which no retry changes. Retried whole, the batch
        would be refused forever, and the innocent jobs in it would stay
        running (the heartbeat renews their leases, so the reaper never frees
        them). So each is written alone: the others go through, and the one
        refused again ends down the failure path with the reason, retried
        while its budget lasts as if its handler had raised (what the database
        refused is not known here; the budget bounds it if it recurs)."""
        if len(batch) > 1:
            self.state.log.warning("completing %d job(s) was refused for the data in it (%s); writing them one "
                                   "by one", len(batch), exc)
            for done in batch:
                # retried: an earlier try of the batch (a lost answer) may have written it
                await self.complete([done], retried=True)
            return
        running = batch[0][0]
        # A tether server's payload cap (PayloadError) refuses the same result
        # every time: the job ends dead at once, as over a local worker's own
        # cap, rather than run its handler again for each attempt left.
        self.fail(running, Outcome.FAILED, f"its success could not be written: the database refused its result "
                                           f"({describe(exc)})", None, not isinstance(exc, PayloadError))

    def completed(self, batch: list[Success], accepted: set[int], sent_at: float) -> None:
        """The answer to a write of these successes: ``accepted`` passed their fence."""
        s = self.state
        history, emit = s.history, s.events.active
        refused = 0
        acks: list[Delivery] = []
        for r, _ in batch:
            job = r.job
            ok = job.id in accepted
            if history is not None:
                history.record("report", job=job.id, attempt=job.attempt, op="complete", accepted=ok, sent=sent_at)
            if r.span is not None:
                ended(r, *(("succeeded", None, "succeeded") if ok else
                           ("lost", "its success was refused: the attempt had lost the job", None)))
            if not ok:
                refused += 1
                s.log.warning("job %s attempt %s finished here but its success was refused: the attempt had "
                              "lost the job (at-least-once: it may run again or already has)", job.id, job.attempt,
                              extra=job_fields(job, s.id))
            elif emit:
                s.emit(ending_event(JobState.SUCCEEDED), r, time.monotonic() - r.started, state=JobState.SUCCEEDED,
                       outcome=Outcome.SUCCEEDED)
            self.let_go(r, acks)
        if acks:
            s.transport.ack_many(acks)
        s.counts["succeeded"] += len(batch) - refused
        if refused:
            s.counts["stale_reports"] += refused
        self._nudge.set()

    # -- successes ctx.transaction() already wrote ----------------------------------------------
    def settled(self, running: Running, result_json: str | None) -> None:
        """The handler's transaction committed the attempt's success (fenced):
        write its result, if it returned one, then let it go as a success."""
        sent_at = running.settled or time.monotonic()
        if result_json is None:
            self.completed([(running, None)], {running.job.id}, sent_at)
        else:
            self._spawn(self._write_result(running, result_json, sent_at))

    async def _write_result(self, running: Running, result_json: str, sent_at: float) -> None:
        """Retried while the database is unreachable, up to the lease's length:
        the success stands whatever becomes of this write."""
        s, job = self.state, running.job
        give_up = time.monotonic() + job.lease_ttl
        while True:
            try:
                if not await s.db(s.store.set_result, s.id, job.id, job.attempt, result_json):
                    s.log.warning("job %s attempt %s: its result was refused (the job is not this attempt's "
                                  "success)", job.id, job.attempt, extra=job_fields(job, s.id))
                break
            except Exception as exc:
                if time.monotonic() >= give_up:
                    s.log.warning("job %s attempt %s: could not write its result (%s); the job stays succeeded "
                                  "without one", job.id, job.attempt, exc, extra=job_fields(job, s.id))
                    break
                await asyncio.sleep(REPORT_RETRY)
        self.completed([(running, result_json)], {job.id}, sent_at)

    # -- failures, cancellations, releases ---------------------------------------------------
    def fail(self, running: Running, outcome: Outcome, error: str, tb: str | None, retry: bool,
             delay: float | None = None) -> None:
        """Write a failed (or cancelled, timed-out, snoozed, discarded) attempt in
        the background; ``delay``: seconds before a retry (else the backoff)."""
        self._spawn(self._report_one(running, self._fail, outcome, error, tb, retry, delay))

    def release(self, running: Running) -> None:
        """Hand the job back (fenced; its budget untouched), in the background."""
        self._spawn(self._report_one(running, self._release))

    def _spawn(self, coro: Any) -> None:
        assert self.state.loop is not None
        t = self.state.loop.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _report_one(self, running: Running, fn: Callable[..., Any], *args: Any) -> None:
        s = self.state
        tried = False
        op = fn.__name__.strip("_")
        try:
            while not running.lost:
                sent_at = time.monotonic()
                try:
                    await s.db(fn, running, *args)
                    if s.history is not None:
                        s.history.record("report", job=running.job.id, attempt=running.job.attempt,
                                         op=op, accepted=True, sent=sent_at)
                    return
                except StaleAttempt as exc:
                    # After a try whose answer was lost, the refusal may be our own
                    # earlier write: the attempts audit says whether it was.
                    wrote = {args[0]} if fn == self._fail else {Outcome.RELEASED}
                    state = await s.db(self._recorded, running, wrote) if tried else None
                    if state is not None:
                        await s.db(partial(fn, running, *args, recorded=state))
                        if s.history is not None:
                            s.history.record("report", job=running.job.id, attempt=running.job.attempt,
                                             op=op, accepted=True, sent=sent_at)
                        return
                    if running.span is not None:
                        ended(running, "lost", str(exc))
                    s.counts["stale_reports"] += 1
                    s.log.warning("%s", exc, extra=job_fields(running.job, s.id))
                    if s.history is not None:
                        s.history.record("report", job=running.job.id, attempt=running.job.attempt,
                                         op=op, accepted=False, sent=sent_at)
                    return
                except Exception as exc:
                    tried = True
                    if data_error(exc):
                        again = self._refused_one(running, fn, args, exc)
                        if again is None:
                            return
                        args = again
                        continue
                    if running.local_deadline <= time.monotonic():
                        self.lost(running, f"could not report before the lease lapsed ({exc})")
                        return
                    s.log.warning("report for job %s failed (%s); retrying", running.job.id, exc,
                                  extra=job_fields(running.job, s.id))
                    await asyncio.sleep(REPORT_RETRY)
        finally:
            self.forget(running)

    def _refused_one(self, running: Running, fn: Callable[..., Any], args: tuple[Any, ...],
                     exc: Exception) -> tuple[Any, ...] | None:
        """A failure or release refused for the data in it (``data_error``), as
        ``complete``'s are (``_refused``): no retry changes that, and retried
        every REPORT_RETRY it would be refused for as long as the heartbeat
        keeps the lease, the job running forever. A failure with a delay of its
        own (a Retry's, a callable backoff's: the likeliest data to refuse) is
        written once more without it: failed, retried after the store's backoff
        while the budget lasts, the reason in its error. Anything else is given
        up here: the attempt is let go as lost, the heartbeat stops renewing it,
        and the reaper sends the job down the lapsed lease's path (retried while
        its budget lasts, else dead). The new arguments, or None when given up."""
        s, job = self.state, running.job
        why = describe(exc)
        if fn == self._fail and args[4] is not None:
            _, error, tb, retry, delay = args
            s.log.warning("job %s attempt %s: its failure's delay of %gs was refused (%s); writing it with the "
                          "default backoff", job.id, job.attempt, delay, why, extra=job_fields(job, s.id))
            return (Outcome.FAILED, f"{error} (its delay of {delay:g}s was refused: {why})", tb, retry, None)
        s.log.error("job %s attempt %s: its %s report was refused for its data (%s); letting the attempt go, for "
                    "the reaper to recover", job.id, job.attempt, fn.__name__.strip("_"), why,
                    extra=job_fields(job, s.id))
        self.lost(running, f"its outcome could not be written: the database refused it ({why})")
        return None

    def _recorded(self, running: Running, outcomes: set[Outcome]) -> JobState | None:
        """Database thread: whether this attempt's outcome (one of ``outcomes``)
        is in the attempts audit, written by us; if so, the state it left the
        job in (queued if the job has been claimed again since)."""
        s = self.state
        job = s.store.get_job(running.job.id)
        if job is None or not any(a.attempt == running.job.attempt and a.worker == s.id and a.outcome in outcomes
                                  for a in job.attempts):
            return None
        return JobState.QUEUED if job.state is JobState.RUNNING else job.state

    def _fail(self, running: Running, outcome: Outcome, error: str, tb: str | None, retry: bool,
              delay: float | None = None, *, recorded: JobState | None = None) -> None:
        """Database thread: write a failed attempt (``recorded``: an earlier try
        already did) and tell the world. The error and traceback are the
        handler's text: made storable first (and short enough for a tether
        server), as a refused report would be retried for as long as the
        heartbeat keeps the lease."""
        s = self.state
        error, tb = storable_text(error, MAX_ERROR_CHARS), storable_text(tb, MAX_TRACEBACK_CHARS)
        state = recorded or s.store.fail(s.id, running.job.id, running.job.attempt, outcome=outcome,
                                         error=error, traceback=tb, retry=retry, delay=delay)
        s.counts[str(outcome)] += 1
        if running.span is not None:
            ended(running, outcome, error, state)
        level = logging.WARNING if state in (JobState.DEAD,) else logging.INFO
        shown = error if len(error) <= LOGGED_ERROR_CHARS else (
            f"{error[:LOGGED_ERROR_CHARS]}... ({len(error) - LOGGED_ERROR_CHARS} more characters: `tether job "
            f"{running.job.id}`)")
        s.log.log(level, "job %s attempt %s %s: %s -> %s", running.job.id, running.job.attempt, outcome, shown,
                  state, extra=job_fields(running.job, s.id))
        if s.events.active:
            took = time.monotonic() - running.started
            if outcome not in (Outcome.CANCELLED, Outcome.SNOOZED):  # a snooze is no failure
                s.emit("job.failed", running, took, state=state, outcome=outcome, error=error)
            follow = where_it_went(state, outcome)
            if follow is not None:
                s.emit(follow, running, took, state=state, outcome=outcome, error=error)

    def _release(self, running: Running, *, recorded: JobState | None = None) -> None:
        s = self.state
        state = recorded or s.store.release(s.id, running.job.id, running.job.attempt)
        s.counts["released"] += 1
        if running.span is not None:
            ended(running, Outcome.RELEASED, None, state)
        follow = where_it_went(state, Outcome.RELEASED)  # a pending cancel ends it cancelled
        if follow is not None and s.events.active:
            s.emit(follow, running, time.monotonic() - running.started, state=state, outcome=Outcome.RELEASED)
        if state is JobState.QUEUED:
            s.transport.publish([(running.job.id, running.job.queue)], retry=True)

    def republish(self, requeued: list[Reaped]) -> None:
        """Database thread: the reaper (or start-up reconciliation) sent these
        back to queued; announce them again, marked as retries."""
        s = self.state
        sent = s.transport.publish([(r.id, r.queue) for r in requeued], retry=True)
        s.counts["republished"] += sent
        if s.transport.delivers:
            log.info("republished %d of %d requeued job(s) as retries (ids %s)", sent, len(requeued),
                     ", ".join(str(r.id) for r in requeued[:10]))

    # -- letting attempts go --------------------------------------------------------------
    def forget(self, running: Running) -> None:
        """The attempt is over here: its outcome is written (or it was lost, and
        the database's recovery owns the job). Only now is its message acked."""
        self.let_go(running)
        self._nudge.set()

    def let_go(self, running: Running, acks: list[Delivery] | None = None) -> None:
        """``forget`` without waking the claimer: for a batch, which wakes it
        once (and acks the messages in ``acks`` at once, when given)."""
        if running.delivery is not None:
            if acks is None:
                self.state.transport.ack(running.delivery)
            else:
                acks.append(running.delivery)
            running.delivery = None
        if running.span is not None:
            self._end_span(running)
        self.state.inflight.remove(running)

    def _end_span(self, running: Running) -> None:
        outcome, error, state = running.ended or ("lost", None, None)
        tracing = self.state.tracing
        if tracing is not None:
            tracing.end_attempt(running.span, outcome, error, state)
        running.span = None

    async def drain(self) -> None:
        """Wait for the background reports still being written."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def data_error(exc: BaseException) -> bool:
    """Whether a write was refused for the data in it, not for want of the
    database (which a retry may cure): a tether server's refusal
    (``PayloadError``), a string the driver cannot encode (``UnicodeError``),
    or the driver's ``DataError`` (PEP 249 names it so in every driver:
    psycopg's for a NUL, sqlite3's). Matched by name, as the worker knows no
    driver (the server tells an ``OperationalError`` so too)."""
    return isinstance(exc, (PayloadError, UnicodeError)) or any(k.__name__ == "DataError" for k in type(exc).__mro__)


def rows_of(batch: list[Success]) -> list[tuple[int, int, str | None]]:
    """Finished attempts as the (id, attempt, result JSON) rows complete takes."""
    return [(r.job.id, r.job.attempt, res) for r, res in batch]


def ended(running: Running, outcome: str, error: str | None = None, state: str | None = None) -> None:
    """Note how the attempt ended, for its span (ended when the attempt is let go)."""
    if running.ended is None:
        running.ended = (str(outcome), error, None if state is None else str(state))
