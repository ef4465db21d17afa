"""Results (issue 20): ``app.wait`` / ``app.wait_async``, and the NOTIFY that
wakes them on PostgreSQL. Real databases, real workers; SQLite and a tether
server poll."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tether import JobCancelled, JobContext, JobFailed, JobState, Outcome, Tether
from tether.errors import ConfigError, JobNotFound
from tether.store.postgres.store import PostgresStore

from .conftest import TEST_TOKEN, served
from .test_conformance import TTL, W, new_job, sec
from .test_worker import FAST, running


def test_wait_returns_the_finished_job_with_its_result(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(name="add")
    async def add(ctx: JobContext, a: int, b: int) -> int:
        await asyncio.sleep(0.2)
        return a + b

    with running(app):
        job = app.wait(add.enqueue(a=2, b=3), timeout=20)
    assert job.state is JobState.SUCCEEDED and job.result == 5


def test_wait_raises_job_failed_with_the_last_error(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(name="bad", max_attempts=1)
    def bad(ctx: JobContext) -> None:
        raise ValueError("no such customer")

    job_id = bad.enqueue()
    with running(app), pytest.raises(JobFailed) as err:
        app.wait(job_id, timeout=20)
    assert err.value.job.state is JobState.DEAD and err.value.job_id == job_id
    assert err.value.error == "ValueError: no such customer" and "no such customer" in str(err.value)


def test_wait_raises_job_cancelled_timeout_and_not_found(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    (queued,) = app.store.enqueue([new_job()])
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"job {queued} did not finish within 0.3s"):
        app.wait(queued, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 3
    app.cancel(queued)
    with pytest.raises(JobCancelled) as err:
        app.wait(queued, timeout=5)
    assert err.value.job is not None and err.value.job.state is JobState.CANCELLED
    with pytest.raises(JobNotFound):
        app.wait(987_654_321)
    with pytest.raises(ConfigError, match="timeout"):
        app.wait(queued, timeout=-1)


def test_wait_async_waits_without_blocking_its_loop(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(name="slow")
    async def slow(ctx: JobContext) -> str:
        await asyncio.sleep(0.3)
        return "ok"

    async def main() -> tuple[list[str], list[int]]:
        ticks: list[int] = []

        async def ticker() -> None:
            while True:
                ticks.append(1)
                await asyncio.sleep(0.02)

        t = asyncio.create_task(ticker())
        ids = [await slow.enqueue_async() for _ in range(3)]
        jobs = await asyncio.gather(*(app.wait_async(i, timeout=20) for i in ids))
        t.cancel()
        return [j.result for j in jobs], ticks

    with running(app):
        results, ticks = asyncio.run(main())
    assert results == ["ok"] * 3
    assert len(ticks) >= 10  # the loop kept running while it waited


def test_wait_async_raises_as_wait_does(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    (job_id,) = app.store.enqueue([new_job()])
    with pytest.raises(TimeoutError):
        asyncio.run(app.wait_async(job_id, timeout=0.2))
    app.cancel(job_id)
    with pytest.raises(JobCancelled):
        asyncio.run(app.wait_async(job_id))


def test_wait_over_a_tether_server_polls(db_url: str) -> None:
    with served(db_url) as url:
        app = Tether(url, token=TEST_TOKEN)
        try:
            store = app.store
            (job_id,) = store.enqueue([new_job()])
            done = threading.Timer(0.3, lambda: _finish(store, job_id))
            done.start()
            job = app.wait(job_id, timeout=10)
            done.join()
            assert job.state is JobState.SUCCEEDED and job.result == {"ok": True}
        finally:
            app.close()


def _finish(store: Any, job_id: int) -> None:
    (c,) = store.claim(W, ["default"], 1, TTL)
    assert c.id == job_id
    store.complete(W, [(c.id, c.attempt, '{"ok": true}')])


# -- PostgreSQL: the notification ----------------------------------------------------------


@pytest.fixture
def pg(backend: str, make_app: Callable[..., Tether]) -> Iterator[Tether]:
    if backend != "postgresql":
        pytest.skip("the finish notification is PostgreSQL's")
    yield make_app()


class Heard:
    """A LISTEN of our own on the finish channel: the ids each notification carried."""

    def __init__(self, store: PostgresStore) -> None:
        self.conn = psycopg.connect(store.dsn.url.split("?")[0], autocommit=True)
        self.conn.execute(f'LISTEN "{store.done_channel}"')

    def ids(self) -> list[list[int]]:
        return [[int(i) for i in n.payload.split(",")] for n in self.conn.notifies(timeout=0.3)]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_each_statement_that_finishes_jobs_sends_one_notification_of_their_ids(pg: Tether) -> None:
    store = pg.store
    assert isinstance(store, PostgresStore)
    heard = Heard(store)
    try:
        now = store.db_now()
        ids = store.enqueue([new_job(max_attempts=1) for _ in range(6)], now=now)
        for job_id in ids:  # someone waits for each (only waited-for jobs are announced)
            store.watch_finished(job_id, 60)
        claimed = store.claim(W, ["default"], 6, TTL, now=now)
        assert heard.ids() == []  # enqueue and claim finish nothing
        a, b, c, d, e, f = claimed
        store.complete(W, [(a.id, a.attempt, None), (b.id, b.attempt, None)], now=now)
        assert heard.ids() == [[a.id, b.id]]  # one notification for the statement
        store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", now=now)  # dead: max_attempts=1
        assert heard.ids() == [[c.id]]
        store.fail(W, d.id, d.attempt, outcome=Outcome.SNOOZED, error="snoozed", delay=0, now=now)
        assert heard.ids() == []  # a snooze finishes nothing
        store.cancel(e.id, now=now)
        store.release(W, e.id, e.attempt, now=now)  # a release with a cancel request ends cancelled
        assert heard.ids() == [[e.id]]
        store.reap(10, now=now + sec(TTL + 1))  # f's lease lapsed, and its one attempt is spent
        assert heard.ids() == [[f.id]]
        unwaited, queued = store.enqueue([new_job(), new_job()], now=now)
        store.cancel(unwaited, now=now)  # nobody waits for it: the cancel announces nothing
        assert heard.ids() == []
        store.watch_finished(queued, 60)
        store.cancel(queued, now=now)  # the cancel query announces its own, as the trigger would
        assert heard.ids() == [[queued]]
        _, more = store.complete_and_claim(W, [], ["default"], 1, TTL, now=now)
        (g,) = more
        store.complete_and_claim(W, [(g.id, g.attempt, None)], ["default"], 1, TTL, now=now)
        assert heard.ids() == [[g.id]]
        assert set(ids) >= {a.id, b.id, c.id}
    finally:
        heard.conn.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_only_jobs_someone_waits_for_are_announced(pg: Tether) -> None:
    """A NOTIFY takes a server-wide lock at commit (migration 0008): the
    trigger sends one only for jobs a live waiter registered for."""
    store = pg.store
    assert isinstance(store, PostgresStore)
    heard = Heard(store)
    try:
        now = store.db_now()
        store.enqueue([new_job(max_attempts=1) for _ in range(5)], now=now)
        a, b, c, d, e = store.claim(W, ["default"], 5, TTL, now=now)
        store.complete(W, [(a.id, a.attempt, None)], now=now)
        store.fail(W, b.id, b.attempt, outcome=Outcome.FAILED, error="x", now=now)  # dead
        assert heard.ids() == []  # nobody waits: no notification at all
        token = store.watch_finished(d.id, 60)
        assert token is not None
        store.complete(W, [(c.id, c.attempt, None), (d.id, d.attempt, None)], now=now)
        assert heard.ids() == [[d.id]]  # only the waited-for id
        store.unwatch_finished(token)
        stale = store.watch_finished(e.id, 0.01)  # a waiter whose process died: its row expires
        time.sleep(0.1)
        store.complete(W, [(e.id, e.attempt, None)], now=now)
        assert heard.ids() == []
        assert stale is not None
        with psycopg.connect(store.dsn.url.split("?")[0], autocommit=True) as conn:
            live = store.watch_finished(a.id, 60)  # a registration deletes expired rows
            rows = conn.execute(f'SELECT id FROM "{store.dsn.schema}".waiters').fetchall()
            assert [r[0] for r in rows] == [live]
            store.unwatch_finished(live)
            assert conn.execute(f'SELECT count(*) FROM "{store.dsn.schema}".waiters').fetchone() == (0,)
    finally:
        heard.conn.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_wait_registers_while_it_waits_and_unregisters_when_it_returns(pg: Tether) -> None:
    store = pg.store
    assert isinstance(store, PostgresStore)
    (job_id,) = store.enqueue([new_job()])
    seen: list[int] = []

    def count() -> None:
        with psycopg.connect(store.dsn.url.split("?")[0], autocommit=True) as conn:
            row = conn.execute(f'SELECT count(*) FROM "{store.dsn.schema}".waiters WHERE job_id = %s',
                               (job_id,)).fetchone()
            seen.append(row[0] if row else -1)
        _finish(store, job_id)

    threading.Timer(0.5, count).start()
    assert pg.wait(job_id, timeout=20).state is JobState.SUCCEEDED
    assert seen == [1]
    with psycopg.connect(store.dsn.url.split("?")[0], autocommit=True) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{store.dsn.schema}".waiters').fetchone() == (0,)


def push_only(app: Tether, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once ``app``'s listener is connected, no poll comes in time: a wait that
    returns within seconds was woken by the notification."""
    from tether.store import waiting

    monkeypatch.setattr(waiting, "PUSH_CHECK", 30.0)
    watch = app._watch()
    watch._start()
    deadline = time.monotonic() + 10
    while not watch.pushed:
        assert time.monotonic() < deadline, "the listener never connected"
        time.sleep(0.01)
    monkeypatch.setattr(waiting, "FIRST_POLL", 30.0)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_pushed_wait_wakes_on_the_notification_not_a_poll(pg: Tether, monkeypatch: pytest.MonkeyPatch) -> None:
    store = pg.store
    push_only(pg, monkeypatch)
    (job_id,) = store.enqueue([new_job()])
    threading.Timer(0.2, lambda: _finish(store, job_id)).start()
    started = time.monotonic()
    job = pg.wait(job_id, timeout=20)
    assert job.state is JobState.SUCCEEDED
    assert time.monotonic() - started < 2.0


# -- pause and resume in a running worker ---------------------------------------------------


def test_a_paused_queue_is_not_claimed_by_a_running_worker_until_resumed(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    started: list[int] = []

    @app.task(name="mail", queue="emails")
    async def mail(ctx: JobContext) -> None:
        started.append(ctx.job_id)
        await asyncio.sleep(0.5)

    with running(app, poll_interval=0.05):
        first = mail.enqueue()
        deadline = time.monotonic() + 10
        while not started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        app.pause("emails")  # while the first job runs
        later = [mail.enqueue() for _ in range(3)]
        assert app.wait(first, timeout=10).state is JobState.SUCCEEDED  # the running job finished
        time.sleep(0.5)  # several poll intervals: nothing else claimed
        assert started == [first]
        assert all(app.get_job(i).state is JobState.QUEUED for i in later)  # type: ignore[union-attr]
        app.resume("emails")
        for i in later:
            assert app.wait(i, timeout=10).state is JobState.SUCCEEDED
    assert sorted(started) == [first, *later]


def test_tether_pause_and_resume_commands(db_url: str, make_app: Callable[..., Tether]) -> None:
    from click.testing import CliRunner

    from tether.cli.main import cli

    app = make_app()
    app.store.enqueue([new_job(queue="emails")])
    runner = CliRunner()
    out = runner.invoke(cli, ["--database", db_url, "pause", "emails"], catch_exceptions=False)
    assert out.exit_code == 0 and "queue emails: paused (paused now: emails)" in out.output
    out = runner.invoke(cli, ["--database", db_url, "status"], catch_exceptions=False)
    assert "paused: emails" in out.output
    out = runner.invoke(cli, ["--database", db_url, "resume", "emails"], catch_exceptions=False)
    assert out.exit_code == 0 and "queue emails: resumed (paused now: none)" in out.output
    assert "note:" not in out.stderr
    out = runner.invoke(cli, ["--database", db_url, "pause", "bad queue"])
    assert out.exit_code == 2
    assert app.store.paused_queues() == []


def test_pausing_or_limiting_a_queue_nothing_uses_says_so(db_url: str, make_app: Callable[..., Tether]) -> None:
    """A misspelt queue is still paused (pausing ahead of a deploy is fair), but
    the command names the queues in use, where before it said nothing."""
    from click.testing import CliRunner

    from tether.cli.main import cli

    app = make_app()
    app.store.enqueue([new_job(queue="emails")])
    runner = CliRunner()
    out = runner.invoke(cli, ["--database", db_url, "pause", "emials"], catch_exceptions=False)
    assert out.exit_code == 0 and app.store.paused_queues() == ["emials"]
    assert "no live worker serves queue 'emials'" in out.stderr and "queues in use: emails" in out.stderr
    out = runner.invoke(cli, ["--database", db_url, "limit", "emials", "--concurrency", "2"], catch_exceptions=False)
    assert out.exit_code == 0 and "queues in use: emails" in out.stderr
    for known in (["pause", "emails"], ["limit", "emails", "--concurrency", "2"], ["limit", "emials"]):
        out = runner.invoke(cli, ["--database", db_url, *known], catch_exceptions=False)
        assert out.exit_code == 0 and "note:" not in out.stderr, known


def test_the_dashboard_pauses_and_resumes_a_queue(make_app: Callable[..., Tether]) -> None:
    from starlette.testclient import TestClient

    from tether.dashboard import create_app
    from tether.metrics import Metrics

    from .test_dashboard import HOSTS, ORIGIN, TOKEN, csrf_of, login

    app = make_app()
    app.store.enqueue([new_job(queue="emails")])
    metrics = Metrics(depth_cache=0).attach(app).watch_store(app.store)
    with TestClient(create_app(app, token=TOKEN, metrics=metrics, allowed_hosts=HOSTS), follow_redirects=False) as web:
        login(web)
        page = web.get("/").text
        assert 'action="/queues/emails/pause"' in page
        r = web.post("/queues/emails/pause", data={"csrf": csrf_of(page)}, headers=ORIGIN)
        assert r.status_code == 303 and app.store.paused_queues() == ["emails"]
        page = web.get(r.headers["location"]).text
        assert "queue emails: paused" in page and 'action="/queues/emails/resume"' in page
        assert web.post("/queues/emails/resume", data={"csrf": "forged"}, headers=ORIGIN).status_code == 403
        assert app.store.paused_queues() == ["emails"]
        r = web.post("/queues/emails/resume", data={"csrf": csrf_of(page)}, headers=ORIGIN)
        assert r.status_code == 303 and app.store.paused_queues() == []
        r = web.post("/queues/bad queue/pause", data={"csrf": csrf_of(page)}, headers=ORIGIN)
        assert "is not a plain identifier" in web.get(r.headers["location"]).text
        assert app.store.paused_queues() == []
