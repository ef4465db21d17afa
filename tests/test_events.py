"""Lifecycle events on both backends: each fires once, with the right fields,
from a real worker; a failing hook is logged and breaks nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from tether import ConfigError, JobContext, JobState, Outcome, Tether
from tether.events import EVENT_NAMES, Event
from tether.worker.heartbeat import Heartbeater
from tether.worker.inflight import InFlight
from tether.worker.reaper import Reaper

from .conftest import take_from
from .test_worker import FAST, is_final, running, wait_job


class Recorder:
    def __init__(self, app: Tether) -> None:
        self.events: list[Event] = []
        app.on("*")(self.events.append)

    def named(self, name: str, job_id: int | None = None) -> list[Event]:
        return [e for e in self.events if e.name == name and (job_id is None or e.job_id == job_id)]

    def names(self, job_id: int) -> list[str]:
        return [e.name for e in self.events if e.job_id == job_id]

    def wait_for(self, name: str, job_id: int | None = None, timeout: float = 10) -> Event:
        deadline = time.monotonic() + timeout
        while not self.named(name, job_id):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {name} for job {job_id} in {timeout}s; saw {[e.name for e in self.events]}")
            time.sleep(0.02)
        return self.named(name, job_id)[0]


def test_success_fires_enqueued_started_succeeded_once(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    rec = Recorder(app)

    @app.task(name="add", queue="maths")
    def add(ctx: JobContext, a: int, b: int) -> int:
        return a + b

    jid = add.enqueue(a=1, b=2)
    enq = rec.named("job.enqueued", jid)
    assert len(enq) == 1
    assert (enq[0].task, enq[0].queue, enq[0].state) == ("add", "maths", JobState.QUEUED)
    with running(app) as w:
        wait_job(app, jid, is_final)
        done = rec.wait_for("job.succeeded", jid)
    assert rec.names(jid) == ["job.enqueued", "job.started", "job.succeeded"]
    started = rec.named("job.started", jid)[0]
    assert (started.attempt, started.task, started.queue, started.worker) == (1, "add", "maths", w.id)
    assert started.queue_wait is not None and started.queue_wait >= 0
    assert (done.attempt, done.worker, done.state, done.outcome) == (1, w.id, JobState.SUCCEEDED, Outcome.SUCCEEDED)
    assert done.duration is not None and done.duration >= 0


def test_failures_fire_failed_then_retried_then_dead(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    rec = Recorder(app)

    @app.task(name="boom", max_attempts=2, retry_backoff=0)
    def boom(ctx: JobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt} broke")

    jid = boom.enqueue()
    with running(app) as w:
        wait_job(app, jid, is_final)
        rec.wait_for("job.dead", jid)
    assert rec.names(jid) == ["job.enqueued", "job.started", "job.failed", "job.retried",
                              "job.started", "job.failed", "job.dead"]
    failed = rec.named("job.failed", jid)
    assert [(e.attempt, e.outcome, e.error) for e in failed] == [
        (1, Outcome.FAILED, "ValueError: attempt 1 broke"), (2, Outcome.FAILED, "ValueError: attempt 2 broke")]
    assert [e.state for e in failed] == [JobState.QUEUED, JobState.DEAD]
    dead = rec.named("job.dead", jid)[0]
    assert (dead.attempt, dead.worker, dead.task, dead.state) == (2, w.id, "boom", JobState.DEAD)


def test_cancel_queued_and_running_fire_cancelled_once(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    rec = Recorder(app)
    started = threading.Event()

    @app.task(name="waits")
    def waits(ctx: JobContext) -> None:
        started.set()
        ctx.wait_cancelled(30)
        ctx.raise_if_cancelled()

    queued = waits.using(delay=3600).enqueue()
    assert app.cancel(queued) is JobState.CANCELLED
    assert rec.names(queued) == ["job.enqueued", "job.cancelled"]

    jid = waits.enqueue()
    with running(app) as w:
        assert started.wait(10)
        app.cancel(jid)
        wait_job(app, jid, is_final)
        ev = rec.wait_for("job.cancelled", jid)
    assert rec.names(jid) == ["job.enqueued", "job.started", "job.cancelled"]
    assert (ev.attempt, ev.worker, ev.outcome, ev.state) == (1, w.id, Outcome.CANCELLED, JobState.CANCELLED)


def test_recovered_names_the_dead_worker_then_retried(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    rec = Recorder(app)

    @app.task(name="t")
    def t(ctx: JobContext) -> None:
        pass

    jid = t.enqueue()
    [claimed] = app.store.claim("ghost-worker", ["default"], 60, 30.0)
    app.store.lapse_leases(["ghost-worker"])  # as reconciliation does for a worker that provably died
    reaped = Reaper(app.store, events=app.events).run_once()
    assert [r.id for r in reaped] == [jid]
    assert rec.names(jid) == ["job.enqueued", "job.recovered", "job.retried"]
    ev = rec.named("job.recovered", jid)[0]
    assert (ev.attempt, ev.worker, ev.outcome, ev.state) == (claimed.attempt, "ghost-worker", Outcome.LEASE_EXPIRED,
                                                             JobState.QUEUED)
    assert ev.error == "worker lease expired (worker ghost-worker)"
    # ... and a real worker's reaper does the same for a job whose budget is spent: recovered, then dead.
    last = t.using(max_attempts=1, queue="other").enqueue()
    app.store.claim("ghost-2", ["other"], 1, 30.0)
    app.store.lapse_leases(["ghost-2"])
    with running(app, queues=["default", "other"]):
        wait_job(app, last, is_final)
        rec.wait_for("job.dead", last)
    assert rec.names(last) == ["job.enqueued", "job.recovered", "job.dead"]
    assert rec.named("job.dead", last)[0].worker == "ghost-2"


def test_lost_fires_when_the_heartbeat_finds_the_job_gone(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    rec = Recorder(app)
    started = threading.Event()

    @app.task(name="slow", max_attempts=1)  # reaped straight to dead, so this worker cannot re-claim it
    def slow(ctx: JobContext) -> None:
        started.set()
        ctx.wait_cancelled(30)

    jid = slow.enqueue()
    with running(app) as w:
        assert started.wait(10)
        take_from(app.store, w.id, jid)  # as if another worker's reaper judged this one dead
        ev = rec.wait_for("job.lost", jid)
    assert (ev.attempt, ev.worker, ev.task) == (1, w.id, "slow")
    assert ev.error is not None and "fence" in ev.error
    assert len(rec.named("job.lost", jid)) == 1


def test_heartbeat_error_fires_with_the_cause(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    rec = Recorder(app)
    hb = Heartbeater(app.store, "w-1", InFlight(), interval=0.3, lease_ttl=1.5,
                     on_lost=lambda r, why: None, on_cancel_requested=lambda r: None, events=app.events)
    hb.run_once()
    assert rec.events == []  # a healthy beat says nothing
    app.store.destroy()  # the database lost tether's tables under a running worker
    hb.run_once()
    [ev] = rec.events
    assert (ev.name, ev.worker) == ("worker.heartbeat_error", "w-1")
    assert ev.error


def test_a_failing_hook_is_logged_and_the_job_still_succeeds(
    make_app: Callable[..., Tether], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(**FAST)
    rec = Recorder(app)

    @app.on("job.started")
    def broken(event: Event) -> None:
        raise RuntimeError("hook bug")

    @app.task(name="ok")
    def ok(ctx: JobContext) -> str:
        return "fine"

    jid = ok.enqueue()
    with caplog.at_level(logging.ERROR, logger="tether.events"), running(app):
        job = wait_job(app, jid, is_final)
        rec.wait_for("job.succeeded", jid)
    assert job.state is JobState.SUCCEEDED and job.result == "fine"
    [record] = [r for r in caplog.records if r.name == "tether.events"]
    assert "broken" in record.getMessage() and "job.started" in record.getMessage()
    assert record.job_id == jid  # type: ignore[attr-defined]
    assert record.exc_info is not None and "hook bug" in str(record.exc_info[1])


def test_subscriptions_switch_emitting_on_and_off(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    assert not app.events.active  # nobody listens: emit sites skip building events
    hook: Callable[[Event], None] = lambda e: None  # noqa: E731
    app.on("job.dead")(hook)
    assert app.events.active and app.events.wants("job.dead") and not app.events.wants("job.started")
    app.events.unsubscribe("job.dead", hook)
    assert not app.events.active
    with pytest.raises(ConfigError, match=r"unknown event 'job\.exploded'"):
        app.on("job.exploded")
    assert set(EVENT_NAMES) >= {"job.enqueued", "job.recovered", "job.lost", "worker.heartbeat_error"}
