"""The worker runtime in-process, on both backends: cancellation, timeouts, bad
jobs, progress, wake-ups, self-fencing and embedded shutdown."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from tether import CancelReason, JobContext, JobState, Outcome, Tether
from tether.chaos.proxy import TCPProxy
from tether.model import Beat, Job, NewJob
from tether.payload import STORED_ERROR_CHARS
from tether.worker.heartbeat import Heartbeater
from tether.worker.inflight import InFlight, Running
from tether.worker.reporter import CARRY_MAX
from tether.worker.runtime import Worker

from .conftest import PG_URL, take_from

FAST = {"lease_ttl": 1.5, "heartbeat_interval": 0.3, "reaper_interval": 0.3}


@contextmanager
def running(app: Tether, **kwargs: Any) -> Iterator[Worker]:
    """A worker on its own thread and event loop; stopped (gracefully) on exit."""
    w = app.worker(**{"concurrency": 4, "shutdown_timeout": 2, **kwargs})
    errors: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(w.run())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    t = threading.Thread(target=main, daemon=True)
    t.start()
    try:
        yield w
    finally:
        w.stop()
        t.join(timeout=20)
        assert not t.is_alive(), "worker did not stop"
        assert not errors, errors


def wait_job(app: Tether, job_id: int, check: Callable[[Job], bool], timeout: float = 10) -> Job:
    deadline = time.monotonic() + timeout
    while True:
        job = app.get_job(job_id)
        assert job is not None
        if check(job):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} did not get there in {timeout}s: {job}")
        time.sleep(0.03)


def is_final(job: Job) -> bool:
    return job.state not in (JobState.QUEUED, JobState.RUNNING)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_args_that_do_not_fit_the_handler_fail_the_attempt_and_the_worker_goes_on(
    make_app: Callable[..., Tether], kind: str,
) -> None:
    """Args enqueued under an older signature (written to the store directly,
    past enqueue's check) fail their attempt with the TypeError; the worker
    keeps claiming."""
    app = make_app(**FAST)

    if kind == "async":
        @app.task(name="add", max_attempts=1)
        async def add(ctx: JobContext, a: int, b: int) -> int:
            return a + b
    else:
        @app.task(name="add", max_attempts=1)
        def add(ctx: JobContext, a: int, b: int) -> int:
            return a + b

    (stale,) = app.store.enqueue([NewJob(task="add", args_json='{"a": 1, "c": 2}', max_attempts=1)])
    good = add.enqueue(a=1, b=2)
    with running(app):
        bad_job = wait_job(app, stale, is_final)
        good_job = wait_job(app, good, is_final)
    assert bad_job.state is JobState.DEAD
    (attempt,) = bad_job.attempts
    assert attempt.outcome is Outcome.FAILED and attempt.error is not None and "TypeError" in attempt.error
    assert good_job.state is JobState.SUCCEEDED and good_job.result == 3


def test_an_async_handlers_failure_is_its_outcome_not_an_unretrieved_task_exception(
    make_app: Callable[..., Tether], caplog: pytest.LogCaptureFixture,
) -> None:
    """An async handler's task reports the outcome itself (Worker._drive): a
    raise is the attempt's failure, and nothing is left on the task for
    asyncio to log as never retrieved once the task is collected."""
    app = make_app(**FAST)

    @app.task(name="boom", max_attempts=1)
    async def boom(ctx: JobContext) -> None:
        raise ValueError("boom")

    @app.task(name="fine")
    async def fine(ctx: JobContext) -> int:
        return 7

    bad, good = boom.enqueue(), fine.enqueue()
    with caplog.at_level(logging.ERROR, logger="asyncio"), running(app):
        bad_job = wait_job(app, bad, is_final)
        good_job = wait_job(app, good, is_final)
    gc.collect()
    assert bad_job.state is JobState.DEAD and bad_job.last_error == "ValueError: boom"
    assert good_job.state is JobState.SUCCEEDED and good_job.result == 7
    assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]


def test_cancel_running_coroutine(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    started = threading.Event()

    @app.task
    async def waits(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    jid = waits.enqueue()
    with running(app):
        assert started.wait(10)
        assert app.cancel(jid) is JobState.RUNNING
        job = wait_job(app, jid, is_final, timeout=5)
    assert job.state is JobState.CANCELLED
    assert job.attempts[-1].outcome is Outcome.CANCELLED


def test_cancel_running_thread_handler_sees_the_flag(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    started = threading.Event()
    seen: list[str | None] = []

    @app.task
    def loops(ctx: JobContext) -> None:
        started.set()
        ctx.wait_cancelled(30)
        seen.append(ctx.cancel_reason)
        ctx.raise_if_cancelled()

    jid = loops.enqueue()
    with running(app):
        assert started.wait(10)
        app.cancel(jid)
        job = wait_job(app, jid, is_final, timeout=5)
    assert job.state is JobState.CANCELLED
    assert seen == [CancelReason.REQUESTED]


def test_attempt_timeout_cancels_and_counts_against_budget(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(timeout=0.5, max_attempts=2, retry_backoff=0)
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(30)

    jid = slow.enqueue()
    with running(app):
        job = wait_job(app, jid, is_final, timeout=10)
    assert job.state is JobState.DEAD
    assert [a.outcome for a in job.attempts] == [Outcome.TIMED_OUT, Outcome.TIMED_OUT]
    assert job.last_error is not None and "timed out" in job.last_error


def test_a_beat_past_the_attempts_deadline_times_the_attempt_out(make_app: Callable[..., Tether]) -> None:
    """The heartbeater is told LOST, not RENEWED, once the database's clock is
    past the attempt's deadline. It was the timeout: the heartbeater tells the
    handler so, as the loop's timer does (whose outcome is then written
    timed_out), instead of judging the attempt lost and leaving the job running
    (it raced that timer: test_testing's timeout test failed one CI run in
    three). Nothing written, the reaper records the attempt timed out."""
    app = make_app(**FAST)
    (jid,) = app.store.enqueue([NewJob(task="t", args_json="{}", timeout=0.2, max_attempts=1)])
    sent = time.monotonic()
    (job,) = app.store.claim("w-1", ["default"], 1, FAST["lease_ttl"])
    inflight = InFlight()
    ctx = JobContext(job, worker_id="w-1", report_progress=lambda job, fraction, message: False)
    inflight.add(Running(job=job, ctx=ctx, local_deadline=sent + 0.2, started=sent, hard_deadline=sent + 0.2))
    lost: list[str] = []
    hb = Heartbeater(app.store, "w-1", inflight, interval=FAST["heartbeat_interval"], lease_ttl=FAST["lease_ttl"],
                     on_lost=lambda running, why: lost.append(why), on_cancel_requested=lambda running: None)
    deadline = job.claimed_at + timedelta(seconds=0.2)
    while app.store.db_now() < deadline:
        time.sleep(0.02)
    assert hb.run_once() == {jid: Beat.LOST}
    assert lost == [] and ctx.cancel_reason == CancelReason.TIMED_OUT
    assert inflight[jid].timing_out
    (r,) = app.store.reap(10)
    assert (r.id, r.outcome, r.state) == (jid, Outcome.TIMED_OUT, JobState.DEAD)


def test_a_job_of_a_task_the_worker_does_not_know_is_left_queued_untouched(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task
    def known(ctx: JobContext) -> None: ...

    other = app.store.enqueue([NewJob(task="nobody.knows", args_json="{}", max_attempts=1)])[0]
    mine = known.enqueue()
    with running(app) as w:
        wait_job(app, mine, is_final)
        time.sleep(0.5)  # more claim rounds
        assert w.state.counts["released_unknown_task"] == 0
    job = app.store.get_job(other)
    assert job is not None and (job.state, job.attempt, job.released) == (JobState.QUEUED, 0, 0), job


def test_a_handler_gone_after_start_releases_its_job_without_spending_the_budget(
    make_app: Callable[..., Tether],
) -> None:
    """The executor's safety net: the claim named a task whose handler is no
    longer registered. The job goes back, budget untouched, and the worker
    stops claiming that task."""
    app = make_app(**FAST)

    @app.task
    def vanishing(ctx: JobContext) -> None: ...

    with running(app) as w:
        deadline = time.monotonic() + 10
        while not any(x.tasks == [vanishing.name] for x in app.store.list_workers(live_only=True)):
            assert time.monotonic() < deadline, "the worker did not register"
            time.sleep(0.02)
        del app.tasks[vanishing.name]
        jid = vanishing.enqueue()
        job = wait_job(app, jid, lambda j: j.released >= 1 and j.state is JobState.QUEUED)
        time.sleep(0.5)  # more claim rounds: it is not taken again
        assert w.state.counts["released_unknown_task"] == 1 and w.state.tasks == []
    job = app.store.get_job(jid)
    assert job is not None and (job.state, job.attempt, job.released) == (JobState.QUEUED, 1, 1), job
    assert [a.outcome for a in job.attempts] == [Outcome.RELEASED]


def test_result_that_is_not_json_ends_dead_with_reason(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task
    def bad(ctx: JobContext) -> object:
        return {"when": object()}

    jid = bad.enqueue()
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.DEAD
    assert job.last_error is not None and "must be JSON" in job.last_error


def test_a_job_whose_args_a_deploy_no_longer_fits_fails_saying_so(make_app: Callable[..., Tether]) -> None:
    """A job enqueued by the previous release (args {"a": 1}) reaching a
    handler that now takes (a, b): its error said only "missing 1 required
    positional argument", as if the handler were broken. It now names the
    misfit and the likely deploy; a handler's own TypeError is left as it is."""
    from tether.errors import ArgsMisfit

    app = make_app(**FAST)

    @app.task(name="sig", max_attempts=1)
    def sig(ctx: JobContext, a: int, b: int) -> int:
        return a + b

    @app.task(name="own", max_attempts=1, retry_on=TypeError)
    def own(ctx: JobContext, a: int) -> int:
        raise TypeError("the handler's own")

    old = app.store.enqueue([NewJob(task="sig", args_json='{"a": 1}', max_attempts=1)])[0]
    mine = own.using(max_attempts=1).enqueue(a=1)
    with running(app):
        misfit, kept = (wait_job(app, j, is_final) for j in (old, mine))
    assert misfit.state is JobState.DEAD and misfit.last_error is not None
    assert misfit.last_error.startswith("ArgsMisfit: args do not fit task 'sig'(ctx:"), misfit.last_error
    assert "missing a required argument: 'b'" in misfit.last_error
    assert "did a deploy change the task's parameters" in misfit.last_error
    assert kept.last_error == "TypeError: the handler's own"
    assert issubclass(ArgsMisfit, TypeError)  # retry_on=TypeError still matches it


def test_a_result_with_a_key_json_would_rename_ends_dead_with_reason(make_app: Callable[..., Tether]) -> None:
    """{1: "a", "1": "b"} would be stored as {"1": "a", "1": "b"} and read back
    as {"1": "b"}: one value lost and the key's type changed, without a word."""
    app = make_app(**FAST)

    @app.task
    def counts(ctx: JobContext) -> object:
        return {"by_id": {1: "a", "1": "b"}}

    jid = counts.enqueue()
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.DEAD and job.result is None
    assert job.last_error is not None and "a dict key must be a string, got int 1" in job.last_error


def test_progress_is_recorded_and_renews_the_lease(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    gate = threading.Event()

    @app.task
    def steps(ctx: JobContext) -> str:
        ctx.progress(0.5, "half way")
        gate.wait(10)
        return "ok"

    jid = steps.enqueue()
    with running(app):
        mid = wait_job(app, jid, lambda j: j.progress == 0.5)
        assert mid.state is JobState.RUNNING and mid.progress_message == "half way"
        gate.set()
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.SUCCEEDED and job.result == "ok"


def test_failures_retry_then_succeed(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    calls: list[int] = []

    @app.task(retry_backoff=0.05, max_attempts=3)
    def flaky(ctx: JobContext) -> int:
        calls.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("downstream hiccup")
        return ctx.attempt

    jid = flaky.enqueue()
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.SUCCEEDED and job.result == 3 and calls == [1, 2, 3]
    assert [a.outcome for a in job.attempts] == [Outcome.FAILED, Outcome.FAILED, Outcome.SUCCEEDED]
    assert job.attempts[0].traceback and "ConnectionError: downstream hiccup" in job.attempts[0].traceback


def test_embedded_worker_cancelled_releases_its_jobs(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    started = threading.Event()

    @app.task(max_attempts=1)
    async def long(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    jid = long.enqueue()
    _stop_worker_once_started(app, started)
    job = app.get_job(jid)
    assert job is not None and job.state is JobState.QUEUED
    assert (job.attempt, job.released) == (1, 1)


def test_a_worker_returns_only_after_a_services_tick_in_flight_has_ended(make_app: Callable[..., Tether]) -> None:
    """A tick still on its database thread when the worker stops is waited
    for: returning at once let the caller close the store under the reaper's
    statement (on SQLite, SIGSEGV in a CI run)."""
    app = make_app(**FAST)
    w = app.worker(concurrency=1, shutdown_timeout=2)
    entered, release = threading.Event(), threading.Event()
    moments: dict[str, float] = {}
    tick = w.reaper.tick

    def slow_tick() -> Any:
        entered.set()
        release.wait(10)
        try:
            return tick()
        finally:
            moments["tick ended"] = time.monotonic()

    w.reaper.tick = slow_tick  # type: ignore[method-assign]
    w.reaper.spread_start = False

    def main() -> None:
        asyncio.run(w.run())
        moments["run returned"] = time.monotonic()

    t = threading.Thread(target=main, daemon=True)
    t.start()
    assert entered.wait(10), "the reaper never ticked"
    w.stop()
    t.join(0.5)
    assert t.is_alive(), "the worker returned while its reaper's tick was still running"
    release.set()
    t.join(10)
    assert not t.is_alive()
    assert moments["run returned"] >= moments["tick ended"]


# LISTEN/NOTIFY and network partitions are PostgreSQL's: these run on it alone.
PG_ONLY = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@PG_ONLY
def test_notify_wakes_an_idle_worker_and_survives_a_dropped_listener(
    backend: str, make_app: Callable[..., Tether]
) -> None:
    app = make_app(**FAST)

    @app.task
    def hello(ctx: JobContext) -> str:
        return "hi"

    def listeners() -> list[int]:
        with psycopg.connect(PG_URL, autocommit=True) as c:
            return [r[0] for r in c.execute(
                "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %%' AND state = 'idle'")]

    with running(app, poll_interval=60) as w:  # polling alone would take a minute
        deadline = time.monotonic() + 10
        while not listeners() and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        jid = hello.enqueue()
        wait_job(app, jid, is_final, timeout=5)
        assert time.monotonic() - t0 < 2, "NOTIFY did not wake the worker"
        with psycopg.connect(PG_URL, autocommit=True) as c:
            for pid in listeners():
                c.execute("SELECT pg_terminate_backend(%s)", (pid,))
        jid2 = hello.enqueue()  # enqueued while the listener is down
        job = wait_job(app, jid2, is_final, timeout=10)
        assert job.state is JobState.SUCCEEDED
        assert w.counts["succeeded"] == 2


@PG_ONLY
def test_worker_fences_itself_when_the_database_goes_silent(
    backend: str, db_url: str, make_app: Callable[..., Tether]
) -> None:
    make_app()  # migrate this test's schema
    parts = urlsplit(db_url)
    proxy = TCPProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        url = db_url.replace(parts.netloc, f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}")
        app = Tether(url, **FAST)
        started = threading.Event()
        reasons: list[tuple[str | None, float]] = []

        @app.task
        def patient(ctx: JobContext) -> None:
            started.set()
            ctx.wait_cancelled(30)
            reasons.append((ctx.cancel_reason, time.monotonic()))

        patient.enqueue()
        with running(app, shutdown_timeout=0):
            assert started.wait(10)
            time.sleep(0.5)  # a renewal or two go through
            cut = time.monotonic()
            proxy.blackhole()  # packets vanish; sockets stay open; calls hang
            deadline = time.monotonic() + FAST["lease_ttl"] + 5
            while not reasons and time.monotonic() < deadline:
                time.sleep(0.05)
            assert reasons, "the handler was never told it lost the job"
            reason, when = reasons[0]
            assert reason == CancelReason.LOST
            assert when - cut <= FAST["lease_ttl"] + 0.5, "fenced too late"
            proxy.reset()  # and the worker must still stop in bounded time, network or not
        app.close()
    finally:
        proxy.close()


def test_a_job_its_own_worker_claims_again_tells_the_old_attempt_it_lost(make_app: Callable[..., Tether]) -> None:
    """Attempt 1's lease lapses and is reaped; the same worker claims the job
    again as attempt 2 before a heartbeat could tell it. The old handler must
    still be told it lost the job, not run on unseen beside its successor."""
    app = make_app(lease_ttl=30, heartbeat_interval=10, reaper_interval=10)  # no beat or reap of its own here
    started = {1: threading.Event(), 2: threading.Event()}
    ended: dict[int, str | None] = {}

    @app.task(retry_backoff=0, max_attempts=3)
    async def holds(ctx: JobContext) -> None:
        started[ctx.attempt].set()
        try:
            await asyncio.sleep(60)
        finally:
            ended[ctx.attempt] = ctx.cancel_reason

    jid = holds.enqueue()
    with running(app, concurrency=2, poll_interval=0.05) as w:
        assert started[1].wait(10)
        take_from(app.store, w.id, jid)  # as if this worker had died
        assert started[2].wait(10), "the worker did not claim the reaped job again"
        deadline = time.monotonic() + 5
        while 1 not in ended and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ended.get(1) == CancelReason.LOST
        assert 2 not in ended  # the successor runs on


def test_large_claims_leave_successes_to_the_reporter_and_each_is_written_once(
    make_app: Callable[..., Tether],
) -> None:
    """A worker whose claims take more than CARRY_MAX jobs writes its
    successes beside its next claim (two statements in flight), not in it."""
    app = make_app(**FAST)

    @app.task
    def quick(ctx: JobContext, n: int) -> int:
        return n * 2

    ids = quick.enqueue_many([{"n": n} for n in range(300)])
    with running(app, concurrency=CARRY_MAX + 8) as w:
        for job_id in ids:
            wait_job(app, job_id, is_final)
    assert w.counts["succeeded"] == 300 and w.counts["stale_reports"] == 0
    assert w.counts["successes_carried"] == 0 and w.counts["db_claims"] > 1
    for n, job_id in enumerate(ids):
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.SUCCEEDED and job.result == n * 2
        assert [a.outcome for a in job.attempts] == [Outcome.SUCCEEDED]


class _AnswerLostOnce:
    """The app's real store, except that the first call of each named method
    (or of its ``_async`` form, whichever the worker calls) is carried out and
    then raises, as when the database commits a write and the connection drops
    before its answer arrives."""

    def __init__(self, real: Any, *names: str) -> None:
        self._real = real
        self._pending = set(names)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        op = name.removesuffix("_async")
        if op not in self._pending:
            return attr
        if inspect.iscoroutinefunction(attr):
            async def once_async(*args: Any, **kwargs: Any) -> Any:
                self._pending.discard(op)
                await attr(*args, **kwargs)
                raise ConnectionError(f"connection lost after {op} was sent")
            return once_async

        def once(*args: Any, **kwargs: Any) -> Any:
            self._pending.discard(op)
            attr(*args, **kwargs)
            raise ConnectionError(f"connection lost after {op} was sent")
        return once


def test_a_report_whose_answer_was_lost_is_not_taken_for_a_refusal(make_app: Callable[..., Tether]) -> None:
    """complete and fail are written, their answers lost, and retried: the
    retry finds the job no longer running. The worker must see in the attempts
    audit that its own first try was recorded, not log a refused report."""
    app = make_app(**FAST)
    app._store = _AnswerLostOnce(app.store, "complete", "fail")  # type: ignore[assignment]

    @app.task
    def ok(ctx: JobContext) -> str:
        return "done"

    @app.task(max_attempts=1)
    def broken(ctx: JobContext) -> None:
        raise ValueError("no")

    good, bad = ok.enqueue(), broken.enqueue()
    with running(app) as w:
        wait_job(app, good, is_final)
        wait_job(app, bad, is_final)
        deadline = time.monotonic() + 5
        while (w.counts["succeeded"] < 1 or w.counts["failed"] < 1) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert w.counts["stale_reports"] == 0
    assert (w.counts["succeeded"], w.counts["failed"]) == (1, 1)
    job = app.get_job(good)
    assert job is not None and job.state is JobState.SUCCEEDED and job.result == "done"
    assert [a.outcome for a in job.attempts] == [Outcome.SUCCEEDED]


def test_successes_ride_with_the_next_claim_and_each_is_written_once(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task
    def quick(ctx: JobContext, n: int) -> int:
        return n * 2

    ids = quick.enqueue_many([{"n": n} for n in range(40)])
    with running(app, concurrency=4) as w:
        for job_id in ids:
            wait_job(app, job_id, is_final)
    assert w.counts["succeeded"] == 40 and w.counts["stale_reports"] == 0
    assert w.counts["successes_carried"] > 0  # complete_and_claim did carry some
    for n, job_id in enumerate(ids):
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.SUCCEEDED and job.result == n * 2
        assert [a.outcome for a in job.attempts] == [Outcome.SUCCEEDED]


def test_a_claim_whose_answer_was_lost_still_reports_the_successes_it_carried(
    make_app: Callable[..., Tether],
) -> None:
    """The first complete_and_claim commits (successes written, new jobs
    leased) and its answer is lost. The carried successes are written again,
    refused, and found in the attempts audit: counted as successes, not as
    refusals. The jobs it claimed were never seen here: their leases lapse and
    the reaper sends them round again (at-least-once)."""
    app = make_app(**FAST)
    app._store = _AnswerLostOnce(app.store, "complete_and_claim")  # type: ignore[assignment]

    @app.task
    def quick(ctx: JobContext, n: int) -> int:
        return n

    ids = quick.enqueue_many([{"n": n} for n in range(12)])
    with running(app, concurrency=4) as w:
        for job_id in ids:
            wait_job(app, job_id, is_final, timeout=20)
        deadline = time.monotonic() + 5
        while w.counts["succeeded"] < 12 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "complete_and_claim" not in app.store._pending  # type: ignore[attr-defined]  # the fault fired
    assert (w.counts["succeeded"], w.counts["stale_reports"]) == (12, 0)
    orphaned = 0
    for job_id in ids:
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.SUCCEEDED
        outcomes = [a.outcome for a in job.attempts]
        assert outcomes[-1] is Outcome.SUCCEEDED and outcomes.count(Outcome.SUCCEEDED) == 1
        orphaned += len(outcomes) > 1
    assert orphaned >= 1  # what the lost answer had claimed ran again after its lease lapsed


def test_the_start_and_stop_lines_say_what_happened_in_words(make_app: Callable[..., Tether], backend: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """The start line names the wake-up actually used (SQLite polls: it has no
    NOTIFY), and the closing line is text, not a Python dict (issue 17)."""
    app = make_app(**FAST)

    @app.task(name="ok")
    def ok(ctx: JobContext) -> None:
        return None

    ids = [ok.enqueue() for _ in range(3)]
    with caplog.at_level(logging.INFO, logger="tether.worker"), running(app, poll_interval=0.05):
        for job_id in ids:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
    lines = [r.getMessage() for r in caplog.records if r.name == "tether.worker"]
    start = next(line for line in lines if " started: " in line)
    stop = next(line for line in lines if " stopped after " in line)
    if backend == "sqlite":
        assert "transport=poll (every 0.05s)" in start and "notify" not in start
    else:
        assert "transport=notify (LISTEN/NOTIFY, and polling every 0.05s)" in start
    assert ": 3 succeeded; " in stop and "{" not in stop and "Counter" not in stop, stop


def test_a_worker_whose_app_declares_a_schedule_fires_and_runs_it(make_app: Callable[..., Tether]) -> None:
    """The runtime starts the scheduler for an app with ``@app.periodic`` (and
    none for an app without): a one-second schedule's jobs run with their tick
    as ``ctx.scheduled_for``, one job per tick."""
    app = make_app(**FAST)
    seen: list[datetime] = []

    @app.periodic("* * * * * *", name="every.second")
    def every_second(ctx: JobContext) -> None:
        assert ctx.scheduled_for is not None
        seen.append(ctx.scheduled_for)

    plain = make_app(**FAST)
    assert plain.worker().scheduler is None
    with running(app) as w:
        assert w.scheduler is not None and w.scheduler in w.services
        deadline = time.monotonic() + 10
        while len(seen) < 3:
            assert time.monotonic() < deadline, f"only {len(seen)} tick(s) ran in 10s"
            time.sleep(0.05)
    assert len(set(seen)) == len(seen), "a tick ran twice"
    assert all(t.tzinfo is not None and t.microsecond == 0 for t in seen)


def _run_app_py(tmp_path: Path, body: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The usual layout: an app module that runs its own worker (`python
    app.py ARGV`), ``body`` after its imports (logging, sys) and ``app =
    Tether(...)`` on a SQLite file in ``tmp_path``."""
    app_py = tmp_path / "app.py"
    app_py.write_text("import logging, sys\nfrom tether import Tether\n"
                      f"app = Tether('sqlite:///{tmp_path / 't.db'}')\n" + body)
    return subprocess.run([sys.executable, str(app_py), *argv], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)


def test_app_run_worker_logs_as_tether_worker_does_when_the_process_configured_no_logging(tmp_path: Path) -> None:
    """The usual layout: `python app.py`, ending in app.run_worker(). With no
    logging set up, the worker said nothing at start and a bare "SIGTERM: no
    new claims" with no time; now it writes `tether worker`'s log. A process
    that configured logging keeps its own."""
    body = ("@app.task()\n"
            "def hello(ctx): return 'hi'\n"
            "if __name__ == '__main__':\n"
            "    if sys.argv[1:] == ['own']:\n"
            "        logging.basicConfig(level=logging.WARNING, format='OWN %(message)s')\n"
            "    app.migrate(); hello.enqueue()\n"
            "    app.run_worker(burst=True)\n")
    plain = _run_app_py(tmp_path, body)
    assert plain.returncode == 0, plain.stderr
    assert " INFO    tether.worker[" in plain.stderr and "started: queues=default" in plain.stderr
    assert "stopped after" in plain.stderr and "1 succeeded" in plain.stderr
    own = _run_app_py(tmp_path, body, "own")
    assert own.returncode == 0 and "started: queues" not in own.stderr, own.stderr


def test_a_long_error_is_cut_on_the_job_and_shortened_in_the_log(
    make_app: Callable[..., Tether], caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that raised with 50,000 characters of text wrote them all
    into one log line (2 MB in a user's walkthrough). The job keeps the text
    up to its own cap (``STORED_ERROR_CHARS``: every attempt keeps a row, and
    300 attempts of 100,000 characters made one job weigh 60 MB), cut in the
    middle so that its head and tail survive; the log line says where to read it."""
    app = make_app()

    @app.task(name="loud", max_attempts=1)
    def loud(ctx: JobContext) -> None:
        raise ValueError("head " + "e" * 50_000 + " tail")

    job_id = loud.enqueue()
    with caplog.at_level(logging.INFO, logger="tether"):
        [ran] = app.drain()
    assert ran.job_id == job_id and ran.error is not None
    assert len(ran.error) <= STORED_ERROR_CHARS and ran.error.startswith("ValueError: head")
    assert ran.error.endswith(" tail")
    [line] = [r.getMessage() for r in caplog.records if f"job {job_id} attempt 1 failed" in r.getMessage()]
    assert len(line) < 3000 and f"`tether job {job_id}`" in line


def test_a_workers_log_shows_control_characters_in_job_text_as_escapes(tmp_path: Path) -> None:
    """A handler's error is database text, often with the job's input in it,
    and the worker's log line wrote it raw: an ESC sequence reached the
    reader's terminal, and a newline forged a log line no worker wrote. Now
    tether's own lines show them as escapes; the app's own log lines are
    written as they come, tracebacks keep their newlines."""
    run = _run_app_py(tmp_path, (
        "@app.task(max_attempts=1)\n"
        "def parse(ctx, text):\n"
        "    logging.getLogger('myapp').warning('own line one\\nown line two')\n"
        "    raise ValueError(f'cannot parse {text}')\n"
        "if __name__ == '__main__':\n"
        "    app.migrate(); parse.enqueue(text='x\\x1b]0;pwned\\x07\\x1b[2J\\n2026-01-01 INFO tether.worker: FORGED')\n"
        "    app.run_worker(burst=True)\n"))
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stderr and "\x07" not in run.stderr, run.stderr
    [line] = [ln for ln in run.stderr.splitlines() if "cannot parse" in ln]
    assert " tether.worker[" in line and "\\x1b[2J\\x0a2026-01-01 INFO tether.worker: FORGED" in line, line
    assert not any(ln.startswith("2026-01-01") for ln in run.stderr.splitlines())
    assert "own line one\nown line two" in run.stderr  # not tether's to reshape


def test_a_release_that_ends_the_job_cancelled_fires_job_cancelled(make_app: Callable[..., Tether]) -> None:
    """A worker stopping hands its running job back; when a cancel was asked
    for it meanwhile (and not yet seen by the worker), the release ends the job
    cancelled, and the worker's app says so with ``job.cancelled``, as
    ``app.cancel`` promises (the release used to end it silently)."""
    app = make_app(lease_ttl=60, heartbeat_interval=10, reaper_interval=10)
    started = threading.Event()
    seen: list[tuple[str, int]] = []
    app.on("job.cancelled")(lambda e: seen.append((e.name, e.job_id)))

    @app.task(max_attempts=1)
    async def long(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    jid = long.enqueue()
    _stop_worker_once_started(app, started, lambda: app.cancel(jid))
    job = app.get_job(jid)
    assert job is not None and job.state is JobState.CANCELLED
    assert seen == [("job.cancelled", jid)]


def _stop_worker_once_started(app: Tether, started: threading.Event, before: Callable[[], object] = lambda: None) -> None:
    """Run an embedded worker until ``started`` is set, call ``before``, then
    cancel it (a shutdown that hands running jobs back)."""

    async def main() -> None:
        task = asyncio.create_task(app.run_worker_async(concurrency=2, shutdown_timeout=30))
        while not started.is_set():
            await asyncio.sleep(0.02)
        before()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
