"""Schedules (I6): each tick of a schedule becomes at most one job, decided by
the database, on every backend.

Nothing sleeps: the clock is the ``now`` passed to the store's schedule
operations and to ``Scheduler.run_once`` (the database clock in production),
so "every worker was down for an hour" is a clock we move. Two schedulers on
one store stand for two workers: each call runs on its own thread, with its
own connection.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from tether import JobContext, Tether
from tether.cli.main import cli
from tether.cron import parse_cron
from tether.errors import AccessDenied, ConfigError
from tether.model import ClaimedJob, FiredTick, JobState, NewJob, Outcome, ScheduleInfo, ScheduleSpec
from tether.store import Store, open_store
from tether.worker.scheduler import Scheduler

from .conftest import STORE_BACKENDS, backend_param, served

T0 = datetime(2031, 1, 6, 12, 0, 30, tzinfo=UTC)  # a Monday, half a minute past noon
GRACE = 10.0
PARIS = ZoneInfo("Europe/Paris")


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def spec(name: str = "s.every_minute", cron: str = "* * * * *", **kw: object) -> ScheduleSpec:
    fields: dict[str, object] = {"timezone": "UTC", "args_json": "{}", "queue": "default", "catch_up": 1,
                                 "overlap": True, **kw}
    return ScheduleSpec(name=name, cron=cron, **fields)  # type: ignore[arg-type]


def at(minutes: float = 0, *, base: datetime = T0) -> datetime:
    return base + timedelta(minutes=minutes)


def minute(m: int, *, base: datetime = T0) -> datetime:
    """The minute tick ``m`` minutes after T0's minute (T0 is 30 s past it)."""
    return base.replace(second=0) + timedelta(minutes=m)


def fire(store: Store, *specs: ScheduleSpec, now: datetime, grace: float = GRACE) -> list[FiredTick]:
    return store.fire_schedules([s.name for s in specs], grace=grace, now=now)


def jobs_of(store: Store, name: str, now: datetime) -> list[ClaimedJob]:
    """Every queued job of the schedule, claimed (so each appears once), oldest tick first."""
    claimed = store.claim("w-check", ["default", "reports"], 1000, 30.0, now=now + timedelta(days=400))
    return sorted((c for c in claimed if c.task == name), key=lambda c: c.scheduled_for or T0)


def info(store: Store, name: str) -> ScheduleInfo:
    [found] = [s for s in store.list_schedules(now=T0) if s.name == name]
    return found


# -- exactly once ------------------------------------------------------------------------


def test_a_due_tick_becomes_one_job_carrying_its_tick(store: Store) -> None:
    s = spec(args_json='{"kind": "full"}')
    store.sync_schedules([s], now=T0)
    assert fire(store, s, now=at(0.2)) == []  # nothing due before the first tick after the sync
    [t] = fire(store, s, now=at(0.6))
    assert t.schedule == s.name and t.tick == minute(1) and t.job_id is not None and t.queue == "default"
    assert fire(store, s, now=at(0.7)) == []  # decided: never again
    [job] = jobs_of(store, s.name, at(1))
    assert (job.id, job.args, job.scheduled_for, job.run_at) == (t.job_id, {"kind": "full"}, minute(1), minute(1))
    assert job.scheduled_for is not None and job.scheduled_for.utcoffset() == timedelta(0)
    got = info(store, s.name)
    assert (got.last_tick, got.last_fired, got.last_job_id, got.skipped) == (minute(1), minute(1), t.job_id, 0)
    record = store.get_job(job.id)
    assert record is not None and (record.schedule, record.scheduled_for) == (s.name, minute(1))
    assert [(j.schedule, j.scheduled_for) for j in store.list_jobs(task=s.name)] == [(s.name, minute(1))]


def test_an_ordinary_job_has_no_scheduled_for(store: Store) -> None:
    (job_id,) = store.enqueue([NewJob(task="plain", args_json="{}")])
    [c] = store.claim("w", ["default"], 10, 30.0)
    assert c.id == job_id and c.scheduled_for is None
    job = store.get_job(job_id)
    assert job is not None and job.schedule is None and job.scheduled_for is None


def test_two_workers_firing_the_same_tick_make_one_job(store: Store) -> None:
    s = spec()
    a, b = Scheduler(store, [s], grace=GRACE), Scheduler(store, [s], grace=GRACE)
    a.run_once(now=T0)
    b.run_once(now=T0)

    def go(sched: Scheduler, barrier: threading.Barrier, now: datetime) -> list[FiredTick]:
        barrier.wait(timeout=10)
        return sched.run_once(now=now)

    for step in range(1, 6):  # five ticks, both workers racing on each
        barrier, now = threading.Barrier(2), at(step + 0.01)
        with ThreadPoolExecutor(2) as pool:
            results = [f.result(timeout=30) for f in [pool.submit(go, x, barrier, now) for x in (a, b)]]
        decided = [t for r in results for t in r]
        assert [t.tick for t in decided] == [minute(step)], results
    jobs = jobs_of(store, s.name, at(10))
    assert [j.scheduled_for for j in jobs] == [minute(m) for m in range(1, 6)]
    assert a.fired + b.fired == 5


# -- catch-up ------------------------------------------------------------------------------


@pytest.mark.parametrize(("catch_up", "expected"), [(0, []), (1, [59]), (3, [57, 58, 59])])
def test_after_every_worker_was_down_catch_up_fires_the_most_recent_missed_ticks(
    store: Store, catch_up: int, expected: list[int]
) -> None:
    s = spec(catch_up=catch_up)
    store.sync_schedules([s], now=T0)
    assert [t.tick for t in fire(store, s, now=at(0.6))] == [minute(1)]
    # Every worker down from 12:01 to 13:00:05: ticks 12:02 .. 13:00 are due.
    # 13:00 is on time (within grace); the rest were missed.
    decided = fire(store, s, now=minute(60) + timedelta(seconds=5))
    assert [t.tick for t in decided] == [minute(m) for m in [*expected, 60]]
    assert all(t.job_id is not None for t in decided)
    assert fire(store, s, now=at(60)) == []  # the rest are not owed later either


def test_a_one_second_schedule_down_for_a_day_fires_no_storm(store: Store) -> None:
    s = spec("s.every_second", "* * * * * *")
    store.sync_schedules([s], now=T0)
    decided = fire(store, s, now=T0 + timedelta(days=1, milliseconds=500))
    # the on-time ticks of the last `grace` seconds, plus the one most recent missed
    assert len(decided) == GRACE + 1
    assert decided[-1].tick == T0 + timedelta(days=1)


def test_ticks_within_grace_fire_even_with_catch_up_zero(store: Store) -> None:
    s = spec(catch_up=0)
    store.sync_schedules([s], now=T0)
    assert [t.tick for t in fire(store, s, now=minute(1) + timedelta(seconds=GRACE - 0.5))] == [minute(1)]
    assert fire(store, s, now=minute(2) + timedelta(seconds=GRACE)) == []  # grace old: missed, none caught up


# -- deploys: changed and removed schedules ---------------------------------------------------


def test_a_changed_cron_takes_effect_at_its_next_tick_without_firing_its_past_ones(store: Store) -> None:
    old = spec("s.report", "0 * * * *")  # hourly
    store.sync_schedules([old], now=T0)
    [t13] = fire(store, old, now=at(60))
    assert t13.tick == minute(60)
    # At 13:20:30 a deploy changes it to minute 10 of the hour: 13:10 (in the
    # past, after the last tick) is not owed; 14:10 is the next.
    new = spec("s.report", "10 * * * *")
    store.sync_schedules([new], now=at(80))
    assert info(store, "s.report").cron == "10 * * * *"
    assert fire(store, new, now=at(80.1)) == []
    assert fire(store, new, now=at(120)) == []  # 14:00:30: the old expression's tick is gone too
    [t14] = fire(store, new, now=at(130))
    assert t14.tick == minute(130)
    assert [j.scheduled_for for j in jobs_of(store, "s.report", at(131))] == [minute(60), minute(130)]


def test_changed_args_apply_from_the_next_tick_and_the_current_tick_is_not_fired_again(store: Store) -> None:
    s1 = spec(args_json='{"v": 1}')
    store.sync_schedules([s1], now=T0)
    [t1] = fire(store, s1, now=at(0.6))
    s2 = spec(args_json='{"v": 2}')
    store.sync_schedules([s2], now=at(0.7))  # same tick set: since stays, the decided tick stays decided
    assert fire(store, s2, now=at(0.8)) == []
    [t2] = fire(store, s2, now=at(1.6))
    assert (t1.tick, t2.tick) == (minute(1), minute(2))
    assert [j.args for j in jobs_of(store, s1.name, at(2))] == [{"v": 1}, {"v": 2}]


def test_a_schedule_removed_from_the_code_is_shown_orphaned_and_stops_firing(store: Store) -> None:
    keep, gone = spec("s.keep"), spec("s.gone")
    old_worker = Scheduler(store, [keep, gone], grace=GRACE)
    old_worker.run_once(now=T0)
    assert {t.schedule for t in old_worker.run_once(now=at(0.6))} == {"s.keep", "s.gone"}
    new_worker = Scheduler(store, [keep], grace=GRACE)
    assert [t.schedule for t in new_worker.run_once(now=at(1.6))] == ["s.keep"]
    assert [t.schedule for t in new_worker.run_once(now=at(2.6))] == ["s.keep"]
    orphan = info(store, "s.gone")
    assert orphan.orphaned and orphan.last_fired == minute(1) and orphan.last_job_id is not None
    assert not info(store, "s.keep").orphaned
    # declared again (a rollback): no longer orphaned, and the gap is not a storm
    Scheduler(store, [keep, gone], grace=GRACE).run_once(now=at(3.6))
    assert not info(store, "s.gone").orphaned


def test_a_sync_with_a_bad_expression_or_zone_is_refused_quoting_it(store: Store) -> None:
    with pytest.raises(ConfigError, match=re.escape("'61 * * * *'")):
        store.sync_schedules([spec(cron="61 * * * *")], now=T0)
    with pytest.raises(ConfigError, match=re.escape("'Mars/Olympus'")):
        store.sync_schedules([spec(timezone="Mars/Olympus")], now=T0)
    assert store.list_schedules(now=T0) == []


def test_a_sync_without_schedules_orphans_every_one_and_deletes_none(store: Store) -> None:
    store.sync_schedules([spec("s.a"), spec("s.b", lease_ttl=5.0, timeout=60.0)], now=T0)
    store.sync_schedules([], now=at(1))
    assert [(s.name, s.orphaned) for s in store.list_schedules(now=at(1))] == [("s.a", True), ("s.b", True)]


# -- time zones and DST ----------------------------------------------------------------------


def _fire_through(store: Store, s: ScheduleSpec, start: datetime, hours: int) -> list[datetime]:
    """Fire every 5 minutes through ``hours`` (grace 10 min, so nothing is missed)."""
    store.sync_schedules([s], now=start)
    out: list[datetime] = []
    for step in range(hours * 12 + 1):
        out += [t.tick for t in fire(store, s, now=start + timedelta(minutes=5 * step), grace=600)]
    return out


def test_a_0230_paris_job_on_the_spring_forward_day_fires_once_just_after_the_gap(store: Store) -> None:
    # 2031-03-30: clocks go from 02:00 to 03:00 in Paris; 02:30 does not exist.
    s = spec("s.paris", "30 2 * * *", timezone="Europe/Paris")
    ticks = _fire_through(store, s, datetime(2031, 3, 28, 22, 0, tzinfo=UTC), 72)
    local = [t.astimezone(PARIS) for t in ticks]
    assert [(d.day, d.hour, d.minute) for d in local] == [(29, 2, 30), (30, 3, 0), (31, 2, 30)]
    assert ticks[1] == datetime(2031, 3, 30, 1, 0, tzinfo=UTC)
    assert len(jobs_of(store, s.name, ticks[-1])) == 3


def test_a_0230_paris_job_on_the_fall_back_day_fires_once(store: Store) -> None:
    # 2031-10-26: clocks go from 03:00 back to 02:00 in Paris; 02:30 happens twice.
    s = spec("s.paris", "30 2 * * *", timezone="Europe/Paris")
    ticks = _fire_through(store, s, datetime(2031, 10, 24, 22, 0, tzinfo=UTC), 72)
    local = [t.astimezone(PARIS) for t in ticks]
    assert [(d.day, d.hour, d.minute) for d in local] == [(25, 2, 30), (26, 2, 30), (27, 2, 30)]
    assert ticks[1] == datetime(2031, 10, 26, 0, 30, tzinfo=UTC)  # the first 02:30 (CEST), not the second
    assert len(jobs_of(store, s.name, ticks[-1])) == 3


# -- overlap=False --------------------------------------------------------------------------


def test_overlap_false_skips_a_tick_while_the_previous_job_is_active_and_records_it(store: Store) -> None:
    s = spec(overlap=False)
    store.sync_schedules([s], now=T0)
    [t1] = fire(store, s, now=at(0.6))
    [skipped] = fire(store, s, now=at(1.6))  # t1's job is still queued
    assert skipped.tick == minute(2) and skipped.job_id is None
    [c] = store.claim("w", ["default"], 10, 30.0, now=at(1.7))
    assert c.id == t1.job_id
    [skipped] = fire(store, s, now=at(2.6))  # ... and now running
    assert skipped.tick == minute(3) and skipped.job_id is None
    got = info(store, s.name)
    assert (got.last_tick, got.last_fired, got.last_job_id, got.skipped) == (minute(3), minute(1), t1.job_id, 2)
    assert store.complete("w", [(c.id, c.attempt, None)], now=at(2.7)) == {c.id}
    [t4] = fire(store, s, now=at(3.6))  # finished: the next tick fires
    assert t4.tick == minute(4) and t4.job_id is not None
    assert fire(store, s, now=at(3.7)) == []  # a skipped or fired tick is decided for good


def test_overlap_false_catching_up_makes_one_job_and_skips_the_rest(store: Store) -> None:
    s = spec(overlap=False, catch_up=3)
    store.sync_schedules([s], now=T0)
    decided = fire(store, s, now=minute(10) + timedelta(seconds=5))
    assert [t.tick for t in decided] == [minute(m) for m in (7, 8, 9, 10)]
    assert [t.job_id is not None for t in decided] == [True, False, False, False]


def test_overlap_true_fires_while_the_previous_job_runs(store: Store) -> None:
    s = spec()
    store.sync_schedules([s], now=T0)
    fire(store, s, now=at(0.6))
    store.claim("w", ["default"], 10, 30.0, now=at(0.7))
    [t2] = fire(store, s, now=at(1.6))
    assert t2.job_id is not None


# -- a fired job is an ordinary job -------------------------------------------------------------


def test_a_fired_job_keeps_its_tick_through_retries(store: Store) -> None:
    s = spec(max_attempts=2)
    store.sync_schedules([s], now=T0)
    [t] = fire(store, s, now=at(0.6))
    [c] = store.claim("w", ["default"], 10, 30.0, now=at(0.7))
    assert store.fail("w", c.id, c.attempt, outcome=Outcome.FAILED, error="x", now=at(0.8)) is JobState.QUEUED
    [again] = store.claim("w", ["default"], 10, 30.0, now=at(5))
    assert (again.id, again.attempt, again.scheduled_for) == (t.job_id, 2, minute(1))


def test_list_schedules_reports_the_next_tick_in_the_schedule_zone(store: Store) -> None:
    s = spec("s.nightly", "0 3 * * *", timezone="Europe/Paris", queue="reports", args_json='{"kind": "full"}',
             catch_up=2, overlap=False)
    store.sync_schedules([s], now=T0)
    [got] = store.list_schedules(now=T0)
    assert (got.name, got.cron, got.timezone, got.queue, got.args, got.catch_up, got.overlap) == (
        "s.nightly", "0 3 * * *", "Europe/Paris", "reports", {"kind": "full"}, 2, False)
    assert got.next_tick == datetime(2031, 1, 7, 2, 0, tzinfo=UTC)  # 03:00 CET
    assert got.last_tick is None and got.last_job_id is None and not got.orphaned



# -- the app: @app.periodic, app.schedules(), ctx.scheduled_for --------------------------------


def test_app_periodic_registers_a_task_and_a_schedule_and_lists_it(make_app: Callable[..., Tether]) -> None:
    app = make_app()

    @app.periodic("*/5 * * * *")
    def sweep(ctx: JobContext) -> None: ...

    @app.periodic("0 3 * * *", name="reports.nightly", timezone="Europe/Paris", args={"kind": "full"},
                  queue="reports", catch_up=2, overlap=False)
    async def nightly(ctx: JobContext, kind: str) -> None: ...

    default_name = f"{sweep.fn.__module__}.{sweep.fn.__qualname__}"
    assert sweep.name == default_name and app.get_task(default_name) is sweep
    assert app.get_task("reports.nightly") is nightly and nightly.options.queue == "reports"
    assert set(app.schedule_specs) == {default_name, "reports.nightly"}
    listed = {s.name: s for s in app.schedules()}  # declared, not yet synced by any worker
    assert listed["reports.nightly"].last_fired is None and listed["reports.nightly"].next_tick is not None
    Scheduler(app.store, list(app.schedule_specs.values())).run_once()
    listed = {s.name: s for s in app.schedules()}
    got = listed["reports.nightly"]
    assert (got.cron, got.timezone, got.args, got.queue, got.catch_up, got.overlap) == (
        "0 3 * * *", "Europe/Paris", {"kind": "full"}, "reports", 2, False)
    assert got.since is not None and got.next_tick is not None
    assert got.next_tick.astimezone(PARIS).hour == 3


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cron": "61 * * * *"}, "'61 * * * *'"),
    ({"cron": "* * *"}, "'* * *'"),
    ({"cron": "@fortnightly"}, "'@fortnightly'"),
    ({"cron": "0 3 * * *", "timezone": "Europe/Pariss"}, "'Europe/Pariss'"),
    ({"cron": "* * * * *", "catch_up": -1}, "catch_up"),
    ({"cron": "* * * * *", "overlap": "no"}, "overlap"),
    ({"cron": "* * * * *", "args": {"nope": 1}}, "nope"),
    ({"cron": "* * * * *", "max_attempts": 2**31}, "max_attempts 2147483648"),  # PostgreSQL's integer
])
def test_a_bad_schedule_is_refused_at_decoration_time_quoting_it(
    kwargs: dict[str, Any], message: str, tmp_path: Path
) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'unused.db'}")
    cron = kwargs.pop("cron")
    with pytest.raises(ConfigError, match=re.escape(message)):

        @app.periodic(cron, name="bad", **kwargs)
        def bad(ctx: JobContext, kind: str = "x") -> None: ...

    assert "bad" not in app.tasks and not app.schedule_specs


@pytest.mark.parametrize("cron", ["@hourly", "@daily", "@weekly", "@monthly", "@yearly", "*/10 * * * * *"])
def test_nicknames_and_the_seconds_field_are_accepted(cron: str) -> None:
    parsed = parse_cron(cron)
    first = parsed.next_after(T0)
    assert first is not None and first > T0


def test_the_scheduler_validates_its_config(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'unused.db'}")
    with pytest.raises(ConfigError, match="at least one schedule"):
        Scheduler(app.store, [])
    with pytest.raises(ConfigError, match="grace"):
        Scheduler(app.store, [spec()], interval=1.0, grace=1.5)
    with pytest.raises(ConfigError, match="interval"):
        Scheduler(app.store, [spec()], interval=0)
    with pytest.raises(ConfigError, match="unique"):
        Scheduler(app.store, [spec(), spec()])
    with pytest.raises(ConfigError, match="grace"):
        Scheduler(app.store, [spec()], grace=float("nan"))
    assert Scheduler(app.store, [spec()]).interval == 1.0
    short = Scheduler(app.store, [spec()], grace=0.5)  # a worker whose reaper runs every 0.5 s
    assert (short.interval, short.grace) == (0.25, 0.5)
    app.close()


def test_the_scheduler_syncs_once_then_fires_and_reports_the_jobs(store: Store) -> None:
    heard: list[list[FiredTick]] = []
    s = Scheduler(store, [spec()], grace=GRACE, on_fired=heard.append)
    assert s.run_once(now=T0) == [] and s.synced
    store.sync_schedules([spec("s.other")], now=at(0.1))  # another app syncs: ours is orphaned...
    [t] = s.run_once(now=at(0.6))  # ... but this worker still knows it, and does not sync again
    assert heard == [[t]] and s.fired == 1 and info(store, t.schedule).orphaned


def test_the_handler_reads_its_tick_as_ctx_scheduled_for(store: Store) -> None:
    store.sync_schedules([spec()], now=T0)
    [t] = store.fire_schedules([spec().name], grace=GRACE, now=at(0.6))
    [job] = store.claim("w", ["default"], 1, 30.0, now=at(0.7))
    ctx = JobContext(job, "w", lambda *_: False)
    assert ctx.scheduled_for == t.tick == minute(1)
    assert ctx.scheduled_for is not None and ctx.scheduled_for.tzinfo is not None


# -- tether schedules ---------------------------------------------------------------------------


def test_tether_schedules_prints_the_table_and_json(backend: str, db_url: str, store: Store) -> None:
    runner = CliRunner()
    empty = runner.invoke(cli, ["-d", db_url, "schedules"])
    assert empty.exit_code == 0, empty.output
    assert "no schedules yet" in empty.stdout
    store.sync_schedules([spec("reports.nightly", "0 3 * * *", timezone="Europe/Paris", queue="reports"),
                          spec("s.gone")], now=T0)
    store.sync_schedules([spec("reports.nightly", "0 3 * * *", timezone="Europe/Paris", queue="reports")],
                         now=at(0.1))
    store.fire_schedules(["reports.nightly"], grace=GRACE, now=datetime(2031, 1, 7, 2, 0, 1, tzinfo=UTC))
    table = runner.invoke(cli, ["-d", db_url, "schedules"], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert "reports.nightly" in table.stdout and "0 3 * * *" in table.stdout and "Europe/Paris" in table.stdout
    assert "2031-01-07 03:00:00 CET" in table.stdout  # the last tick fired, as the cron reads it
    assert "s.gone (orphaned)" in table.stdout
    as_json = runner.invoke(cli, ["-d", db_url, "schedules", "--json"])
    assert as_json.exit_code == 0, as_json.output
    rows = {r["name"]: r for r in json.loads(as_json.stdout)}
    assert rows["reports.nightly"]["last_fired"] == "2031-01-07T02:00:00+00:00"
    assert rows["reports.nightly"]["last_job_id"] is not None and rows["s.gone"]["orphaned"] is True


# -- the dashboard's Schedules page -----------------------------------------------------------


def test_the_dashboard_lists_schedules_in_their_zone(make_app: Callable[..., Tether]) -> None:
    from starlette.testclient import TestClient

    from tether.dashboard import create_app

    from .test_dashboard import HOSTS

    app = make_app()

    @app.periodic("0 3 * * *", name="reports.nightly", timezone="Europe/Paris")
    def nightly(ctx: JobContext) -> None: ...

    client = TestClient(create_app(app, token=None, allowed_hosts=HOSTS), follow_redirects=False)
    page = client.get("/schedules")
    assert page.status_code == 200 and "reports.nightly" in page.text and "0 3 * * *" in page.text
    assert "03:00:00 CE" in page.text  # the next tick, as the cron reads it (CET or CEST)
    app.store.sync_schedules([spec("s.other")])
    page = client.get("/schedules")
    assert "s.other" in page.text and "orphaned" not in page.text.split("s.other")[1].split("</tr>")[0]
    assert 'href="/schedules"' in client.get("/").text


# -- over HTTP: who may write schedules ---------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_over_http_a_worker_token_fires_and_only_a_producer_token_writes_schedules(db_url: str) -> None:
    worker_token, producer_token = "w-" + "x" * 30, "p-" + "y" * 30
    with served(db_url, tokens=f"{worker_token} worker\n{producer_token} producer") as url:
        as_worker, as_producer = open_store(url, token=worker_token), open_store(url, token=producer_token)
        try:
            with pytest.raises(AccessDenied, match="producer"):
                as_worker.sync_schedules([spec()], now=T0)
            as_producer.sync_schedules([spec()], now=T0)
            scheduler = Scheduler(as_worker, [spec(args_json='{"v": 2}')], grace=GRACE)
            [t] = scheduler.run_once(now=at(0.6))  # its sync is refused (logged); the stored definition fires
            assert scheduler.synced and t.job_id is not None
            with pytest.raises(AccessDenied):
                as_producer.fire_schedules([spec().name], grace=GRACE, now=at(1.6))
        finally:
            as_worker.close()
            as_producer.close()


def test_a_time_a_moment_away_reads_now_not_zero_seconds_ago() -> None:
    """`tether schedules` showed a tick 30 ms away as "(0.0s ago)"."""
    from tether.display import fmt_rel

    t = datetime(2026, 1, 1, tzinfo=UTC)
    assert [fmt_rel(t + timedelta(seconds=s), t) for s in (0.03, -0.03, 0.0, 2.5, -2.5)] == [
        "now", "now", "now", "in 2.5s", "2.5s ago"]
