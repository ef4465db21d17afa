"""tether behind PgBouncer in transaction pooling mode (``?pgbouncer=transaction``).

The conformance suite and the real-process tests run through the pooler as the
``postgresql-pgbouncer`` backend; these tests check the pooler is what it says
it is, that the option leaves no session state behind, and how workers are
woken through it: by polling, or by LISTEN on a direct ``listen_url``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tether import JobContext, JobState, Tether
from tether.errors import InvalidDSN
from tether.store import Store, open_store
from tether.store.postgres.connect import POOLED_POLL_INTERVAL
from tether.store.postgres.store import PostgresStore

from .conftest import PG_URL, PGBOUNCER, PGBOUNCER_URL
from .test_conformance import TTL, W, new_job
from .test_worker import FAST, is_final, running, wait_job

pytestmark = pytest.mark.parametrize("backend", [PGBOUNCER], indirect=True)


@pytest.fixture
def pg(store: Store) -> PostgresStore:
    assert isinstance(store, PostgresStore) and store.dsn.options["pgbouncer"] == "transaction"
    return store


def test_the_pooler_under_test_is_pgbouncer_in_transaction_mode(backend: str) -> None:
    params = conninfo_to_dict(PGBOUNCER_URL)
    params["dbname"] = "pgbouncer"  # the admin console; it speaks the simple query protocol only
    with psycopg.connect(make_conninfo(**params), autocommit=True) as conn:
        res = conn.pgconn.exec_(b"SHOW CONFIG")
        config = {res.get_value(i, 0): res.get_value(i, 1) for i in range(res.ntuples)}
    assert config[b"pool_mode"] == b"transaction"


def test_without_the_option_the_refusal_says_what_to_add(backend: str) -> None:
    """tether's direct settings go as startup options, which PgBouncer refuses."""
    with pytest.raises(InvalidDSN) as info:
        open_store(PGBOUNCER_URL + ("&" if "?" in PGBOUNCER_URL else "?") + "schema=t_unused")
    assert "unsupported startup parameter" in str(info.value)
    assert "pgbouncer=transaction" in str(info.value)


def test_through_the_pooler_no_statement_is_prepared_nor_any_session_setting_sent(pg: PostgresStore) -> None:
    pg.enqueue([new_job(args={"n": n}) for n in range(20)])
    jobs = pg.claim(W, ["default"], 5, TTL)
    for _ in range(3):
        _, jobs = pg.complete_and_claim(W, [(j.id, j.attempt, None) for j in jobs], ["default"], 5, TTL)
    for pool in (pg.pool, pg.round_pool):
        with pool.connection() as conn:
            # whichever server connection PgBouncer lends this transaction
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
            (mode,) = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone() or ("?",)
            assert mode == "auto"  # the server's default: no options= reached it


def test_without_a_listen_url_workers_poll(pg: PostgresStore) -> None:
    assert pg.listen(lambda queue: None) is None
    assert pg.default_poll_interval == POOLED_POLL_INTERVAL


@pytest.fixture
def listen_db_url(db_url: str) -> str:
    """This test's pooled URL with a direct listen_url (percent-encoded, as a URL in a query should be)."""
    return db_url + "&listen_url=" + quote(PG_URL, safe="")


def test_a_listen_url_hears_enqueues_sent_through_the_pooler(listen_db_url: str) -> None:
    store = open_store(listen_db_url)
    try:
        store.migrate()
        heard: list[str] = []
        got = threading.Event()

        def on_enqueue(queue: str) -> None:
            if queue != "*":  # "*": (re)connected, something may have landed meanwhile
                heard.append(queue)
                got.set()

        listener = store.listen(on_enqueue)
        assert listener is not None
        try:
            deadline = time.monotonic() + 10
            while not listener.healthy and time.monotonic() < deadline:
                time.sleep(0.02)
            store.enqueue([new_job(queue="pooled")])
            assert got.wait(5), "no NOTIFY reached the direct LISTEN connection"
            assert heard == ["pooled"]
        finally:
            listener.close()
    finally:
        store.close()


def test_a_worker_with_a_listen_url_is_woken_at_once(
    listen_db_url: str, make_app: Callable[..., Tether]
) -> None:
    make_app()  # migrates this test's schema
    app = Tether(listen_db_url, **FAST)  # type: ignore[arg-type]
    try:
        @app.task
        def hello(ctx: JobContext) -> str:
            return "hi"

        listening = f"LISTEN {quote_ident(app.store.channel)}"  # type: ignore[attr-defined]
        with running(app, poll_interval=60):  # polling alone would take a minute
            deadline = time.monotonic() + 10
            while not _listens(listening) and time.monotonic() < deadline:
                time.sleep(0.05)
            t0 = time.monotonic()
            job = wait_job(app, hello.enqueue(), is_final, timeout=5)
            assert job.state is JobState.SUCCEEDED
            assert time.monotonic() - t0 < 2, "NOTIFY did not wake the worker"
    finally:
        app.close()


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _listens(statement: str) -> bool:
    """Whether a session of the server (not of the pooler) runs this LISTEN."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE query = %s AND state = 'idle'", (statement,)
        ).fetchone() is not None


def test_a_listen_url_that_does_not_answer_is_refused_when_listening(db_url: str) -> None:
    store = open_store(db_url + "&listen_url=" + quote("postgresql://postgres@127.0.0.1:9/test", safe=""))
    try:
        with pytest.raises(InvalidDSN) as info:
            store.listen(lambda queue: None)
        assert "listen_url" in str(info.value)
    finally:
        store.close()



def test_through_the_pooler_jit_left_on_is_named_once_with_what_to_run(
    pg: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """tether turns JIT off with a startup option, which a transaction pooler
    refuses: through one, a worker's claims against a long backlog would be
    compiled on every round (test_pg_plans). A check of the schema, as every
    worker makes at start, says so once, with the statement that fixes it."""
    import logging

    from tether.store.postgres import connect

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('jit') = 'on' AND pg_jit_available()").fetchone()
    connect._JIT_WARNED.discard(pg.dsn.url)
    with caplog.at_level(logging.WARNING, logger="tether.store.postgres"):
        pg.check_schema()
        pg.check_schema()
    lines = [r.getMessage() for r in caplog.records if "JIT" in r.getMessage()]
    if row != (True,):  # a server that compiles nothing (no LLVM, or jit off for the role): nothing to say
        assert lines == []
        return
    [line] = lines
    assert "through a transaction pooler" in line and 'ALTER ROLE "postgres" SET jit = off' in line
    direct = open_store(PG_URL + ("&" if "?" in PG_URL else "?") + f"schema={pg.schema}")
    try:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tether.store.postgres"):
            direct.check_schema()
        assert not [r for r in caplog.records if "JIT" in r.getMessage()]
    finally:
        direct.close()

@pytest.mark.parametrize("where", ["the-pooler", "another-database"])
def test_a_listen_url_that_could_never_hear_is_refused_when_listening(db_url: str, where: str) -> None:
    """Two listen_urls that connect, or seem to, and would never hear an
    enqueue: the pooled URL itself (a transaction pooler refuses LISTEN's
    startup options: the listener warned every second, for ever) and another
    database of the same server (silent: every wake-up lost). Both went
    unnoticed (a new user's walkthrough); both are refused at start."""
    pooled_url = db_url.split("?", 1)[0]
    listen = pooled_url if where == "the-pooler" else PG_URL.rsplit("/", 1)[0] + "/postgres"
    store = open_store(db_url + "&listen_url=" + quote(listen, safe=""))
    try:
        with pytest.raises(InvalidDSN) as info:
            store.listen(lambda queue: None)
        assert "listen_url" in str(info.value)
        if where == "another-database":
            assert "another database" in str(info.value)
    finally:
        store.close()
