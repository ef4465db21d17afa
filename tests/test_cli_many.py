"""``tether jobs`` with filters, ``tether cancel|retry|delete`` by id or by
filter (count, confirmation, --yes, --dry-run), ``tether purge`` and
``tether rerun`` (issue 43), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner, Result

from tether import JobContext, JobState, Tether
from tether.cli.common import BadUsage
from tether.cli.main import cli
from tether.cli.many_cmd import parse_expression

from .test_cli import one_line_error


@pytest.fixture
def run() -> Callable[..., Result]:
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(cli, list(args), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def app(db_url: str) -> Iterator[Tether]:
    a = Tether(db_url)
    a.migrate()

    @a.task(name="sync", tags=["billing"])
    def sync(ctx: JobContext, invoice: int) -> int:
        return invoice

    yield a
    a.close()


def enqueue(app: Tether, n: int, **options: object) -> list[int]:
    task = app.get_task("sync")
    return [task.using(**options).enqueue(invoice=i) for i in range(n)]


def test_expressions() -> None:
    assert parse_expression("customer=42", "--meta") == {"customer": 42}
    assert parse_expression("name=ada", "--meta") == {"name": "ada"}
    assert parse_expression('name="42"', "--meta") == {"name": "42"}
    assert parse_expression("plan.tier=gold", "--meta") == {"plan": {"tier": "gold"}}
    for bad in ("customer", "=1", "a..b=1"):
        with pytest.raises(BadUsage, match="KEY=VALUE"):
            parse_expression(bad, "--meta")


def test_jobs_filters_pages_and_json(run: Callable[..., Result], app: Tether, db_url: str) -> None:
    eu = enqueue(app, 3, meta={"customer": 42}, tags=["eu"])
    enqueue(app, 2, meta={"customer": 7})
    r = run("-d", db_url, "jobs", "--meta", "customer=42", "--tag", "eu", "-n", "2")
    assert r.exit_code == 0, r.output
    assert "next page: --after " in r.stdout
    cursor = r.stdout.split("--after ")[1].split()[0]
    r = run("-d", db_url, "jobs", "--meta", "customer=42", "--tag", "eu", "-n", "2", "--after", cursor, "--json")
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == [eu[0]]
    r = run("-d", db_url, "jobs", "--tag", "billing", "--json", "--all", "-n", "2")
    assert len(r.stdout.splitlines()) == 5
    one_line_error(run("-d", db_url, "jobs", "--tag", "eu", "--after", cursor), 2, "other filters")
    # an age moves with the clock: the hint gives the time it stood for, which the next page takes
    r = run("-d", db_url, "jobs", "--since", "1h", "-n", "2")
    hint = r.stdout.split("next page: ")[1].split()
    assert hint[0] == "--since" and hint[2] == "--after"
    r = run("-d", db_url, "jobs", "-n", "2", *hint)
    assert r.exit_code == 0, r.output
    assert len([ln for ln in r.stdout.splitlines() if "sync" in ln]) == 2
    one_line_error(run("-d", db_url, "jobs", "--meta", "customer"), 2, "KEY=VALUE")


def test_cancel_retry_delete_by_filter_count_confirm_and_dry_run(
        run: Callable[..., Result], app: Tether, db_url: str) -> None:
    ids = enqueue(app, 4, meta={"customer": 42})
    other = enqueue(app, 1)
    r = run("-d", db_url, "cancel", "--meta", "customer=42", "--dry-run")
    assert r.stdout.strip() == "would cancel 4 job(s)"
    r = run("-d", db_url, "cancel", "--meta", "customer=42", input="n\n")
    assert r.exit_code == 1 and "cancel 4 job(s)?" in r.output  # declined: aborted, nothing changed
    assert app.count_jobs(state="cancelled") == 0
    r = run("-d", db_url, "cancel", "--meta", "customer=42", input="y\n")
    assert r.exit_code == 0 and "cancel: 4 job(s)" in r.stdout
    assert {app.get_job(i).state for i in ids} == {JobState.CANCELLED}  # type: ignore[union-attr]
    r = run("-d", db_url, "retry", "--state", "cancelled", "--yes")
    assert "retry: 4 job(s)" in r.stdout
    r = run("-d", db_url, "purge", "default", "--yes")
    assert "cancel: 5 job(s)" in r.stdout
    one_line_error(run("-d", db_url, "delete", "--task", "sync", "--yes", "--queue", "default", "--state",
                       "queued"), 2, "finished jobs only")
    r = run("-d", db_url, "delete", str(other[0]), "--yes")
    assert r.exit_code == 0 and "delete: 1 job(s)" in r.stdout and app.get_job(other[0]) is None
    r = run("-d", db_url, "delete", "--task", "sync", "--yes")
    assert "delete: 4 job(s)" in r.stdout and app.count_jobs() == 0
    one_line_error(run("-d", db_url, "cancel"), 2, "give job ids, or filters")
    one_line_error(run("-d", db_url, "cancel", "1", "--task", "sync"), 2, "not both")


def test_single_ids_and_rerun(run: Callable[..., Result], app: Tether, db_url: str) -> None:
    (a, b) = enqueue(app, 2)
    r = run("-d", db_url, "cancel", str(a), str(b))
    assert r.stdout.splitlines() == [f"job {a}: cancelled", f"job {b}: cancelled"]
    r = run("-d", db_url, "rerun", str(a))
    assert r.exit_code == 0, r.output
    new = int(r.stdout.strip())
    job = app.get_job(new)
    assert job is not None and job.rerun_of == a and job.state is JobState.QUEUED
    one_line_error(run("-d", db_url, "rerun", str(new)), 1, "only a finished job")
    one_line_error(run("-d", db_url, "delete", str(new), "--yes"), 1, "not finished")
