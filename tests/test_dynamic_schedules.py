"""Schedules managed at run time (issue 44): ``app.add_schedule``, pause,
resume, remove and trigger, on every store (SQLite, PostgreSQL, PgBouncer and
through a tether server).

Most tests move the clock (the ``now`` passed to the scheduler, the database
clock in production), as tests/test_schedules.py does; the process tests run
real workers on real time with a one-second cron (six fields, seconds first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tether import JobContext, ScheduleNotFound, Tether
from tether.errors import ConfigError, PayloadError, UnknownTask
from tether.model import ScheduleInfo, ScheduleSpec
from tether.worker.scheduler import Scheduler

from .conftest import STORE_BACKENDS, TEST_TOKEN, backend_param, served

T0 = datetime(2031, 1, 6, 12, 0, 30, tzinfo=UTC)  # half a minute past noon
GRACE = 10.0
PARIS = ZoneInfo("Europe/Paris")
ROOT = Path(__file__).resolve().parent.parent
PROC = ROOT / "tests" / "dynamic_schedule_proc.py"


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture
def url(backend: str, db_url: str) -> Iterator[str]:
    """Where the apps connect: the database, or a tether server over it."""
    if backend.startswith("http-"):
        with served(db_url) as served_url:
            yield served_url
        return
    yield db_url


@pytest.fixture
def make(url: str, db_url: str) -> Iterator[Callable[[], Tether]]:
    """Apps on this test's store, each with the task ``r.nightly`` (queue ``reports``)."""
    apps: list[Tether] = []

    def factory() -> Tether:
        app = Tether(url, token=TEST_TOKEN)
        if not apps:
            _migrate(db_url)

        @app.task(name="r.nightly", queue="reports", max_attempts=5)
        def nightly(ctx: JobContext, day: str = "") -> None: ...

        apps.append(app)
        return app

    yield factory
    for app in apps:
        app.close()


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def minute(m: int) -> datetime:
    return T0.replace(second=0) + timedelta(minutes=m)


def fire(app: Tether, minutes: float, tasks: tuple[str, ...] = ("r.nightly",)) -> list[datetime]:
    """One scheduler round of a worker that runs ``tasks`` and declares no schedule; the ticks it fired."""
    return [t.tick for t in Scheduler(app.store, [], grace=GRACE, tasks=tasks).run_once(now=at(minutes))
            if t.job_id is not None]


def info(app: Tether, name: str) -> ScheduleInfo:
    return next(s for s in app.schedules() if s.name == name)


def add(app: Tether, name: str, cron: str = "* * * * *", minutes: float = 0, catch_up: int = 1) -> None:
    """What ``app.add_schedule(name, cron, task="r.nightly")`` stores, added at the test clock."""
    app.store.add_schedule(ScheduleSpec(name=name, cron=cron, timezone="UTC", args_json="{}", queue="reports",
                                        catch_up=catch_up, overlap=True, max_attempts=5, task="r.nightly"),
                           now=at(minutes))


def test_a_dynamic_schedule_fires_each_tick_once_on_the_workers_that_run_its_task(make: Callable[[], Tether]) -> None:
    one, other = make(), make()
    add(one, "every.minute", minutes=0)
    assert fire(other, 0.6, tasks=("other.task",)) == []  # a worker that does not run the task fires nothing
    assert fire(other, 0.6) == [minute(1)]  # added on one app, fired by another's scheduler
    assert fire(one, 0.7) == []  # the tick is decided once (I6)
    [t] = Scheduler(other.store, [], grace=GRACE, tasks=("r.nightly",)).run_once(now=at(1.6))
    assert (t.schedule, t.task, t.tick) == ("every.minute", "r.nightly", minute(2))  # (the job.enqueued event's task)
    job = next(j for j in other.store.list_jobs(task="r.nightly") if j.scheduled_for == minute(1))
    assert job.schedule == "every.minute" and job.queue == "reports" and job.max_attempts == 5

    one.add_schedule("reports.adhoc", "0 2 * * *", task="r.nightly", args={"day": "x"}, timezone="Europe/Paris")
    s = info(other, "reports.adhoc")
    assert (s.task, s.dynamic, s.paused, s.cron, s.timezone, s.args) == (
        "r.nightly", True, False, "0 2 * * *", "Europe/Paris", {"day": "x"})
    assert s.queue == "reports" and not s.orphaned and s.next_tick is not None
    assert s.next_tick.astimezone(PARIS).hour == 2


def test_bad_input_is_refused_and_writes_nothing(make: Callable[[], Tether]) -> None:
    app = make()

    @app.periodic("* * * * *", name="code.every")
    def every(ctx: JobContext) -> None: ...

    app.add_schedule("taken", "* * * * *", task="r.nightly")
    before = app.store.list_schedules()
    for call, error, match in [
        (lambda: app.add_schedule("a", "* * * * *", task="no.such.task"), UnknownTask, "no.such.task"),
        (lambda: app.add_schedule("a", "61 * * * *", task="r.nightly"), ConfigError, "61"),
        (lambda: app.add_schedule("a", "* * * * *", task="r.nightly", timezone="Mars/Olympus"), ConfigError,
         "Mars/Olympus"),
        (lambda: app.add_schedule("taken", "* * * * *", task="r.nightly"), ConfigError, "already exists"),
        (lambda: app.add_schedule("code.every", "* * * * *", task="r.nightly"), ConfigError, "declared"),
        (lambda: app.add_schedule("a", "* * * * *", task="r.nightly", args={"day": {1, 2}}), PayloadError, "JSON"),
        (lambda: app.add_schedule("a", "* * * * *", task="r.nightly", args={"nope": 1}), ConfigError, "nope"),
        (lambda: app.add_schedule("", "* * * * *", task="r.nightly"), ConfigError, "name"),
        (lambda: app.add_schedule("a", "* * * * *", task="r.nightly", catch_up=-1), ConfigError, "catch_up"),
    ]:
        with pytest.raises(error, match=match):
            call()
    assert app.store.list_schedules() == before


def test_a_paused_schedule_skips_its_ticks_and_resumes_without_catching_up(make: Callable[[], Tether]) -> None:
    app = make()
    add(app, "every.minute", catch_up=5)
    assert fire(app, 0.6) == [minute(1)]
    app.store.set_schedule_paused("every.minute", True, now=at(0.7))
    assert info(app, "every.minute").paused
    assert fire(app, 1.6) == [] and fire(app, 4.6) == []  # ticks 2 to 5 fall while paused: not fired
    app.store.set_schedule_paused("every.minute", False, now=at(5.2))
    assert not info(app, "every.minute").paused
    assert fire(app, 5.3) == []  # no catch-up storm: the missed ticks are not owed (catch_up=5 or not)
    assert fire(app, 5.6) == [minute(6)]  # it resumes at its next tick
    ticks = sorted(j.scheduled_for for j in app.store.list_jobs(task="r.nightly") if j.scheduled_for)
    assert ticks == [minute(1), minute(6)]
    with pytest.raises(ScheduleNotFound, match="nope"):
        app.pause_schedule("nope")
    app.pause_schedule("every.minute")
    app.pause_schedule("every.minute")  # again: nothing changes
    app.resume_schedule("every.minute")


def test_trigger_fires_one_job_now_recorded_as_a_manual_tick(make: Callable[[], Tether]) -> None:
    app = make()

    @app.periodic("0 3 * * *", name="code.nightly")
    def code_nightly(ctx: JobContext) -> None: ...

    Scheduler(app.store, list(app.schedule_specs.values()), grace=GRACE).run_once()  # synced
    app.add_schedule("reports.adhoc", "0 2 * * *", task="r.nightly", args={"day": "mon"})
    app.pause_schedule("reports.adhoc")  # paused, it can still be triggered
    before = app.store.db_now()
    job_id = app.trigger_schedule("reports.adhoc")
    job = app.store.get_job(job_id)
    assert (job.task, job.args, job.schedule, job.queue) == ("r.nightly", {"day": "mon"}, "reports.adhoc", "reports")
    assert job.scheduled_for is not None and job.scheduled_for >= before - timedelta(seconds=1)
    s = info(app, "reports.adhoc")
    assert (s.triggered, s.last_triggered, s.last_job_id, s.last_tick) == (1, job.scheduled_for, job_id, None)
    code_job = app.store.get_job(app.trigger_schedule("code.nightly"))  # a code schedule can be triggered
    assert code_job.task == "code.nightly" and code_job.schedule == "code.nightly"
    assert info(app, "code.nightly").triggered == 1
    with pytest.raises(ScheduleNotFound, match="nope"):
        app.trigger_schedule("nope")


def test_scheduled_jobs_carry_their_tasks_tags(make: Callable[[], Tether]) -> None:
    """A code schedule's and a dynamic schedule's jobs, fired by a worker
    (its own scheduler, as it runs) and triggered, carry the task's tags
    (``@app.task(tags=...)``), so a search by tag finds them; a schedule has
    none of its own. A trigger from an app that does not register the task
    has no tags to give."""
    app = make()

    @app.periodic("* * * * *", name="tagged.every", queue="reports", tags=["cron", "billing"])
    def every(ctx: JobContext) -> None: ...

    @app.task(name="r.tagged", queue="reports", tags=["adhoc"])
    def tagged(ctx: JobContext) -> None: ...

    app.store.add_schedule(ScheduleSpec(name="dyn", cron="* * * * *", timezone="UTC", args_json="{}",
                                        queue="reports", catch_up=1, overlap=True, task="r.tagged"), now=at(0))
    add(app, "untagged.every")  # r.nightly: no tags
    worker = app.worker(queues=["reports"])
    assert worker.scheduler is not None
    assert worker.scheduler.run_once(now=at(0)) == []  # synced: its ticks are owed from now on
    fired = {t.schedule: t.job_id for t in worker.scheduler.run_once(now=at(0.6)) if t.job_id is not None}
    assert sorted(fired) == ["dyn", "tagged.every", "untagged.every"]
    tags = {name: app.get_job(i).tags for name, i in fired.items()}  # type: ignore[union-attr]
    assert tags == {"tagged.every": ["cron", "billing"], "dyn": ["adhoc"], "untagged.every": None}, tags
    assert [j.id for j in app.jobs(tags=["cron"]).jobs] == [fired["tagged.every"]]
    triggered = app.get_job(app.trigger_schedule("dyn"))
    assert triggered is not None and triggered.tags == ["adhoc"] and triggered.schedule == "dyn"
    other = make()  # registers r.nightly only
    assert other.get_job(other.trigger_schedule("dyn")).tags is None  # type: ignore[union-attr]
    # a worker that gives no tags (as one of an earlier release, whose statements name none) fires as before
    [old] = Scheduler(app.store, [], grace=GRACE, tasks=("r.tagged",)).run_once(now=at(1.6))
    assert old.job_id is not None and app.get_job(old.job_id).tags is None  # type: ignore[union-attr]


def test_remove_takes_dynamic_schedules_only(make: Callable[[], Tether]) -> None:
    app = make()

    @app.periodic("0 3 * * *", name="code.nightly")
    def code_nightly(ctx: JobContext) -> None: ...

    Scheduler(app.store, list(app.schedule_specs.values()), grace=GRACE).run_once()
    app.add_schedule("reports.adhoc", "0 2 * * *", task="r.nightly")
    job_id = app.trigger_schedule("reports.adhoc")
    with pytest.raises(ConfigError, match="declared in code"):
        app.remove_schedule("code.nightly")
    app.pause_schedule("code.nightly")  # ... but paused it can be
    app.remove_schedule("reports.adhoc")
    assert [s.name for s in app.schedules()] == ["code.nightly"]
    assert app.store.get_job(job_id).schedule == "reports.adhoc"  # its jobs stay
    with pytest.raises(ScheduleNotFound, match=r"reports\.adhoc"):
        app.remove_schedule("reports.adhoc")
    app.add_schedule("reports.adhoc", "0 4 * * *", task="r.nightly")  # the name is free again


def test_a_sync_neither_orphans_nor_overwrites_a_dynamic_schedule(make: Callable[[], Tether]) -> None:
    app = make()
    add(app, "every.minute")
    other = make()

    @other.periodic("* * * * *", name="code.every")
    def every(ctx: JobContext) -> None: ...

    code = Scheduler(other.store, list(other.schedule_specs.values()), grace=GRACE, tasks=("r.nightly",))
    assert code.run_once(now=at(0.1)) == []  # syncs the code schedule
    fired = code.run_once(now=at(0.6))  # fires both
    assert sorted(t.schedule for t in fired) == ["code.every", "every.minute"]
    other.store.sync_schedules([], now=at(0.7))
    dyn = info(app, "every.minute")
    assert dyn.dynamic and not dyn.orphaned and info(app, "code.every").orphaned
    assert fire(app, 1.6) == [minute(2)]


# -- real processes, real time ----------------------------------------------------------


def _start(url: str, role: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TETHER_DATABASE_URL": url, "TETHER_TOKEN": TEST_TOKEN, "PYTHONPATH": str(ROOT / "src")}
    with log.open("ab") as err:
        return subprocess.Popen([sys.executable, str(PROC), role], env=env, stdout=subprocess.DEVNULL, stderr=err)


def _ticks(app: Tether, name: str) -> list[datetime]:
    return sorted(j.scheduled_for for j in app.store.list_jobs(task="dyn.tick", limit=10_000)
                  if j.schedule == name and j.scheduled_for is not None)


def _wait(cond: Callable[[], bool], what: str, logs: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}; logs: {[p.read_text() for p in logs.glob('*.log')]}"
        time.sleep(0.2)


@pytest.mark.processes
def test_added_on_one_worker_fired_by_another_across_a_restart(url: str, db_url: str, tmp_path: Path) -> None:
    _migrate(db_url)
    app = Tether(url, token=TEST_TOKEN)

    @app.task(name="dyn.add", queue="admin")
    def add_it(ctx: JobContext, name: str) -> None: ...

    with ExitStack() as stack:
        procs: dict[str, subprocess.Popen[bytes]] = {}

        def stop(role: str) -> None:
            procs[role].terminate()
            procs[role].wait(15)

        stack.callback(app.close)
        for role in ("adder", "ticker"):
            procs[role] = _start(url, role, tmp_path / f"{role}.log")
            stack.callback(lambda r=role: procs[r].poll() is None and (procs[r].kill(), procs[r].wait()))  # type: ignore[misc]
        _wait(lambda: len(app.store.list_workers(live_only=True)) >= 2, "two workers", tmp_path)
        add_it.enqueue(name="dyn.every")  # the adder process adds the schedule, at run time
        _wait(lambda: len(_ticks(app, "dyn.every")) >= 3, "the ticker fired the schedule", tmp_path)
        s = info(app, "dyn.every")
        assert s.dynamic and s.task == "dyn.tick"

        stop("ticker")  # the adder does not run dyn.tick: nothing fires it now
        time.sleep(1.5)
        quiet_from = app.store.db_now()
        time.sleep(2.5)
        assert [t for t in _ticks(app, "dyn.every") if t > quiet_from] == []

        procs["ticker"] = _start(url, "ticker", tmp_path / "ticker.log")  # a restart: the schedule survived it
        _wait(lambda: len([t for t in _ticks(app, "dyn.every") if t > quiet_from]) >= 3, "fired after restart",
              tmp_path, timeout=30)
        app.pause_schedule("dyn.every")
        time.sleep(1.5)
        paused_from = app.store.db_now()
        time.sleep(2.5)
        assert [t for t in _ticks(app, "dyn.every") if t > paused_from] == []
        app.resume_schedule("dyn.every")
        _wait(lambda: len([t for t in _ticks(app, "dyn.every") if t > paused_from]) >= 2, "fired after resume",
              tmp_path)
        resumed = [t for t in _ticks(app, "dyn.every") if t > paused_from]
        assert resumed[0] >= paused_from + timedelta(seconds=2), "resume fired ticks missed while paused"
        ticks = _ticks(app, "dyn.every")
        assert len(ticks) == len(set(ticks))  # each tick at most one job (I6)
        assert all(p.poll() is None for p in procs.values())


# -- the CLI ----------------------------------------------------------------------------

CLI_APP = '''
from tether import JobContext, Tether

app = Tether()


@app.task(name="r.nightly", queue="reports")
def nightly(ctx: JobContext, day: str = "") -> None: ...
'''


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_the_cli_adds_lists_pauses_triggers_and_removes(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from tether.cli.main import cli

    _migrate(db_url)
    (tmp_path / "cliapp.py").write_text(CLI_APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TETHER_DATABASE_URL", db_url)

    def run(*argv: str, fails: bool = False) -> str:
        done = CliRunner().invoke(cli, ["--database", db_url, *argv])  # (cliapp is imported once: its URL is the first)
        assert (done.exit_code != 0) if fails else (done.exit_code == 0), done.output
        return done.output

    run("schedules", "add", "reports.adhoc", "0 2 * * *", "--task", "r.nightly", "--app", "cliapp:app",
        "--args", '{"day": "mon"}', "--timezone", "Europe/Paris")
    assert "no task named" in run("schedules", "add", "x", "* * * * *", "--task", "nope", "--app", "cliapp:app",
                            fails=True).lower()
    assert "61" in run("schedules", "add", "x", "61 * * * *", "--task", "r.nightly", "--app", "cliapp:app", fails=True)
    assert "reports.adhoc" in run("schedules") and "run-time" in run("schedules")
    [listed] = json.loads(run("schedules", "--json"))
    assert (listed["task"], listed["dynamic"], listed["paused"]) == ("r.nightly", True, False)
    run("schedules", "pause", "reports.adhoc")
    assert "paused" in run("schedules") and json.loads(run("schedules", "--json"))[0]["paused"]
    job_id = int(run("schedules", "trigger", "reports.adhoc").strip().splitlines()[-1])
    app = Tether(db_url)
    try:
        assert app.store.get_job(job_id).schedule == "reports.adhoc"
        [s] = app.schedules()
        assert s.paused and s.triggered == 1
    finally:
        app.close()
    run("schedules", "resume", "reports.adhoc")
    assert "nope" in run("schedules", "pause", "nope", fails=True)
    run("schedules", "remove", "reports.adhoc")
    assert "no schedules yet" in run("schedules")


# -- the dashboard ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_the_dashboard_pauses_resumes_and_triggers_behind_login_and_csrf(make: Callable[[], Tether]) -> None:
    from .test_dashboard import ORIGIN, _client, csrf_of, login

    app = make()
    name = 'odd/<b>"name"</b>'  # any printable text: sent in the form body, shown escaped
    app.add_schedule(name, "0 2 * * *", task="r.nightly")
    with _client(app) as client:
        token = csrf_of(client.get("/login").text)
        assert client.post("/schedules/pause", data={"csrf": token, "name": name}, headers=ORIGIN).status_code == 401
        login(client)
        page = client.get("/schedules").text
        assert "<b>" not in page and "&lt;b&gt;" in page and "run-time" in page
        token = csrf_of(page)
        refused = [client.post("/schedules/pause", data={"name": name}, headers=ORIGIN),  # no CSRF token
                   client.post("/schedules/trigger", data={"csrf": token, "name": name},
                               headers={"Origin": "http://evil.example"})]
        assert [r.status_code for r in refused] == [403, 403]
        assert not info(app, name).paused and info(app, name).triggered == 0

        r = client.post("/schedules/pause", data={"csrf": token, "name": name}, headers=ORIGIN)
        assert r.status_code == 303 and "paused" in client.get(r.headers["location"]).text
        assert info(app, name).paused
        assert 'action="/schedules/resume"' in client.get("/schedules").text
        r = client.post("/schedules/trigger", data={"csrf": token, "name": name}, headers=ORIGIN)
        assert "triggered job" in client.get(r.headers["location"]).text
        assert info(app, name).triggered == 1
        client.post("/schedules/resume", data={"csrf": token, "name": name}, headers=ORIGIN)
        assert not info(app, name).paused
        r = client.post("/schedules/pause", data={"csrf": token, "name": "nope"}, headers=ORIGIN)
        assert "no schedule named" in client.get(r.headers["location"]).text


# -- docs/how-to/schedules.md's example -------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "http-postgresql"], indirect=True)
def test_the_docs_example_runs(url: str, db_url: str, backend: str, tmp_path: Path) -> None:
    _migrate(db_url)
    env = {**os.environ, "TETHER_TOKEN": TEST_TOKEN, "PYTHONPATH": str(ROOT / "src")}
    if backend != "sqlite":  # SQLite: the example's own temporary file
        env["TETHER_DATABASE_URL"] = url
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "schedules" / "runtime.py")], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dynamic: True" in done.stdout and "succeeded report for shop 7" in done.stdout
    assert "after remove: no schedule named 'reports.shop-7'" in done.stdout


def _migrate(db_url: str) -> None:
    migrator = Tether(db_url)
    migrator.migrate()
    migrator.close()
