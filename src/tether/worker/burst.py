"""Burst mode: a worker that stops once no job is due (``tether worker --burst``,
``app.drain()``).

``BurstClaimer`` is the claimer with two differences, both off its hot path
(a round that finds jobs runs exactly as the base class's):

- it always claims from the database, never from a delivering transport: the
  database is what says whether a job is due, and a transport that has nothing
  to deliver proves nothing;
- where the base claimer would idle, it stops the worker instead if nothing is
  in flight (every job it took has ended and its report is written): the round
  that sent it idle found no due job. While jobs are in flight it waits for
  a nudge as usual, but also looks every ``BURST_CHECK`` seconds whether the
  last report has been written, and then claims once more (a failed job
  retried without backoff, or one a handler enqueued, is due now).

Jobs scheduled for later (``run_at``, ``delay``, a retry's backoff) are not due
and do not keep a burst worker running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from .claimer import Claimer, _Claim
from .executor import Executor
from .reporter import Reporter
from .state import WorkerState, wait_event

__all__ = ["BURST_CHECK", "BurstClaimer"]

#: while jobs are in flight, how often an idle burst claimer looks whether they have all ended
BURST_CHECK = 0.02
#: queued jobs of a paused queue read, at most, for the stop's log line
_COUNT_UP_TO = 1000


class BurstClaimer(Claimer):
    def __init__(self, state: WorkerState, executor: Executor, reporter: Reporter, *, poll_interval: float,
                 on_empty: Callable[[], None]) -> None:
        super().__init__(state, executor, reporter, poll_interval=poll_interval)
        #: called once no job is due and nothing is in flight (the worker's stop)
        self.on_empty = on_empty

    #: whether a job was still in flight (running, or its report being
    #: written) when the last claim was sent: a failure it reported after that
    #: claim looked may have queued a retry due at once, so before stopping the
    #: claimer looks once more. (It stopped instead, when the report landed
    #: while that claim was on its way: a drain then left the retry queued.)
    _looked_early = False

    def send(self, want: int, *, ids: list[int] | None = None) -> _Claim:
        self._looked_early = bool(self.state.inflight)
        return super().send(want, ids=ids)

    def _via_transport(self) -> bool:
        return False  # the database says what is due

    def _fetching(self) -> bool:
        return False  # never from a transport: after an empty round, idle (and stop)

    def _running(self) -> bool:
        """Attempts in flight, or a def handler's thread still running after
        its attempt ended (its slot kept: executor._handler_ended): a burst
        that stopped then would start nothing more, but a drain() would return
        with that thread still running its handler."""
        return bool(self.state.inflight) or self.executor.busy > 0

    async def _left_behind(self) -> str:
        """What the stop leaves: due jobs on this worker's queues of tasks no
        live worker knows (a job of a newer release's task, in a deploy), and
        due jobs of its paused queues, or "". A drain in a test or a CI job
        that passes with work left undone should say why."""
        s = self.state
        try:
            unknown = await s.db(s.store.unknown_tasks)
            paused = [q for q in await s.db(s.store.paused_queues) if q in s.queues]
            held = {q: await s.db(partial(s.store.list_jobs, state="queued", queue=q, limit=_COUNT_UP_TO))
                    for q in paused}
        except Exception:  # only words for the log: the stop goes ahead
            return ""
        words = []
        mine = [u for u in unknown if u.queue in s.queues]
        if mine:
            words.append(f"{sum(u.jobs for u in mine)} due job(s) of tasks no live worker knows wait: "
                         + ", ".join(f"{u.task} on {u.queue} ({u.jobs})" for u in mine[:5]))
        now = datetime.now(UTC)
        due = {q: sum(1 for j in jobs if j.run_at <= now) for q, jobs in held.items()}
        if any(due.values()):
            words.append(f"{sum(due.values())} due job(s) wait in paused queue(s): "
                         + ", ".join(f"{q} ({n}{'+' if len(held[q]) >= _COUNT_UP_TO else ''})"
                                     for q, n in due.items() if n) + " (tether resume QUEUE)")
        return f" ({'; '.join(words)})" if words else ""

    async def idle(self) -> None:
        s = self.state
        if not self._running() and not s.stopping:
            if self._looked_early:
                return  # every report is written now: claim once more
            # Idle for a moment first, as the base class would: a reporter
            # waiting to leave successes to this claimer's next claim sees it
            # idle and writes them before the stop.
            self._idle.set()
            await asyncio.sleep(BURST_CHECK)
            if not self._running():
                left = await self._left_behind()
                s.log.log(logging.WARNING if left else logging.INFO,
                          "burst: no job is due and none is running; stopping%s", left)
                self.on_empty()
                return
        until = time.monotonic() + self.poll_interval
        expires = self.executor.hold_expires()
        if expires is not None:
            until = min(until, expires)
        self._idle.set()  # as in the base class: successes are written at once while idle
        try:
            while self._running() and not s.stopping and time.monotonic() < until:
                if await wait_event(self._nudge, BURST_CHECK):
                    return  # nudged: a slot freed, or a stop
        finally:
            self._idle.clear()
