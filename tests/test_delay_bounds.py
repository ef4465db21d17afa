"""How long a job may wait: one maximum (``config.MAX_DELAY``, 100 years) for
``delay``, ``run_at``, ``tether.Retry(delay=...)`` and a callable
``retry_backoff``. Unbounded, a delay of 1e12 seconds stored a run_at in year
33715: on SQLite every listing that included the job failed (Python's datetime
ends in 9999), on PostgreSQL the enqueue or the listing raised the driver's
error, and a snooze or backoff the database refused was retried every 0.5 s
forever with the job left running. Real SQLite, PostgreSQL and tether servers."""

from __future__ import annotations

import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import tether
from tether import JobContext, JobState, Outcome, Tether
from tether.cli.main import cli
from tether.config import MAX_DELAY
from tether.dashboard import create_app
from tether.errors import ConfigError, PayloadError
from tether.model import NewJob
from tether.store.rows import DATETIME_MAX
from tether.worker import policy

from . import test_unstorable_text
from .conftest import PG_URL, backend_param
from .test_dashboard import HOSTS, TOKEN, login
from .test_unstorable_text import _run

HUGE = (1e12, 1e13)  # year 33715 (PostgreSQL stores it, Python reads none), and past PostgreSQL's own end


@pytest.fixture(params=["sqlite", "postgresql", "http-sqlite", "http-postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


#: an app on this module's backends (through a tether server for ``http-*``)
app = test_unstorable_text.app


def _far_off(job_run_at: datetime) -> bool:
    """About MAX_DELAY from now: due in a century, not at once, not in year 33715."""
    return abs(job_run_at - (datetime.now(UTC) + timedelta(seconds=MAX_DELAY))) < timedelta(days=2)


# -- rows an older version wrote -----------------------------------------------------------------


def _push_run_at(db_url: str, backend: str, job_id: int, seconds: float) -> None:
    """What an older version wrote for ``delay=seconds``: run_at that far away."""
    if backend == "sqlite":
        with sqlite3.connect(urlsplit(db_url).path[1:]) as conn:
            conn.execute("UPDATE tether_jobs SET run_at = run_at + ? WHERE id = ?", (seconds, job_id))
        return
    schema = parse_qs(urlsplit(db_url).query)["schema"][0]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".jobs SET run_at = run_at + make_interval(secs => %s) WHERE id = %s',
                     (seconds, job_id))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "http-sqlite", "http-postgresql"], indirect=True)
def test_a_run_at_past_year_9999_written_before_the_bound_reads_as_the_latest_datetime(
    app: Tether, backend: str, db_url: str,
) -> None:
    @app.task(name="later")
    def later(ctx: JobContext) -> None: ...

    old, fine = later.enqueue(), later.enqueue()
    _push_run_at(db_url, backend.removeprefix("http-"), old, 1e12)
    job = app.get_job(old)
    assert job is not None and job.run_at == DATETIME_MAX and job.state is JobState.QUEUED
    assert sorted(j.id for j in app.store.list_jobs(limit=10)) == [old, fine]
    if backend.startswith("http-"):
        return
    runner = CliRunner()
    for args in (["jobs"], ["job", str(old)]):
        result = runner.invoke(cli, ["-d", db_url, *args])
        assert result.exit_code == 0 and "9999" in result.output, result.output
    with TestClient(create_app(app, token=TOKEN, allowed_hosts=HOSTS), follow_redirects=False) as client:
        login(client)
        for path in ("/jobs", f"/jobs/{old}"):
            page = client.get(path)
            assert page.status_code == 200, page.text


# -- a report the database refuses -------------------------------------------------------------


def test_a_failure_refused_for_its_delay_is_written_with_the_default_backoff(
    app: Tether, backend: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defense in depth: were a delay the database (or a tether server)
    refuses ever to get past the checks, the failure is not retried as it is
    forever, the job left running: written again without the delay, it takes
    the failure path with the reason."""
    if backend == "sqlite":
        pytest.skip("SQLite stores any delay (epoch seconds are a float)")
    monkeypatch.setattr(policy, "MAX_DELAY", float("inf"))  # no cap: the database sees 1e13

    @app.task(name="flaky", max_attempts=2, retry_backoff=lambda attempt: 1e13)
    def flaky(ctx: JobContext) -> None:
        raise ValueError("no")

    job_id = flaky.enqueue()
    _run(app)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.QUEUED, job
    assert job.run_at < datetime.now(UTC) + timedelta(hours=1), job  # the default backoff: a few seconds
    assert job.last_error is not None and job.last_error.startswith("ValueError: no (its delay of 1e+13s was refused")


# -- at enqueue ---------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [
    *({"delay": d} for d in (*HUGE, MAX_DELAY * 1.001)),
    *({"run_at": t} for t in (datetime(9000, 1, 1, tzinfo=UTC), datetime(1, 1, 2, tzinfo=UTC),
                              datetime.now(UTC) + timedelta(seconds=MAX_DELAY + 86400))),
], ids=["delay-1e12", "delay-1e13", "delay-just-over", "run_at-9000", "run_at-year-1", "run_at-just-over"])
def test_a_wait_past_the_maximum_is_a_config_error_and_nothing_is_enqueued(
    app: Tether, options: dict[str, object],
) -> None:
    @app.task(name="later")
    def later(ctx: JobContext) -> None: ...

    with pytest.raises(ConfigError, match=r"delay must be from 0 to|run_at must be within 100 years of now"):
        later.using(**options).enqueue()
    assert app.store.list_jobs(limit=10) == []


def test_the_maximum_itself_is_taken_and_reads_back(app: Tether) -> None:
    @app.task(name="later")
    def later(ctx: JobContext) -> None: ...

    ids = [later.using(delay=MAX_DELAY).enqueue(),
           later.using(run_at=datetime.now(UTC) + timedelta(seconds=MAX_DELAY - 60)).enqueue()]
    for job_id in ids:
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.QUEUED and _far_off(job.run_at), job
    assert len(app.store.list_jobs(limit=10)) == 2


@pytest.mark.parametrize("backend", ["http-sqlite", "http-postgresql"], indirect=True)
def test_a_tether_server_refuses_what_a_local_enqueue_would(app: Tether) -> None:
    """A client that skips the checks (an older one, another language) meets
    the server's own: ConfigError, not a row no listing can read."""
    with pytest.raises(ConfigError, match="run_at must be within 100 years of now"):
        app.store.enqueue([NewJob(task="t", args_json="{}", run_at=datetime(9000, 1, 1, tzinfo=UTC))])
    with pytest.raises(PayloadError, match="delay must be <= 3155760000"):  # the wire schema's bound
        app.store.enqueue([NewJob(task="t", args_json="{}", delay=1e12)])
    assert app.store.list_jobs(limit=10) == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_tether_enqueue_refuses_a_delay_past_the_maximum(db_url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_app puts the CWD on it
    (tmp_path / "delay_app.py").write_text(
        f"from tether import Tether\napp = Tether({db_url!r})\n@app.task(name='later')\ndef later(ctx): ...\n")
    app = Tether(db_url)
    try:
        app.migrate()
        result = CliRunner().invoke(cli, ["enqueue", "later", "--app", "delay_app:app", "--delay", "1e12"])
        assert result.exit_code == 2 and "delay must be from 0 to" in result.output, result.output
        assert app.store.list_jobs(limit=10) == []
    finally:
        app.close()


# -- from a handler ----------------------------------------------------------------------------


@pytest.mark.parametrize("delay", HUGE)
def test_retry_past_the_maximum_is_refused_where_the_handler_raises_it(delay: float) -> None:
    with pytest.raises(ConfigError, match="must be from 0 to"):
        tether.Retry(delay=delay)
    assert tether.Retry(delay=MAX_DELAY).delay == MAX_DELAY


@pytest.mark.parametrize("delay", HUGE)
def test_a_handler_s_oversized_snooze_fails_its_attempt_with_the_reason(app: Tether, delay: float) -> None:
    @app.task(name="snoozer", max_attempts=1)
    def snoozer(ctx: JobContext) -> None:
        raise tether.Retry(delay=delay)

    job_id = snoozer.enqueue()
    _run(app)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.DEAD, job
    assert job.last_error is not None and "tether.Retry(delay=...) must be from 0 to" in job.last_error
    assert len(app.store.list_jobs(limit=10)) == 1


@pytest.mark.parametrize("delay", HUGE)
def test_a_callable_backoff_past_the_maximum_is_capped_at_it(app: Tether, delay: float) -> None:
    @app.task(name="flaky", max_attempts=2, retry_backoff=lambda attempt: delay)
    def flaky(ctx: JobContext) -> None:
        raise ValueError("no")

    job_id = flaky.enqueue()
    _run(app)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.QUEUED and _far_off(job.run_at), job
    assert [a.outcome for a in job.attempts] == [Outcome.FAILED]
    assert len(app.store.list_jobs(limit=10)) == 1
