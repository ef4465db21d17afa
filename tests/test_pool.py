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
