"""Waiting for a job to finish (``app.wait``, ``app.wait_async``).

A waiter reads the job, and while it is queued or running, waits to be told
it may have finished, then reads it again: the database row is the answer,
a notification only a hint to look. Where the store has a push channel
(``Store.listen_finished``: PostgreSQL's LISTEN on the channel the
``attempts_notify_finished`` trigger and the cancel query notify), one
listener per store serves every waiter in the process, and a waiter still
looks every ``PUSH_CHECK`` seconds in case a notification was lost. Elsewhere
(SQLite, a tether server, PostgreSQL behind a pooler without ``listen_url``)
it polls, from ``FIRST_POLL`` up to ``MAX_POLL`` seconds apart.

A waiter subscribes before it reads, so a job that finishes in between wakes
it; the listener's ``"*"`` (sent when it connects or reconnects) wakes them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import ConfigError, JobNotFound
from ..model import TERMINAL_STATES, Job
from .base import Listener, Store

__all__ = ["FIRST_POLL", "MAX_POLL", "PUSH_CHECK", "FinishWatch"]

#: the first pause between two reads when nothing pushes, growing by POLL_GROWTH
FIRST_POLL = 0.05
POLL_GROWTH = 1.5
#: the longest pause between two reads when nothing pushes
MAX_POLL = 1.0
#: with a healthy push channel, a waiter still reads this often
PUSH_CHECK = 5.0


def check_timeout(timeout: float | None) -> float:
    """Seconds from now to the deadline (inf for None); ConfigError if nonsense."""
    if timeout is None:
        return float("inf")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


class FinishWatch:
    """Every waiter of one store, and the one listener that wakes them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._wakers: dict[int, set[Callable[[], None]]] = {}
        self._listener: Listener | None = None
        self._started = False

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    @property
    def pushed(self) -> bool:
        listener = self._listener
        return listener is not None and listener.healthy

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        listener = self.store.listen_finished(self._on_finished)
        with self._lock:
            self._listener = listener

    def _on_finished(self, payload: str) -> None:
        """The listener's thread: wake the waiters of these ids (all for "*")."""
        with self._lock:
            if payload == "*":
                wake = [w for ws in self._wakers.values() for w in ws]
            else:
                wake = [w for part in payload.split(",") if part.isdigit()
                        for w in self._wakers.get(int(part), ())]
        for w in wake:
            w()

    @contextmanager
    def _subscribed(self, job_id: int, waker: Callable[[], None]) -> Iterator[None]:
        self._start()
        with self._lock:
            self._wakers.setdefault(job_id, set()).add(waker)
        try:
            yield
        finally:
            with self._lock:
                ws = self._wakers.get(job_id)
                if ws is not None:
                    ws.discard(waker)
                    if not ws:
                        del self._wakers[job_id]

    def _read(self, job_id: int) -> Job | None:
        """The job once finished; None while it is queued or running."""
        job = self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id} (never enqueued, or pruned since it finished)")
        return job if job.state in TERMINAL_STATES else None

    def wait(self, job_id: int, timeout: float | None) -> Job:
        """Block until the job finishes; TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + check_timeout(timeout)
        woken = threading.Event()
        pause = FIRST_POLL
        with self._subscribed(job_id, woken.set):
            while True:
                woken.clear()
                job = self._read(job_id)
                if job is not None:
                    return job
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} did not finish within {timeout:g}s")
                woken.wait(min(left, PUSH_CHECK if self.pushed else pause))
                pause = min(pause * POLL_GROWTH, MAX_POLL)

    async def wait_async(self, job_id: int, timeout: float | None) -> Job:
        """``wait`` for a coroutine: reads run on a thread, the waits on the loop."""
        deadline = time.monotonic() + check_timeout(timeout)
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:  # from the listener's thread
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(woken.set)

        pause = FIRST_POLL
        await asyncio.to_thread(self._start)
        with self._subscribed(job_id, wake):
            while True:
                woken.clear()
                job = await asyncio.to_thread(self._read, job_id)
                if job is not None:
                    return job
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} did not finish within {timeout:g}s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(left, PUSH_CHECK if self.pushed else pause))
                pause = min(pause * POLL_GROWTH, MAX_POLL)
