"""A job whose run_at is past Python's last year (9999): an older version
stored one for a ``delay`` of 1e12 seconds (year 33715), and then on SQLite
every listing that included the job failed (``ValueError: year 33715 is out
of range``), on PostgreSQL psycopg's ``DataError: timestamp too large``:
``tether jobs``, ``tether job N``, ``app.get_job`` and the dashboard's /jobs
until the row was deleted by hand; and a failure refused for its delay.
Real SQLite, PostgreSQL and tether servers."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from tether import JobContext, JobState, Tether
from tether.cli.main import cli
from tether.dashboard import create_app
from tether.store.rows import DATETIME_MAX

from . import test_unstorable_text
from .conftest import PG_URL, backend_param
from .test_dashboard import TOKEN, login
from .test_unstorable_text import _run


@pytest.fixture(params=["sqlite", "postgresql", "http-sqlite", "http-postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


#: an app on this module's backends (through a tether server for ``http-*``)
app = test_unstorable_text.app


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
    with TestClient(create_app(app, token=TOKEN), follow_redirects=False) as client:
        login(client)
        for path in ("/jobs", f"/jobs/{old}"):
            page = client.get(path)
            assert page.status_code == 200, page.text


# -- a report the database refuses -------------------------------------------------------------


def test_a_failure_refused_for_its_delay_is_written_with_the_default_backoff(
    app: Tether, backend: str,
) -> None:
    """A failure whose delay the database (PostgreSQL: past its year 294276)
    or a tether server (its wire schema) refuses is not retried as it is every
    0.5 s forever, the job left running: written again without the delay, it
    takes the failure path with the reason."""
    if backend == "sqlite":
        pytest.skip("SQLite stores any delay (epoch seconds are a float)")

    @app.task(name="flaky", max_attempts=2, retry_backoff=lambda attempt: 1e13)
    def flaky(ctx: JobContext) -> None:
        raise ValueError("no")

    job_id = flaky.enqueue()
    _run(app)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.QUEUED, job
    assert job.run_at < datetime.now(UTC) + timedelta(hours=1), job  # the default backoff: a few seconds
    assert job.last_error is not None and job.last_error.startswith("ValueError: no (its delay of 1e+13s was refused")


