"""``@app.periodic`` as a user meets it: the task options it takes (as
``@app.task`` does), what a worker does with them, and what one bad schedule
may not do to the others. Real databases (the ``backend`` fixture: SQLite and
PostgreSQL); the store's schedule operations are in test_schedules.py."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from tether import JobContext, Tether
from tether.config import DEFAULT_BACKOFF_BASE
from tether.model import JobState, Outcome
from tether.store import Store
from tether.worker.scheduler import Scheduler

from .test_schedules import GRACE, at, spec

# -- retry policies ------------------------------------------------------------------------


def test_a_callable_retry_backoff_works_for_a_periodic_task_and_every_schedule_fires(
    make_app: Callable[..., Tether],
) -> None:
    app = make_app()

    @app.periodic("* * * * * *", name="flaky", retry_backoff=lambda attempt: 600 + attempt)
    def flaky(ctx: JobContext) -> None:
        raise ValueError("flaky")

    @app.periodic("* * * * * *", name="healthy")
    def healthy(ctx: JobContext) -> None: ...

    # the database holds the default base; the worker runs the task's callable
    assert app.schedule_specs["flaky"].backoff_base == DEFAULT_BACKOFF_BASE
    now = app.store.db_now()
    scheduler = Scheduler(app.store, list(app.schedule_specs.values()), grace=GRACE)
    assert scheduler.run_once(now=now - timedelta(seconds=3)) == []  # the sync: ticks after it are owed
    fired = scheduler.run_once(now=now)
    assert {t.schedule for t in fired} == {"flaky", "healthy"} and all(t.job_id for t in fired)
    ran = app.drain()
    assert {(d.task, d.outcome) for d in ran} == {("flaky", Outcome.FAILED), ("healthy", Outcome.SUCCEEDED)}
    for d in ran:
        if d.task == "flaky":
            job = app.store.get_job(d.job_id)
            assert job is not None and job.state is JobState.QUEUED
            assert job.run_at > now + timedelta(seconds=590), job  # 601 s, not the default's 2 s


def test_a_spec_the_store_refuses_does_not_stop_the_synced_schedules_from_firing(
    store: Store, caplog: pytest.LogCaptureFixture,
) -> None:
    good = spec("s.good")
    store.sync_schedules([good], now=at(0))  # by an earlier deploy
    bad = spec("s.bad", backoff_base=lambda attempt: 1.0)  # not a number: no store can hold it
    scheduler = Scheduler(store, [good, bad], grace=GRACE)
    with caplog.at_level(logging.WARNING, logger="tether.scheduler"):
        assert scheduler.run_once(now=at(0.2)) == []
        [t] = scheduler.run_once(now=at(0.6))
        assert [t.schedule for t in scheduler.run_once(now=at(1.6))] == ["s.good"]
    assert t.schedule == "s.good" and t.job_id is not None
    assert not scheduler.synced  # tried again each tick, in case the store was the problem
    warnings = [r.getMessage() for r in caplog.records if r.name == "tether.scheduler"]
    assert len(warnings) == 1 and "'s.bad'" in warnings[0] and "backoff_base" in warnings[0], warnings
