"""``@app.periodic`` as a user meets it: the task options it takes (as
``@app.task`` does), what a worker does with them, and what one bad schedule
may not do to the others. Real databases (the ``backend`` fixture: SQLite and
PostgreSQL); the store's schedule operations are in test_schedules.py."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from tether import JobContext, Tether
from tether.config import DEFAULT_BACKOFF_BASE
from tether.errors import ConfigError
from tether.model import JobState, NewJob, Outcome
from tether.store import Store, open_store
from tether.worker.scheduler import Scheduler

from .conftest import served
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


# -- @app.task's options, and @app.periodic over @app.task -------------------------------------


def test_periodic_takes_every_option_of_app_task(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'unused.db'}")

    def backoff(attempt: int) -> float:
        return 5.0 * attempt

    given = {"queue": "reports", "priority": 7, "max_attempts": 9, "lease_ttl": 45.0, "timeout": 30.0,
             "retry_backoff": backoff, "retry_on": ValueError, "tags": ["nightly"], "isolation": "process"}
    # (limit_key: refused for a schedule, test_periodic_refuses_a_limit_key)
    task_options = [p.name for p in inspect.signature(app.task).parameters.values()
                    if p.kind is p.KEYWORD_ONLY and p.name not in ("name", "limit_key")]
    assert sorted(given) == sorted(task_options)  # every one of them, so that none is left out below

    @app.task(name="plain", **given)
    def plain(ctx: JobContext) -> None: ...

    @app.periodic("* * * * *", name="scheduled", **given)
    def scheduled(ctx: JobContext) -> None: ...

    assert scheduled.options == plain.options and scheduled.options.retry_on == (ValueError,)
    assert scheduled.options.tags == ("nightly",) and scheduled.isolation == plain.isolation == "process"
    s = app.schedule_specs["scheduled"]
    assert (s.queue, s.priority, s.max_attempts, s.lease_ttl, s.timeout, s.backoff_base) == (
        "reports", 7, 9, 45.0, 30.0, DEFAULT_BACKOFF_BASE)


def test_periodic_refuses_a_limit_key(tmp_path: Path) -> None:
    """The database fires a schedule's jobs, and they carry no limit key: a
    schedule of a task with one would run unlimited, so it is refused, both
    ways of declaring it, and nothing is registered."""
    app = Tether(f"sqlite:///{tmp_path / 'unused.db'}")
    with pytest.raises(ConfigError, match="limit_key would not reach"):
        @app.periodic("* * * * *", name="limited", limit_key="shop:1")  # type: ignore[call-arg]
        def limited(ctx: JobContext) -> None: ...

    @app.task(name="keyed", limit_key=lambda **_: "shop:2")
    def keyed(ctx: JobContext) -> None: ...

    with pytest.raises(ConfigError, match="limit_key would not reach"):
        app.periodic("* * * * *")(keyed)
    assert "limited" not in app.tasks and not app.schedule_specs


def test_periodic_over_task_schedules_that_task_with_its_options(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'unused.db'}")

    @app.periodic("0 3 * * *", timezone="Europe/Paris", args={"kind": "full"})
    @app.task(name="reports.nightly", queue="reports", max_attempts=5, retry_on=ValueError)
    def nightly(ctx: JobContext, kind: str) -> None: ...

    @app.periodic("*/5 * * * *")
    @app.task
    def sweep(ctx: JobContext) -> None: ...

    assert app.get_task("reports.nightly") is nightly and nightly.fn.__name__ == "nightly"
    assert sorted(app.tasks) == sorted(app.schedule_specs) == sorted(["reports.nightly", sweep.name])
    assert sweep.name.endswith(".sweep") and sweep.fn.__name__ == "sweep"
    assert nightly.options.retry_on == (ValueError,)
    s = app.schedule_specs["reports.nightly"]
    assert (s.cron, s.timezone, s.args_json, s.queue, s.max_attempts) == (
        "0 3 * * *", "Europe/Paris", '{"kind":"full"}', "reports", 5)


def test_stacking_that_would_not_do_what_it_says_is_refused_saying_how(tmp_path: Path) -> None:
    app, other = Tether(f"sqlite:///{tmp_path / 'unused.db'}"), Tether(f"sqlite:///{tmp_path / 'unused.db'}")

    @app.task(name="t.plain")
    def plain(ctx: JobContext) -> None: ...

    @other.task(name="t.elsewhere")
    def elsewhere(ctx: JobContext) -> None: ...

    @app.periodic("* * * * *", name="t.scheduled")
    def scheduled(ctx: JobContext) -> None: ...

    refused: list[tuple[Callable[[], object], str]] = [
        (lambda: app.periodic("* * * * *", queue="q")(plain), "give them to @app.task"),
        (lambda: app.periodic("* * * * *", name="t.other")(plain), "name"),
        (lambda: app.periodic("* * * * *")(elsewhere), "another app"),
        (lambda: app.periodic("*/2 * * * *")(scheduled), "already scheduled"),
        (lambda: app.task(plain), "put @app.periodic"),
        (lambda: app.task(name="t.again")(scheduled), "put @app.periodic"),
    ]
    for call, message in refused:
        with pytest.raises(ConfigError, match=message):
            call()
    assert sorted(app.tasks) == ["t.plain", "t.scheduled"] and list(app.schedule_specs) == ["t.scheduled"]
    assert app.schedule_specs["t.scheduled"].cron == "* * * * *"


# -- a worker of an app without schedules ------------------------------------------------------


def test_a_worker_whose_app_declares_no_schedule_shows_the_removed_ones_orphaned_and_fires_none(
    make_app: Callable[..., Tether],
) -> None:
    before = make_app()

    @before.periodic("* * * * * *", name="s.removed")
    def removed(ctx: JobContext) -> None: ...

    Scheduler(before.store, list(before.schedule_specs.values()), grace=GRACE).run_once(
        now=before.store.db_now() - timedelta(minutes=5))  # synced by the last deploy's workers, then all stopped
    after = make_app()  # the deploy that removed the app's last schedule

    @after.task(name="t.plain")
    def plain(ctx: JobContext) -> None: ...

    w = after.worker()  # its scheduler fires dynamic schedules of t.plain only, and syncs nothing
    assert w.scheduler is not None and w.scheduler.names == [] and w.scheduler.tasks == ["t.plain"]
    assert after.drain() == []  # a real (burst) worker: it starts, finds nothing due, stops
    [gone] = after.schedules()
    assert gone.name == "s.removed" and gone.orphaned
    assert gone.last_tick is None and after.store.list_jobs(task="s.removed") == []  # nothing fired


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_remote_worker_that_may_not_write_schedules_still_starts(db_url: str) -> None:
    worker_token = "w-" + "x" * 30
    with served(db_url, tokens=f"{worker_token} worker") as url:
        app = Tether(url, token=worker_token)
        try:

            @app.task(name="t.plain")
            def plain(ctx: JobContext) -> None: ...

            with contextlib.closing(open_store(db_url)) as local:  # a worker token may not enqueue
                local.enqueue([NewJob(task="t.plain", args_json="{}")])
            assert [d.outcome for d in app.drain()] == [Outcome.SUCCEEDED]
        finally:
            app.close()
