"""Waiting for a job to finish (``app.wait``, ``app.wait_async``).

A waiter reads the job, and while it is queued or running, waits to be told
it may have finished, then reads it again: the database row is the answer,
a notification only a hint to look. Where the store has a push channel
(``Store.listen_finished``: PostgreSQL's LISTEN on the channel every
statement that ends jobs notifies, through queries.sql's ``_ending``), one
listener per store serves every waiter in the process, and a waiter still
looks every ``PUSH_CHECK`` seconds in case a notification was lost. Elsewhere
(SQLite, a tether server, PostgreSQL behind a pooler without ``listen_url``)
it polls, from ``FIRST_POLL`` up to ``MAX_POLL`` seconds apart.

A waiter subscribes before it reads, so a job that finishes in between wakes
it; the listener's ``"*"`` (sent when it connects or reconnects) wakes them all.
Where the channel announces only the jobs someone waits for
(``Store.watch_finished``: PostgreSQL's trigger notifies waited-for ids only,
so that completions nobody waits for take no server-wide NOTIFY lock), the
waiter registers before its first read and unregisters when it returns. A
completion whose trigger ran just before the registration committed is not
announced, so even with a healthy channel the pauses between reads start at
``FIRST_POLL`` and grow to ``PUSH_CHECK``: such a job is seen within tens of
milliseconds.
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
        self._start_lock = threading.Lock()
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
        # a lock of its own, held while the listener starts: a second waiter
        # must not go on before it is known whether there is one (_watch)
        with self._start_lock:
            if self._started:
                return
            listener = self.store.listen_finished(self._on_finished)
            with self._lock:
                self._listener = listener
            self._started = True

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

    def _watch(self, job_id: int, seconds: float) -> int | None:
        """Registered with the store for announcements, where it has a channel."""
        if self._listener is None:
            return None
        # the deadline plus a margin: the row must outlive the wait's last read
        return self.store.watch_finished(job_id, seconds + PUSH_CHECK)

    def _unwatch(self, token: int | None) -> None:
        if token is not None:
            self.store.unwatch_finished(token)

    def _pause(self, job_id: int, timeout: float | None, deadline: float, pause: float) -> tuple[float, float]:
        """After a read that found the job unfinished: how long to wait for a
        wake-up now, and the pause after that (growing to PUSH_CHECK while the
        channel is up, to MAX_POLL while it is not); TimeoutError past the
        deadline. Both loops below ask it, so they cannot drift apart."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"job {job_id} did not finish within {timeout:g}s")
        cap = PUSH_CHECK if self.pushed else MAX_POLL
        return min(left, pause, cap), min(pause * POLL_GROWTH, cap)

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
        with self._subscribed(job_id, woken.set):
            token = self._watch(job_id, deadline - time.monotonic())
            try:
                return self._wait_subscribed(job_id, timeout, deadline, woken)
            finally:
                self._unwatch(token)

    def _wait_subscribed(self, job_id: int, timeout: float | None, deadline: float, woken: threading.Event) -> Job:
        pause = FIRST_POLL
        while True:
            woken.clear()
            job = self._read(job_id)
            if job is not None:
                return job
            now_pause, pause = self._pause(job_id, timeout, deadline, pause)
            woken.wait(now_pause)

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
            token = await asyncio.to_thread(self._watch, job_id, deadline - time.monotonic())
            try:
                while True:
                    woken.clear()
                    job = await asyncio.to_thread(self._read, job_id)
                    if job is not None:
                        return job
                    now_pause, pause = self._pause(job_id, timeout, deadline, pause)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), now_pause)
            finally:
                await asyncio.to_thread(self._unwatch, token)
