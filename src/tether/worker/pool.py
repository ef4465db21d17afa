"""The threads that run ``def`` handlers, and how their outcomes reach the loop.

Long-lived daemon threads take calls from one deque. A claim round submits
its calls together, and they wake one sleeping thread, not one each: a
thread that takes a call and leaves others behind wakes the next, so a
handler that blocks never holds up the calls behind it, while quick handlers
are run by the first thread before the one it woke gets the GIL (which then
finds nothing left and sleeps again). Waking every thread for every call
cost each job a futex wake, a context switch and a GIL hand-off.

A finished call goes into a deque, and the loop is woken once for everything
that finished since it last looked (one ``call_soon_threadsafe``, one write
to the loop's self-pipe, per batch rather than per job); no futures are made
per call. Under load the loop takes many outcomes per wake-up, which is where
the ``def`` handler's cost used to go: a ``concurrent.futures.Future``, an
asyncio future chained to it, a done callback and a self-pipe write for
every job.

A thread handler cannot be interrupted. When its attempt is lost, timed out
or shut down, the worker stops waiting for it (``ThreadCall.cancel``): the
attempt's outcome is written at once, and the thread runs on until the
handler returns, its outcome dropped. Such a straggler is still running code,
so the pool tells the loop when it returns (``on_straggler``) and the worker
keeps its slot until then: ``concurrency`` bounds the threads running
handlers, not only the attempts the database counts. Daemon threads keep a
straggler from holding the process open at exit, and a new thread is started
whenever none is idle, so a straggler never blocks the calls behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["HandlerThreads", "ThreadCall"]

#: a call's states
_PENDING, _DONE, _CANCELLED = 0, 1, 2


class ThreadCall:
    """One ``def`` handler call: the handle the executor keeps as the attempt's
    ``handler`` (``done()``, ``cancel()``, as an asyncio task offers)."""

    __slots__ = ("args", "exc", "fn", "owner", "pool", "result", "returned", "state", "straggler")

    def __init__(self, pool: HandlerThreads, owner: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.pool = pool
        #: what the loop is told about when the call ends (the executor's Running)
        self.owner = owner
        self.fn = fn
        self.args = args
        self.result: Any = None
        self.exc: BaseException | None = None
        self.state = _PENDING
        #: set by the thread once the handler has returned (or raised)
        self.returned = False
        #: set by cancel() while the handler was still running: the pool calls
        #: on_straggler once it returns
        self.straggler = False

    def done(self) -> bool:
        return self.state != _PENDING

    def cancelled(self) -> bool:
        return self.state == _CANCELLED

    def cancel(self, msg: Any = None) -> bool:
        """The loop only: stop waiting for this call. The pool reports it ended
        cancelled (on the loop's next turn, as a cancelled future's callback
        would be); whatever the thread later returns is dropped."""
        if self.state != _PENDING:
            return False
        self.state = _CANCELLED
        # Still running (not returned): delivered as a straggler once it
        # returns (the thread sets returned, then delivers every call it took).
        self.straggler = not self.returned
        self.pool.cancelled(self)
        return True


class HandlerThreads:
    def __init__(self, name: str = "tether-handler") -> None:
        self._name = name
        self._lock = threading.Lock()
        #: calls submitted and not yet taken by a thread
        self._pending: deque[ThreadCall] = deque()
        #: the wake locks of the threads asleep, the last to sleep on top
        self._sleepers: list[threading.Lock] = []
        #: threads woken (or started) that have not yet looked at _pending
        self._searching = 0
        self._threads = 0
        self._shutdown = False
        #: calls finished on their threads, not yet taken by the loop
        self._finished: deque[ThreadCall] = deque()
        #: set while a delivery to the loop is scheduled and has not begun
        self._signalled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_done: Callable[[ThreadCall], None] = lambda call: None
        self._on_straggler: Callable[[ThreadCall], None] = lambda call: None

    def bind(self, loop: asyncio.AbstractEventLoop, on_done: Callable[[ThreadCall], None],
             on_straggler: Callable[[ThreadCall], None] | None = None) -> None:
        """The loop that takes the outcomes, and what it calls for each (on the
        loop); ``on_straggler``: for a cancelled call whose handler was still
        running, once it has returned."""
        self._loop = loop
        self._on_done = on_done
        if on_straggler is not None:
            self._on_straggler = on_straggler

    def submit(self, call: ThreadCall) -> None:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("the handler threads are shut down")
            self._pending.append(call)
            # A thread already on its way to _pending takes this call; a
            # thread that takes a call and leaves others behind wakes the
            # next (_run). So a round's calls wake one thread, not one each.
            if self._searching == 0:
                try:
                    self._wake()
                except BaseException:  # no thread could be started: the call is refused, not left queued
                    self._pending.pop()
                    raise

    def _wake(self) -> None:
        """Lock held: wake a sleeping thread, or start one when none sleeps
        (every thread is in a call: a straggler never holds up the rest)."""
        if self._sleepers:
            self._sleepers.pop().release()
        else:
            thread = threading.Thread(target=self._run, name=f"{self._name}-{self._threads + 1}", daemon=True)
            thread.start()  # (may fail: "can't start new thread")
            self._threads += 1
        self._searching += 1

    def _run(self) -> None:
        lock, pending, finished = self._lock, self._pending, self._finished
        # held while awake; a sleeping thread blocks on it until _wake releases it
        wake = threading.Lock()
        wake.acquire()
        woken = True  # counted in _searching by whoever started this thread
        while True:
            with lock:
                if woken:
                    self._searching -= 1
                if pending:
                    call = pending.popleft()
                    # Calls left behind while no other thread is on its way
                    # get one: if this call blocks, they do not wait for it.
                    # A thread woken for them finds them gone when the calls
                    # are quick and this thread has run them all.
                    if pending and self._searching == 0:
                        # (no thread to spare: they wait for this one, or for the next submit's)
                        with contextlib.suppress(RuntimeError):
                            self._wake()
                elif self._shutdown:
                    return
                else:
                    self._sleepers.append(wake)
                    call = None
            if call is None:
                wake.acquire()
                woken = True
                continue
            woken = False
            if call.state == _PENDING:
                try:
                    call.result = call.fn(*call.args)
                except BaseException as exc:
                    call.exc = exc
            # Every call taken is delivered, a cancelled one too: _deliver, on
            # the loop after any cancel() there, reads what cancel() decided
            # (straggler: it saw the call not yet returned, so it is told of
            # the return now). Set before the append: a cancel() that reads
            # it False is one this thread's append comes after.
            call.returned = True
            finished.append(call)
            # Once per batch: a delivery already scheduled (and not begun)
            # takes this one too. _deliver clears the flag before it
            # drains, so a call appended after the drain began schedules
            # another.
            if not self._signalled:
                self._signalled = True
                loop = self._loop
                if loop is not None:
                    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for it
                        loop.call_soon_threadsafe(self._deliver)
            del call

    def _deliver(self) -> None:
        """On the loop: every call finished since the last delivery, in order."""
        self._signalled = False
        finished, on_done = self._finished, self._on_done
        while finished:
            call = finished.popleft()
            if call.state == _PENDING:  # not cancelled meanwhile
                call.state = _DONE
                on_done(call)
            elif call.straggler:  # cancelled while it ran, and now it has returned
                call.straggler = False
                self._on_straggler(call)

    def cancelled(self, call: ThreadCall) -> None:
        """On the loop: report a call the worker stopped waiting for."""
        assert self._loop is not None
        self._loop.call_soon(self._on_done, call)

    def shutdown(self, wait: bool = True) -> None:
        """No new calls; the threads run what is already submitted, then end."""
        with self._lock:
            self._shutdown = True
            sleepers, self._sleepers = self._sleepers, []
            self._searching += len(sleepers)
        for wake in sleepers:
            wake.release()
