"""Expiry (issue 44): ``using(expires="10m")`` or ``expires_at=datetime``. The
claim decides (an expired job is never started, through every claim path, on
every store: the ``store`` fixture's SQLite, PostgreSQL, PgBouncer, and both
through ``tether server``); the expiry service (worker/expiry.py) ends such
jobs cancelled with an attempts row of outcome ``expired``. Clocks are moved
with ``now=``, except where real worker processes are down and come back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tether import ConfigError, JobContext, Tether
from tether.cli.render import outcome_text
from tether.model import JobState, Outcome
from tether.store import Store, open_store
from tether.worker.expiry import Expiry

from .conftest import STORE_BACKENDS, TEST_TOKEN, backend_param, take_from
from .test_conformance import TTL, W2, Rounds, W, get, new_job
from .test_dashboard import _client, login

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture(params=["sync", "async"])
def rounds(store: Store, request: pytest.FixtureRequest) -> Rounds:
    return Rounds(store, request.param)


@pytest.fixture
def sweeper(backend: str, db_url: str, store: Store) -> Iterator[Store]:
    """The store the expiry service runs on: the database's own (a server's
    clients do not sweep: the server does, with its store)."""
    if not backend.startswith("http-"):
        yield store
        return
    local = open_store(db_url)
    yield local
    local.close()


def test_no_claim_path_starts_an_expired_job(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    (gone,) = store.enqueue([new_job(expires_at=t0 + timedelta(seconds=60))], now=t0)
    (keeps,) = store.enqueue([new_job(expires_at=t0 + timedelta(seconds=600))], now=t0)
    later = t0 + timedelta(seconds=61)
    assert rounds.claim_ids(W2, [gone], ["default"], TTL, now=later) == []
    assert rounds.complete_and_claim_ids(W2, [], [gone], ["default"], TTL, now=later) == (set(), [])
    (c,) = rounds.claim(W2, ["default"], 10, TTL, now=later)  # the one not expired
    assert c.id == keeps
    assert rounds.complete_and_claim(W2, [(c.id, c.attempt, None)], ["default"], 10, TTL, now=later) == ({keeps}, [])
    assert rounds.claim(W2, ["default"], 10, TTL, now=later, tasks=["t"]) == []
    job = get(store, gone)
    assert job.state is JobState.QUEUED and job.attempt == 0  # never started, by any path


def test_a_job_is_claimable_until_its_expiry(store: Store, rounds: Rounds) -> None:
    t0 = store.db_now()
    (jid,) = store.enqueue([new_job(expires_at=t0 + timedelta(seconds=60))], now=t0)
    (c,) = rounds.claim(W, ["default"], 10, TTL, now=t0 + timedelta(seconds=59))
    assert c.id == jid
    assert rounds.complete(W, [(c.id, c.attempt, None)], now=t0 + timedelta(seconds=120)) == {jid}
    assert get(store, jid).state is JobState.SUCCEEDED  # started in time: it runs to its end


def test_the_expiry_service_ends_an_expired_job_with_its_outcome(store: Store, sweeper: Store) -> None:
    t0 = store.db_now()
    (jid,) = store.enqueue([new_job(expires_at=t0 - timedelta(seconds=1), max_attempts=2)], now=t0)
    (fresh,) = store.enqueue([new_job(expires_at=t0 + timedelta(hours=1))], now=t0)
    (plain,) = store.enqueue([new_job()], now=t0)
    ended = sweeper.expire(W, limit=100, now=t0)
    assert [(e.id, e.task, e.queue) for e in ended] == [(jid, "t", "default")]
    job = get(store, jid)
    assert job.state is JobState.CANCELLED and job.finished_at is not None
    assert job.last_error is not None and "expired" in job.last_error
    assert [(a.attempt, a.outcome, a.worker) for a in job.attempts] == [(1, Outcome.EXPIRED, W)]
    assert job.attempts_used == 0  # its budget is untouched
    assert {get(store, j).state for j in (fresh, plain)} == {JobState.QUEUED}
    assert sweeper.expire(W, limit=100, now=t0) == []  # terminal is final: swept once
    # an operator's retry: the next claim takes the attempt after the expired one (still expired: never started)
    store.retry(jid, now=t0)
    assert sweeper.expire(W, limit=100, now=t0)[0].id == jid
    assert [a.attempt for a in get(store, jid).attempts] == [1, 2]


def test_the_service_sweeps_in_bounded_rounds(store: Store, sweeper: Store) -> None:
    t0 = store.db_now()
    store.enqueue([new_job(args={"i": i}, expires_at=t0 + timedelta(seconds=1)) for i in range(7)], now=t0)
    assert len(sweeper.expire(W, limit=5, now=t0 + timedelta(seconds=2))) == 5
    assert len(sweeper.expire(W, limit=5, now=t0 + timedelta(seconds=2))) == 2
    service = Expiry(sweeper, W)
    assert service.run_once() == 0 and service.expired == 0


def test_bad_expiry_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 't.db'}")
    app.migrate()
    try:
        @app.task()
        def send_code(ctx: JobContext, phone: str) -> None: ...

        now = datetime.now(UTC)
        cases: list[tuple[dict[str, object], str]] = [
            ({"expires": "soon"}, "expires must be a duration"),
            ({"expires": "-10m"}, "expires must be a duration"),
            ({"expires": 0}, "more than 0 seconds"),
            ({"expires_at": now - timedelta(seconds=1)}, "not in the future"),
            ({"expires_at": datetime(2030, 1, 1)}, "timezone-aware"),
            ({"expires": "10m", "expires_at": now + timedelta(hours=1)}, "either expires or expires_at"),
            ({"expires": "10m", "delay": 600}, "before it is due to run"),
            ({"expires_at": now + timedelta(minutes=5), "run_at": now + timedelta(minutes=10)},
             "before it is due to run"),
        ]
        for options, message in cases:
            with pytest.raises(ConfigError, match=message):
                send_code.using(**options).enqueue(phone="1")
        assert app.store.list_jobs() == []
        jid = send_code.using(expires="10m").enqueue(phone="1")
        job = app.get_job(jid)
        assert job is not None and job.expires_at is not None
        assert timedelta(minutes=9) < job.expires_at - job.created_at <= timedelta(minutes=10, seconds=1)
        at = now + timedelta(hours=2)
        assert app.get_job(send_code.using(expires_at=at).enqueue(phone="2")).expires_at == at  # type: ignore[union-attr]
    finally:
        app.close()


def test_tether_jobs_and_the_dashboard_show_expired(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    app = Tether(url)
    app.migrate()
    try:
        t0 = app.store.db_now()
        (jid,) = app.store.enqueue([new_job(expires_at=t0 + timedelta(seconds=1))], now=t0)
        app.store.expire("w", limit=10, now=t0 + timedelta(seconds=2))
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TETHER_DATABASE_URL": url, "COLUMNS": "200"}
        shown = subprocess.run([sys.executable, "-m", "tether", "job", str(jid)], env=env, capture_output=True,
                               text=True, timeout=60)
        listed = subprocess.run([sys.executable, "-m", "tether", "jobs"], env=env, capture_output=True,
                                text=True, timeout=60)
        assert shown.returncode == 0 and listed.returncode == 0, (shown.stderr, listed.stderr)
        assert "expired" in shown.stdout and "cancelled" in listed.stdout, (shown.stdout, listed.stdout)
        assert "expires" in shown.stdout and "expired: not started" in listed.stdout
        assert outcome_text(Outcome.EXPIRED).plain == "expired"
        with _client(app) as c:
            login(c)
            page = c.get(f"/jobs/{jid}")
            assert page.status_code == 200 and "o-expired" in page.text and "never starts" in page.text
    finally:
        app.close()


# -- real workers: expiry while queued, and while the worker is down -------------------------

WORKER_APP = """
import os
import time
from pathlib import Path

from tether import JobContext, Tether

app = Tether(os.environ["TETHER_DATABASE_URL"])
MARKS = Path(os.environ["MARKS"])


@app.task(name="send_code")
def send_code(ctx: JobContext, n: int) -> None:
    with MARKS.open("a") as f:
        f.write(f"{n}:{ctx.attempt}\\n")
    if n == 0:
        time.sleep(3600)  # held until its worker is killed
"""


def _worker(db_url: str, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TETHER_DATABASE_URL": db_url, "MARKS": str(tmp_path / "marks"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])}
    return subprocess.Popen([sys.executable, "-m", "tether", "worker", "--app", "expiry_app:app", *extra],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _marks(tmp_path: Path) -> list[str]:
    path = tmp_path / "marks"
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_jobs_expire_while_queued_and_while_their_worker_is_down(db_url: str, tmp_path: Path) -> None:
    """Job 0 starts, then its worker is killed; its lease is taken back, and
    by the time a worker is back job 0's expiry and job 1's (queued all along,
    never started) have passed: neither runs again, both end expired; job 2,
    without expiry, runs."""
    (tmp_path / "expiry_app.py").write_text(textwrap.dedent(WORKER_APP))
    app = Tether(db_url)
    app.migrate()
    try:
        @app.task(name="send_code")
        def send_code(ctx: JobContext, n: int) -> None: ...

        first = send_code.using(expires="4s").enqueue(n=0)
        proc = _worker(db_url, tmp_path, "--concurrency", "1")
        try:
            deadline = time.monotonic() + 60
            while _marks(tmp_path) != ["0:1"]:
                assert time.monotonic() < deadline and proc.poll() is None, "the worker never started job 0"
                time.sleep(0.05)
            queued = send_code.using(expires="4s").enqueue(n=1)  # waits: the one slot is taken
            holder = get(app.store, first).locked_by
            assert holder is not None
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        take_from(app.store, holder, first)  # its lease taken back: queued again, budget left
        assert get(app.store, first).state is JobState.QUEUED
        plain = send_code.enqueue(n=2)
        last = max(get(app.store, j).expires_at for j in (first, queued))  # type: ignore[type-var]
        time.sleep(max(0.0, (last - app.store.db_now()).total_seconds()) + 0.3)  # type: ignore[operator]
        burst = _worker(db_url, tmp_path, "--burst")
        out, _ = burst.communicate(timeout=120)
        assert burst.returncode == 0, out
        assert sorted(_marks(tmp_path)) == ["0:1", "2:1"]  # neither expired job started again
        assert get(app.store, plain).state is JobState.SUCCEEDED
        Expiry(app.store, "test-sweeper").run_once()  # the service's tick (a worker's may not have come yet)
        for jid, outcomes in ((first, [Outcome.LEASE_EXPIRED, Outcome.EXPIRED]), (queued, [Outcome.EXPIRED])):
            job = get(app.store, jid)
            assert job.state is JobState.CANCELLED and [a.outcome for a in job.attempts] == outcomes, job
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_claim_stays_index_served_with_the_expiry_predicate(db_url: str) -> None:
    """EXPLAIN of the claims over a backlog: the claim indexes hand rows over
    in order (no sort of the backlog, no sequential scan), expiry a filter."""
    app = Tether(db_url)
    app.migrate()
    try:
        store = app.store
        store.enqueue([new_job(args={"i": i}) for i in range(2000)])
        schema = db_url.split("schema=")[1]
        with psycopg.connect(db_url.split("?")[0]) as conn:
            conn.execute(f'ANALYZE "{schema}".jobs')
        q = store.q  # type: ignore[attr-defined]
        params = {"worker": W, "queues": ["default"], "limit": 10, "lease_ttl": TTL, "now": None, "done": None,
                  "tasks": ["t"]}
        with psycopg.connect(db_url.split("?")[0]) as conn:
            conn.execute(f'SET search_path = "{schema}"')
            for name, index in (("claim", "jobs_claim_idx"), ("claim_known", "jobs_claim_task_idx")):
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + q[name], params))
                assert index in plan and "Seq Scan on jobs" not in plan, plan
                conn.rollback()
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["http-sqlite", "http-postgresql"], indirect=True)
def test_a_tether_server_ends_the_expired_jobs_of_its_workers(db_url: str) -> None:
    """Workers through a server do not sweep (their store cannot): the
    server's duties run the expiry service on its own store."""
    from tether.server import create_app, parse_tokens
    from tether.server.run import ServerThread

    local = open_store(db_url)
    local.migrate()
    sweeper_store = open_store(db_url)
    service = Expiry(sweeper_store, "tether-server:test", interval=0.05)
    try:
        with ServerThread(create_app(local, parse_tokens(f"{TEST_TOKEN} admin", "t"), services=[service])) as server:
            app = Tether(server.url, token=TEST_TOKEN)
            try:
                @app.task(name="send_code")
                def send_code(ctx: JobContext, n: int) -> None: ...

                jid = send_code.using(expires=0.3).enqueue(n=1)
                with pytest.raises(NotImplementedError, match="its server does"):
                    app.store.expire("w", limit=1)
                deadline = time.monotonic() + 30
                while get(app.store, jid).state is not JobState.CANCELLED:
                    assert time.monotonic() < deadline, "the server never ended the expired job"
                    time.sleep(0.05)
                assert [(a.outcome, a.worker) for a in get(app.store, jid).attempts] == [
                    (Outcome.EXPIRED, "tether-server:test")]
            finally:
                app.close()
    finally:
        sweeper_store.close()
        local.close()
