"""JobContext's cancel signal, used from the event loop, the heartbeat thread and
handler threads at once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from tether.context import CancelReason, JobCancelled, JobContext
from tether.model import ClaimedJob


def _ctx(seen: list[JobContext] | None = None) -> JobContext:
    job = ClaimedJob(id=7, attempt=2, task="t", args={}, queue="default", priority=0, max_attempts=3,
                     lease_ttl=30.0, timeout=None, claimed_at=datetime.now(UTC))
    return JobContext(job, worker_id="w", report_progress=lambda job, f, m: False,
                      on_cancel=None if seen is None else seen.append)


def test_first_reason_wins_and_the_hook_runs_once() -> None:
    seen: list[JobContext] = []
    ctx = _ctx(seen)
    assert not ctx.cancelled and ctx.cancel_reason is None
    ctx.raise_if_cancelled()  # not cancelled: no-op
    assert ctx.cancel(CancelReason.LOST) is True
    assert ctx.cancel(CancelReason.SHUTDOWN) is False
    assert ctx.cancelled and ctx.cancel_reason == CancelReason.LOST and seen == [ctx]
    with pytest.raises(JobCancelled, match="lost ownership") as info:
        ctx.raise_if_cancelled()
    assert info.value.job_id == 7 and info.value.reason == CancelReason.LOST


def test_wait_cancelled_returns_at_once_after_a_cancel_and_times_out_before_one() -> None:
    ctx = _ctx()
    assert ctx.wait_cancelled(0.01) is False
    ctx.cancel(CancelReason.REQUESTED)
    assert ctx.wait_cancelled(0) is True and ctx.wait_cancelled(None) is True


@pytest.mark.parametrize("waiters", [1, 8])
def test_a_cancel_wakes_every_thread_waiting_on_it(waiters: int) -> None:
    ctx = _ctx()
    woke: list[bool] = []
    started = threading.Barrier(waiters + 1)

    def wait() -> None:
        started.wait()
        woke.append(ctx.wait_cancelled(30))

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    for t in threads:
        t.start()
    started.wait()
    assert ctx.cancel(CancelReason.TIMED_OUT)
    for t in threads:
        t.join(30)
    assert woke == [True] * waiters


def test_racing_cancels_from_many_threads_set_exactly_one_reason() -> None:
    for _ in range(50):
        ctx = _ctx()
        wins: list[str] = []
        go = threading.Barrier(4)

        def cancel(reason: str, ctx: JobContext = ctx, wins: list[str] = wins, go: threading.Barrier = go) -> None:
            go.wait()
            if ctx.cancel(reason):
                wins.append(reason)

        reasons = [CancelReason.LOST, CancelReason.REQUESTED, CancelReason.SHUTDOWN, CancelReason.TIMED_OUT]
        threads = [threading.Thread(target=cancel, args=(r,)) for r in reasons]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(wins) == 1 and ctx.cancel_reason == wins[0]
