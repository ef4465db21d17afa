"""The handler threads of ``def`` handlers (``tether.worker.pool``): outcomes
reach the loop in batches, a call the worker stopped waiting for is reported
cancelled once and its late outcome dropped, and a straggler never blocks the
calls behind it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from tether.worker.pool import HandlerThreads, ThreadCall


def _until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


async def _done(call: ThreadCall, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not call.done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_outcomes_finished_while_the_loop_was_busy_arrive_in_one_delivery() -> None:
    loop = asyncio.new_event_loop()
    pool = HandlerThreads()
    got: list[tuple[Any, Any, BaseException | None]] = []
    deliveries = 0
    deliver = pool._deliver

    def counting() -> None:
        nonlocal deliveries
        deliveries += 1
        deliver()

    pool._deliver = counting  # type: ignore[method-assign]
    pool.bind(loop, lambda call: got.append((call.owner, call.result, call.exc)))
    gate = threading.Event()

    def work(n: int) -> int:
        gate.wait(5)
        if n == 3:
            raise ValueError("three")
        return n * 10

    try:
        for n in range(50):
            pool.submit(ThreadCall(pool, n, work, (n,)))
        gate.set()
        _until(lambda: len(pool._finished) == 50)  # every thread finished while the loop did not run
        loop.run_until_complete(asyncio.sleep(0.01))
        assert deliveries == 1
        assert sorted(o for o, _, _ in got) == list(range(50))
        assert all(r == o * 10 and e is None for o, r, e in got if o != 3)
        assert [type(e) for o, _, e in got if o == 3] == [ValueError]
    finally:
        pool.shutdown()
        loop.close()


def test_a_cancelled_call_is_reported_once_and_its_late_outcome_dropped() -> None:
    loop = asyncio.new_event_loop()
    pool = HandlerThreads()
    got: list[tuple[Any, bool]] = []
    pool.bind(loop, lambda call: got.append((call.owner, call.cancelled())))
    release = threading.Event()
    try:
        straggler = ThreadCall(pool, "straggler", release.wait, (5,))
        pool.submit(straggler)
        assert straggler.cancel() and not straggler.cancel() and straggler.done()
        # the straggler's thread is still busy: the next call gets a thread of its own
        quick = ThreadCall(pool, "quick", lambda: 1, ())
        pool.submit(quick)
        loop.run_until_complete(_done(quick))
        assert got == [("straggler", True), ("quick", False)]
        release.set()
        time.sleep(0.05)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert got == [("straggler", True), ("quick", False)]  # the straggler's return was dropped
    finally:
        pool.shutdown()
        loop.close()


def test_calls_submitted_together_all_run_at_once_when_they_block() -> None:
    """A round's calls wake one thread, which wakes the next whenever it takes
    a call and leaves others behind: so calls that block (here, each waits
    for all the others) still each get a thread of their own, on the first
    round and on later rounds that find the threads asleep."""
    loop = asyncio.new_event_loop()
    pool = HandlerThreads()
    got: list[Any] = []
    pool.bind(loop, lambda call: got.append(call.result if call.exc is None else call.exc))
    try:
        for n in (25, 25, 40):
            barrier = threading.Barrier(n, timeout=5)
            got.clear()
            for _ in range(n):
                pool.submit(ThreadCall(pool, None, barrier.wait, ()))
            _until(lambda n=n: len(pool._finished) == n)
            loop.run_until_complete(asyncio.sleep(0.01))
            assert len(got) == n and all(isinstance(r, int) for r in got), got[:3]
            _until(lambda: len(pool._sleepers) == pool._threads)  # every thread asleep again
        assert pool._threads == 40  # the sleeping threads were woken, not new ones started
    finally:
        pool.shutdown()
        loop.close()


def test_shutdown_runs_what_was_submitted_and_ends_every_thread() -> None:
    loop = asyncio.new_event_loop()
    pool = HandlerThreads(name="tether-handler-shutdown-test")
    ran: list[int] = []
    gate = threading.Event()

    def work(n: int) -> None:
        gate.wait(5)
        ran.append(n)

    try:
        pool.bind(loop, lambda call: None)
        for n in range(5):
            pool.submit(ThreadCall(pool, None, work, (n,)))
        pool.shutdown()
        try:
            pool.submit(ThreadCall(pool, None, work, (99,)))
        except RuntimeError:
            pass
        else:
            raise AssertionError("a submit after shutdown was taken")
        gate.set()
        _until(lambda: not [t for t in threading.enumerate() if t.name.startswith("tether-handler-shutdown-test")])
        assert sorted(ran) == list(range(5))
    finally:
        loop.close()


def test_a_call_no_thread_could_be_started_for_is_refused_not_left_queued(monkeypatch: Any) -> None:
    """``can't start new thread`` (a container's process limit): the submit
    raises and the call is not run later behind the worker's back; the pool
    still works once threads can be started again."""
    loop = asyncio.new_event_loop()
    pool = HandlerThreads(name="tether-handler-nothread-test")
    ran: list[str] = []
    real_start = threading.Thread.start

    def refuse(self: threading.Thread) -> None:
        if self.name.startswith("tether-handler-nothread-test"):
            raise RuntimeError("can't start new thread")
        real_start(self)

    try:
        pool.bind(loop, lambda call: None)
        monkeypatch.setattr(threading.Thread, "start", refuse)
        refused = ThreadCall(pool, None, ran.append, ("refused",))
        try:
            pool.submit(refused)
        except RuntimeError:
            pass
        else:
            raise AssertionError("the submit was taken with no thread to run it")
        assert not pool._pending and pool._searching == 0 and pool._threads == 0
        monkeypatch.setattr(threading.Thread, "start", real_start)
        later = ThreadCall(pool, None, ran.append, ("later",))
        pool.submit(later)
        _until(lambda: len(pool._finished) == 1)
        time.sleep(0.05)
        assert ran == ["later"]
    finally:
        pool.shutdown()
        loop.close()


def test_a_wait_cancelled_as_its_event_is_set_stays_cancelled() -> None:
    """``state.wait_event``: a task cancelled in the same turn as the event it
    waits on is set ends cancelled. ``asyncio.wait_for`` on Python 3.11 lost
    that cancellation and the task ran on, so a worker's shutdown, which
    cancels its reporter and waits for it, could hang."""
    from tether.worker.state import wait_event

    async def main() -> bool:
        event = asyncio.Event()

        async def waiter() -> None:
            await wait_event(event, 10)
            await asyncio.sleep(3600)

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the waiter now waits on the event
        event.set()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        task.cancel()
        return bool(done) and task.cancelled()

    assert asyncio.run(main())
