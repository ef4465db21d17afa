"""Retention: ``Tether(retention=...)``, the ``Pruner`` service a worker runs,
the plans its statements take, and ``tether prune``. Real databases (the
``backend`` fixture: SQLite and PostgreSQL); the store's own behaviour on every
backend is in test_conformance_control.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from tether import Tether
from tether.cli.main import cli
from tether.errors import ConfigError
from tether.model import JobState, Outcome
from tether.store import Store, open_store
from tether.store.postgres.store import PostgresStore
from tether.store.schedules import FIRE_MAX_AGE, TICK_KEEP, plan_fires
from tether.store.sqlite.store import SQLiteStore
from tether.worker.pruner import Pruner, parse_age, parse_retention

from .test_conformance import TTL, W, new_job
from .test_migrations import raw_sql
from .test_schedules import GRACE, T0, at, fire
from .test_schedules import spec as sched_spec

DAY = 86400.0


def finish(store: Store, n: int, *, fail_every: int = 0) -> list[int]:
    """n jobs run and finished now: succeeded, or dead for every ``fail_every``-th."""
    ids = store.enqueue([new_job(queue="done") for _ in range(n)])
    claimed = store.claim(W, ["done"], n, TTL)
    good = []
    for i, c in enumerate(claimed):
        if fail_every and i % fail_every == 0:
            store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", retry=False)
        else:
            good.append((c.id, c.attempt, None))
    store.complete(W, good)
    return ids


# -- configuration ---------------------------------------------------------------------


def test_retention_defaults_and_overrides() -> None:
    assert parse_retention({}) == {JobState.SUCCEEDED: 7 * DAY, JobState.CANCELLED: 30 * DAY,
                                   JobState.DEAD: 30 * DAY}
    assert parse_retention({"succeeded": "12h", "dead": None}) == {JobState.SUCCEEDED: 12 * 3600.0,
                                                                   JobState.CANCELLED: 30 * DAY}
    assert parse_retention(None) == {}
    assert parse_retention({"cancelled": timedelta(minutes=5), "succeeded": 90}) [JobState.CANCELLED] == 300.0
    assert Tether("sqlite:///unused.db").retention == parse_retention({})
    assert Tether("sqlite:///unused.db", retention=None).retention == {}
    assert [parse_age(v) for v in ("90s", "30m", "2h", "1.5d", "2w", 0)] == [90, 1800, 7200, 1.5 * DAY, 14 * DAY, 0]
    # a bare number as text is seconds, as the message always said (`--older-than 7`, `--retention dead=3600`)
    assert [parse_age(v) for v in ("7", " 3600 ", "0", "1.5")] == [7, 3600, 0, 1.5]
    for bad in ("7\n5", "7 days", "d", "-7", ""):
        with pytest.raises(ConfigError, match="must be a duration"):
            parse_age(bad)


@pytest.mark.parametrize("retention, message", [
    ({"queued": "1d"}, "finished states only"),
    ({"running": "1d"}, "finished states only"),
    ({"succeeded": "7 days"}, r"retention\['succeeded'\] must be a duration"),
    ({"dead": -1}, "zero or more"),
    ({"dead": float("nan")}, "zero or more"),
    ({"dead": True}, "must be a duration"),
    (["succeeded"], "must be a dict"),
])
def test_bad_retention_is_refused_with_a_clear_error(retention: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Tether("sqlite:///unused.db", retention=retention)


def test_a_worker_runs_a_pruner_only_when_something_is_pruned(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    pruners = [s for s in app.worker().services if isinstance(s, Pruner)]
    assert len(pruners) == 1 and pruners[0].ages == app.retention
    kept = make_app(retention=None)
    assert not [s for s in kept.worker().services if isinstance(s, Pruner)]


@pytest.mark.parametrize("bad, message", [({"limit": 0}, "limit"), ({"interval": 0}, "interval"),
                                          ({"max_rounds": 0}, "max_rounds")])
def test_pruner_config_is_checked(store: Store, bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Pruner(store, {JobState.SUCCEEDED: 1.0}, **bad)


# -- the service -----------------------------------------------------------------------


def test_a_tick_drains_a_backlog_in_bounded_statements(store: Store) -> None:
    ids = finish(store, 25, fail_every=5)
    # Age 0 prunes what finished before the database's now; SQLite's clock has
    # millisecond steps, so a prune in the same millisecond as the last complete
    # would leave those jobs (it did, now and then): let the clock pass them.
    last = max(j.finished_at for j in (store.get_job(i) for i in ids) if j is not None and j.finished_at)
    while store.db_now() <= last:
        time.sleep(0.001)
    live = store.enqueue([new_job(queue="live") for _ in range(3)])
    running = store.claim(W, ["live"], 1, TTL)
    pruner = Pruner(store, {JobState.SUCCEEDED: 0.0, JobState.DEAD: 0.0}, limit=4, max_rounds=3)
    assert sum(pruner.run_once().values()) == 4
    assert sum(pruner.tick().values()) == 12  # three full statements, then the tick ends
    rest = pruner.tick()
    assert rest == {JobState.SUCCEEDED: 7, JobState.DEAD: 2} or sum(rest.values()) == 9
    assert pruner.total == 25 and all(store.get_job(i) is None for i in ids)
    assert [store.get_job(i).state for i in live] == [JobState.RUNNING, JobState.QUEUED,  # type: ignore[union-attr]
                                                      JobState.QUEUED]
    assert running[0].id == live[0]


def test_a_worker_prunes_on_its_timer(make_app: Callable[..., Tether]) -> None:
    app = make_app(retention={"succeeded": 0, "dead": None, "cancelled": None}, reaper_interval=1.0)
    ids = finish(app.store, 5, fail_every=2)
    worker = app.worker(queues=["done"])
    pruner = next(s for s in worker.services if isinstance(s, Pruner))
    pruner.interval = 0.05
    pruner.spread_start = False
    done = threading.Event()
    pruner.on_tick = lambda result: done.set() if pruner.total else None

    import asyncio

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        await asyncio.to_thread(done.wait, 20)
        worker.stop()
        await task

    asyncio.run(main())
    assert pruner.total == 2  # the succeeded ones; the dead ones are kept forever here
    assert [app.get_job(i) is None for i in ids] == [False, True, False, True, False]


# -- plans -----------------------------------------------------------------------------


def test_prune_reads_the_finished_index_not_the_table(backend: str, db_url: str) -> None:
    store = open_store(db_url)
    store.migrate()
    try:
        finish(store, 3000, fail_every=3)
        store.enqueue([new_job(queue="backlog") for _ in range(3000)])
        if isinstance(store, SQLiteStore):
            params = {"ages": json.dumps({"succeeded": 60.0, "dead": 60.0}), "limit": 1000, "now": None}
            with store._use() as conn:
                rows = conn.execute("EXPLAIN QUERY PLAN " + store.q["prune"], params).fetchall()
            plan = "\n".join(str(r[-1]) for r in rows)
            # each state asked is read by the correlated subquery (once per state), by the index
            assert "CORRELATED LIST SUBQUERY" in plan, plan
            assert plan.count("INDEX tether_jobs_finished_idx (state=? AND finished_at<?)") == 1, plan
            assert "SCAN tether_jobs" not in plan and "SCAN j" not in plan and "SCAN x" not in plan, plan
        else:
            assert isinstance(store, PostgresStore)
            with store.pool.connection() as conn:
                conn.execute(f'ANALYZE "{store.schema}".jobs')
            params2 = {"states": ["succeeded", "dead"], "ages": [60.0, 60.0], "limit": 1000, "now": None}
            with store.pool.connection() as conn:
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + store.q["prune"], params2))
            assert "jobs_finished_idx" in plan, plan
            assert "Seq Scan on jobs" not in plan, plan
    finally:
        store.close()


def test_prune_ticks_reads_each_schedules_old_ticks_by_the_primary_key(store: Store) -> None:
    specs = [sched_spec(f"s.{i}", "* * * * * *") for i in range(5)]
    store.sync_schedules(specs, now=T0)
    for k in range(1, 1000, 5):
        store.fire_schedules([s.name for s in specs], grace=GRACE, now=T0 + timedelta(seconds=k))
    params = {"keep": TICK_KEEP, "limit": 1000, "now": None}
    if isinstance(store, SQLiteStore):
        with store._use() as conn:
            conn.execute("ANALYZE")
            plan = "\n".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + store.q["prune_ticks"], params))
        assert "SEARCH t USING PRIMARY KEY (schedule=? AND tick<?)" in plan, plan
        assert "SCAN t" not in plan and "SCAN tether_schedule_ticks" not in plan, plan
    else:
        assert isinstance(store, PostgresStore)
        with store.pool.connection() as conn:
            conn.execute(f'ANALYZE "{store.schema}".schedule_ticks')
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + store.q["prune_ticks"], params))
        assert "Index Scan using schedule_ticks_pkey" in plan and "Seq Scan on schedule_ticks" not in plan, plan
    assert store.prune_ticks(10_000, now=T0 + timedelta(seconds=TICK_KEEP + 2000)) == 5 * 996  # ticks 1 s .. 996 s


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_prune_in_progress_never_blocks_a_claim_or_a_completion(db_url: str) -> None:
    """The prune statement holds its locks until it commits: a claim and a
    completion made meanwhile go through at once."""
    store = open_store(db_url)
    store.migrate()
    assert isinstance(store, PostgresStore)
    try:
        finish(store, 50)
        store.enqueue([new_job(queue="work") for _ in range(5)])
        running = store.claim(W, ["work"], 1, TTL)
        # a transaction left open on purpose, rolled back at the end
        with store.pool.connection() as held, held.transaction(force_rollback=True):
            gone = held.execute(store.q["prune"], {"states": ["succeeded"], "ages": [0.0], "limit": 1000,
                                                   "now": None}).fetchall()
            assert gone == [("succeeded", 50)]
            got = store.claim(W, ["work"], 4, TTL)
            assert len(got) == 4
            assert store.complete(W, [(running[0].id, running[0].attempt, None)]) == {running[0].id}
        assert sum(store.prunable({JobState.SUCCEEDED: 0.0}).values()) == 51
    finally:
        store.close()


# -- schedule ticks ---------------------------------------------------------------------


def tick_rows(db_url: str) -> list[datetime]:
    """Every row of the ticks table: its tick, oldest first."""
    with raw_sql(db_url) as (run, prefix):
        rows = run(f"SELECT tick FROM {prefix}schedule_ticks ORDER BY tick")
    return [r[0] if isinstance(r[0], datetime) else datetime.fromtimestamp(r[0], UTC) for r in rows]


def test_ticks_decided_long_ago_are_pruned_in_bounded_statements_and_never_fire_again(
    store: Store, db_url: str,
) -> None:
    every_second = sched_spec("s.every_second", "* * * * * *")
    store.sync_schedules([every_second], now=T0)
    decided = [t.tick for i in range(1, 6) for t in fire(store, every_second, now=T0 + timedelta(seconds=i + 0.5))]
    assert decided == tick_rows(db_url) == [T0 + timedelta(seconds=i) for i in range(1, 6)]
    # An hour and 3.2 s later the ticks decided at 1.5 s and 2.5 s are an hour
    # old: pruned, one statement of `limit` at a time; the rest are kept.
    later = T0 + timedelta(seconds=TICK_KEEP + 3.2)
    assert [store.prune_ticks(1, now=later) for _ in range(3)] == [1, 1, 0]
    assert tick_rows(db_url) == decided[2:]
    # The schedule's own record of its last tick keeps the pruned ones decided:
    # a fire at any time after never proposes them again.
    assert fire(store, every_second, now=T0 + timedelta(seconds=5.9)) == []
    refired = fire(store, every_second, now=later)
    assert refired and min(t.tick for t in refired) > decided[-1]
    # A tick caught up today after every worker was down is as old as its
    # cron says, but decided just now: kept until an hour after its decision.
    nightly = sched_spec("s.nightly", "0 0 * * *")
    store.sync_schedules([every_second, nightly], now=T0)
    back = datetime(2031, 1, 9, 12, 0, tzinfo=UTC)
    [caught_up] = fire(store, nightly, now=back)
    assert caught_up.tick == datetime(2031, 1, 9, tzinfo=UTC)
    assert store.prune_ticks(1000, now=back + timedelta(seconds=TICK_KEEP - 1)) == len(decided) - 2 + len(refired)
    assert tick_rows(db_url) == [caught_up.tick]
    assert store.prune_ticks(1000, now=back + timedelta(seconds=TICK_KEEP + 1)) == 1 and tick_rows(db_url) == []


def test_the_pruner_prunes_ticks_on_the_database_clock(store: Store, db_url: str) -> None:
    s = sched_spec("s.every_minute", "* * * * *")
    two_hours_ago = store.db_now() - timedelta(hours=2)
    store.sync_schedules([s], now=two_hours_ago)
    old = [t.tick for t in fire(store, s, now=two_hours_ago + timedelta(minutes=1))]
    recent = [t.tick for t in fire(store, s, now=store.db_now())]  # the latest missed, and any on time
    assert len(old) == 1 and recent and tick_rows(db_url) == old + recent
    pruner = Pruner(store, {JobState.SUCCEEDED: DAY})
    assert pruner.tick() == {} and pruner.ticks_pruned == 1
    assert tick_rows(db_url) == recent


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_fire_read_too_long_ago_inserts_nothing_so_a_pruned_tick_cannot_fire_twice(store: Store) -> None:
    """On PostgreSQL a fire reads the definitions, then inserts the ticks in a
    second statement. A worker that stalls between the two for longer than
    FIRE_MAX_AGE finds its fire void: the ticks it computed may have been
    decided by another worker and their rows pruned since."""
    assert isinstance(store, PostgresStore)
    s = sched_spec()
    store.sync_schedules([s], now=T0)
    [stale] = plan_fires(store._all("schedules_to_fire", {"names": [s.name], "tasks": [], "now": at(0.6)}), grace=GRACE)
    [t] = fire(store, s, now=at(0.7))  # another worker, meanwhile
    assert t.tick == stale.ticks[0]
    resumed = at(0.6) + timedelta(seconds=FIRE_MAX_AGE + 1)
    assert store.prune_ticks(1000, now=at(0.7) + timedelta(seconds=TICK_KEEP + 1)) == 1
    won = store._all("fire_ticks", {"name": s.name, "version": stale.version, "ticks": stale.ticks,
                                    "skip": stale.skip, "read_at": stale.read_at, "max_age": FIRE_MAX_AGE,
                                    "now": resumed, "tags": None})
    assert won == []
    assert [j.scheduled_for for j in store.list_jobs(task=s.name)] == [t.tick]


# -- tether prune ----------------------------------------------------------------------


def test_tether_prune_dry_run_then_prune(backend: str, db_url: str) -> None:
    store = open_store(db_url)
    store.migrate()
    try:
        finish(store, 30, fail_every=3)
        runner = CliRunner()
        base = ["--database", db_url, "prune"]
        out = runner.invoke(cli, [*base, "--older-than", "0s", "--dry-run"], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert "would prune 30 job(s): succeeded 20, cancelled 0, dead 10" in out.output
        out = runner.invoke(cli, [*base, "--older-than", "7d"], catch_exceptions=False)
        assert "pruned 0 job(s)" in out.output
        out = runner.invoke(cli, [*base, "--state", "dead", "--older-than", "0s", "--batch", "3"],
                            catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert "pruned 10 job(s): dead 10" in out.output
        assert store.prunable({JobState.SUCCEEDED: 0.0, JobState.DEAD: 0.0}) == {JobState.SUCCEEDED: 20,
                                                                               JobState.DEAD: 0}
        out = runner.invoke(cli, [*base, "--older-than", "a week"])
        assert out.exit_code == 2 and "--older-than must be a duration" in out.output
        out = runner.invoke(cli, [*base, "--state", "queued"])
        assert out.exit_code == 2
    finally:
        store.close()


# -- the migration ---------------------------------------------------------------------------


def test_migrating_a_version_4_database_keeps_its_jobs_and_attempts(backend: str, db_url: str) -> None:
    """0005_job_control on a database with history: the attempts table (rebuilt
    on SQLite for its wider outcome check) keeps every row, and the new
    outcomes are accepted afterwards."""
    store = open_store(db_url)
    try:
        everything = store._migrations  # type: ignore[attr-defined]
        store._migrations = [m for m in everything if m[0] <= 4]  # type: ignore[attr-defined]
        assert store.migrate()[-1] == "0004_schedules"
        # history as version 4 wrote it (today's statements name later columns: raw SQL throughout)
        with raw_sql(db_url) as (run, prefix):
            clock = "now()" if backend == "postgresql" else "(julianday('now') - 2440587.5) * 86400.0"
            for n in range(4):
                state, outcome = ("succeeded", "succeeded") if n % 2 else ("dead", "failed")
                run(f"INSERT INTO {prefix}jobs (queue, task, args, state, attempt, max_attempts, run_at, created_at, "
                    f"finished_at) VALUES ('done', 't', '{{}}', '{state}', 1, 3, {clock}, {clock}, {clock})")
                run(f"INSERT INTO {prefix}attempts (job_id, attempt, worker, claimed_at, finished_at, outcome) "
                    f"VALUES ({n + 1}, 1, 'w', {clock}, {clock}, '{outcome}')")
            ids = [1, 2, 3, 4]
            history = (f"SELECT j.id, j.state, j.attempt, j.finished_at, a.outcome, a.claimed_at FROM {prefix}jobs AS j "
                       f"JOIN {prefix}attempts AS a ON a.job_id = j.id ORDER BY j.id")
            before = run(history)
        assert len(before) == 4
        store._migrations = everything  # type: ignore[attr-defined]
        assert store.migrate()[0] == "0005_job_control"  # and any later ones
        store.check_schema()
        with raw_sql(db_url) as (run, prefix):
            assert run(history) == before
        assert all(len(store.get_job(i).attempts) == 1 for i in ids)  # type: ignore[union-attr]
        (job_id,) = store.enqueue([new_job()])
        (c,) = store.claim(W, ["default"], 1, TTL)
        store.fail(W, c.id, c.attempt, outcome=Outcome.SNOOZED, error="snoozed", delay=0)
        assert [a.outcome for a in store.get_job(job_id).attempts] == [Outcome.SNOOZED]  # type: ignore[union-attr]
        assert store.prune({JobState.SUCCEEDED: 0.0, JobState.DEAD: 0.0}, 100) == {JobState.SUCCEEDED: 2,
                                                                                   JobState.DEAD: 2}
    finally:
        store.close()
