"""``ctx.transaction()`` in a worker: the handler's writes and its attempt's
fenced success in one transaction of the job's own database.

The store does the database part (``Store.transaction``: BEGIN, the block,
the fenced ``complete`` with its audit, COMMIT; a refused fence rolls
back and raises ``StaleAttempt``). The worker's part is here:

- From the moment the block ends without an exception until the commit's
  answer, the attempt is ``reporting``: a heartbeat that finds the job no
  longer running (our own commit just finished it) is not taken for a lost
  lease, and the worker's self-fence leaves the attempt to the commit.
- Once committed, the attempt is ``settled``: the success is written, so when
  the handler returns the executor does not write it again
  (``Executor._handler_ended`` hands it to ``Reporter.settled``), and the
  handler's return value, known only then, is written as the job's result by
  a statement of its own (``Store.set_result``, fenced on that success).
- A handler gets one transaction per attempt: the first commit finished the job.

Handlers that never call ``ctx.transaction()`` pay nothing for any of this
beyond one attribute test when they end.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

from ..context import CancelReason, JobContext
from ..errors import ConfigError, InvalidTransition, PayloadError, StaleAttempt
from ..logs import job_fields
from ..payload import dump_json
from .inflight import Running
from .pool import ThreadCall
from .state import WorkerState

__all__ = ["HandlerTransaction", "committing_thread", "open_transaction", "refuse_progress_in_block", "result_after_commit", "settle_unsaid"]


class HandlerTransaction:
    """What ``ctx.transaction()`` returns in a worker."""

    __slots__ = ("_acm", "_cm", "_joined", "_running", "_sent_at", "_state")

    def __init__(self, state: WorkerState, running: Running, joined: object = None) -> None:
        self._state = state
        self._running = running
        #: the caller's connection (``ctx.transaction_on``): they begin and commit
        self._joined = joined
        self._sent_at = 0.0
        self._cm: AbstractContextManager[object] | None = None
        self._acm: AbstractAsyncContextManager[object] | None = None

    def _begin(self) -> tuple[str, int, int]:
        r = self._running
        if r.tx_opened:
            raise InvalidTransition(
                f"job {r.job.id} attempt {r.job.attempt}: ctx.transaction() may be used once per attempt (its "
                "commit is the job's success; put every write the job makes in that one block)")
        r.tx_opened = True
        if r.lost:
            raise StaleAttempt(r.job.id, r.job.attempt, self._state.id, "transaction")
        return self._state.id, r.job.id, r.job.attempt

    def _committing(self) -> None:
        # From here the commit, not the heartbeat, says whether we own the job.
        self._running.reporting = True

    def _committed(self, sent_at: float) -> None:
        self._running.settled = sent_at
        history = self._state.history
        if history is not None:
            r = self._running
            history.record("tx_commit", job=r.job.id, attempt=r.job.attempt, sent=sent_at)

    def _failed(self) -> None:
        self._running.reporting = False

    # -- def handlers ---------------------------------------------------------------------
    def __enter__(self) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ConfigError("in an async def handler use `async with ctx.transaction() as conn:` "
                              "(a plain `with` would block the worker's event loop)")
        store = self._state.store
        self._cm = store.transaction(*self._begin()) if self._joined is None else store.transaction_on(
            self._joined, *self._begin())
        conn = self._cm.__enter__()
        self._running.in_block = True
        # transaction_on: the caller has the connection; what it needs from the
        # block is this handle, for committed() and failed()
        return conn if self._joined is None else self

    def __exit__(self, *exc: Any) -> bool:
        cm = self._cm
        assert cm is not None
        self._running.in_block = False
        if exc[0] is not None:
            return bool(cm.__exit__(*exc))  # rolls back; the exception goes on
        self._committing()
        sent_at = time.monotonic()
        try:
            cm.__exit__(None, None, None)
        except BaseException:
            self._failed()
            raise
        if self._joined is None:
            self._committed(sent_at)
        else:  # written, not committed: the caller's commit comes next (committed / failed)
            self._sent_at = self._running.joined_written = sent_at
        return False

    def committed(self) -> None:
        """``transaction_on``: the caller's transaction committed the success."""
        self._running.joined_written = None
        self._committed(self._sent_at)

    def failed(self) -> None:
        """``transaction_on``: the caller's transaction rolled back (or its commit raised)."""
        self._running.joined_written = None
        self._failed()

    # -- async def handlers -----------------------------------------------------------------
    async def __aenter__(self) -> Any:
        if self._joined is not None:
            raise ConfigError("ctx.transaction_on() is for def handlers: use `with`, from the handler's thread")
        self._acm = self._state.store.transaction_async(*self._begin())
        conn = await self._acm.__aenter__()
        self._running.in_block = True
        return conn

    async def __aexit__(self, *exc: Any) -> bool:
        acm = self._acm
        assert acm is not None
        self._running.in_block = False
        if exc[0] is not None:
            return bool(await acm.__aexit__(*exc))
        self._committing()
        sent_at = time.monotonic()
        # The commit runs to its end even if the handler is cancelled meanwhile
        # (a timeout, a shutdown): cut short, its outcome would be unknown here
        # (the database's decision stands either way, but the worker could not
        # tell a committed success from a lost attempt).
        commit = asyncio.ensure_future(acm.__aexit__(None, None, None))
        try:
            await asyncio.shield(commit)
        except asyncio.CancelledError:
            if not commit.done():
                await asyncio.wait([commit])
            if commit.cancelled() or commit.exception() is not None:
                self._failed()
            else:
                self._committed(sent_at)
            raise
        except BaseException:
            self._failed()
            raise
        self._committed(sent_at)
        return False


def refuse_progress_in_block(state: WorkerState, job_id: int) -> None:
    """SQLite: a progress report inside the block would wait for the write
    lock the block itself holds (until busy_timeout, 30 s): refuse it at once."""
    running = state.inflight.get(job_id)
    if running is not None and running.in_block:
        raise ConfigError("on SQLite, ctx.progress() cannot run inside ctx.transaction(): the block holds "
                          "SQLite's one write lock, which the progress report needs. Report progress before or "
                          "after the block")


def open_transaction(state: WorkerState, ctx: JobContext, joined: object = None) -> HandlerTransaction:
    """``ctx.transaction()`` (or, on the caller's connection, ``ctx.transaction_on``)
    for the attempt ``ctx`` belongs to."""
    running = state.inflight.get(ctx.job_id)
    if running is None or running.ctx is not ctx:
        raise StaleAttempt(ctx.job_id, ctx.attempt, state.id, "transaction")
    return HandlerTransaction(state, running, joined)


def settle_unsaid(state: WorkerState, running: Running) -> None:
    """The handler ended after a ``transaction_on`` block wrote the success
    into the caller's transaction, without ``tx.committed()`` or
    ``tx.failed()``. A handler that goes on past the block has, almost always,
    committed it: taken as committed, so the success is not written a second
    time (refused: the job is no longer running) and blamed on a lapsed
    lease. Had the caller rolled back instead, the result's fenced write finds
    no success and says so, and the reaper takes the job when its lease lapses."""
    if running.joined_written is None or running.settled is not None:
        return
    job = running.job
    state.log.warning("job %s attempt %s: ctx.transaction_on()'s block wrote the success, but the handler ended "
                      "without tx.committed() or tx.failed(); taken as committed (call tx.committed() after "
                      "your commit)", job.id, job.attempt, extra=job_fields(job, state.id))
    running.settled, running.joined_written = running.joined_written, None


def result_after_commit(state: WorkerState, running: Running, result: Any, exc: BaseException | None,
                        max_payload_bytes: int) -> str | None:
    """The result to write for an attempt whose success ``ctx.transaction()``
    committed: its return value as JSON. Nothing can fail the job any more
    (terminal is final): an exception raised after the commit, or a result
    that is not JSON, is logged and the job stays succeeded without one."""
    job = running.job
    if exc is not None:
        state.log.warning("job %s attempt %s: the handler raised after its ctx.transaction() committed (%s: %s); "
                          "the job stays succeeded", job.id, job.attempt, type(exc).__name__, exc,
                          extra=job_fields(job, state.id))
        return None
    if result is None:
        return None
    try:
        return dump_json(result, f"result of task {job.task!r}", max_payload_bytes)
    except PayloadError as perr:
        state.log.warning("job %s attempt %s: %s; its ctx.transaction() had committed, so the job stays "
                          "succeeded without a result", job.id, job.attempt, perr, extra=job_fields(job, state.id))
        return None


def committing_thread(running: Running) -> bool:
    """A def handler inside ctx.transaction() (or committing it) at a shutdown:
    left to end, not released beside its commit (on SQLite the release waited
    for the block's lock, was refused, and the result was dropped)."""
    return (running.ctx.cancel_reason == CancelReason.SHUTDOWN and not running.lost
            and isinstance(running.handler, ThreadCall) and (running.in_block or running.reporting))
