"""Shared fixtures: every backend test runs against a real SQLite file and a real
PostgreSQL server (its own schema per test, dropped afterwards).

The ``store`` fixture also serves ``http-sqlite`` and ``http-postgresql`` to
modules that ask for them (``test_conformance.py`` overrides ``backend`` with
``STORE_BACKENDS``): a ``tether server`` on a free loopback port, on a thread
of this process, over a fresh database, and the HTTP store talking to it.

PostgreSQL comes from ``TETHER_TEST_PG_URL`` (default: the local server on
127.0.0.1:5432, database ``test``). Without a server the PostgreSQL half is
skipped locally, but under ``CI=true`` it fails: CI must prove both backends.

``postgresql-pgbouncer`` is the same server through PgBouncer in transaction
pooling mode (``TETHER_TEST_PGBOUNCER_URL``, default 127.0.0.1:64329, the
private pooler ``scripts/test`` starts), with ``?pgbouncer=transaction``; the
conformance suite and the real-process tests run on it too. Skipped locally
without a pooler, failed under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tether import Tether
from tether.store import Store, open_store

#: the plugin a user gets through the pytest11 entry point (named so that both may load it)
pytest_plugins = ["tether.testing.pytest_plugin"]
#: a user's project, run by its own pytest process (tests/test_testing.py)
collect_ignore = ["examples", "django"]  # django: Python 3.12+, run by scripts/test in .venv-django

PG_URL = os.environ.get("TETHER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PGBOUNCER_URL = os.environ.get("TETHER_TEST_PGBOUNCER_URL", "postgresql://postgres@127.0.0.1:64329/test")
#: PostgreSQL through PgBouncer in transaction pooling mode
PGBOUNCER = "postgresql-pgbouncer"
BACKENDS = ["sqlite", "postgresql"]
HTTP_BACKENDS = ["http-sqlite", "http-postgresql"]
STORE_BACKENDS = [*BACKENDS, PGBOUNCER, *HTTP_BACKENDS]
#: an admin token for the in-process test servers
TEST_TOKEN = secrets.token_urlsafe(24)


def _pg_available() -> str | None:
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return None
    except Exception as exc:  # pragma: no cover - depends on the machine
        return str(exc)


_PG_PROBLEM = _pg_available()


def _require_pg() -> None:
    if _PG_PROBLEM is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI=true but {PG_URL} is unreachable: {_PG_PROBLEM}")
        pytest.skip(f"no PostgreSQL at {PG_URL}: {_PG_PROBLEM}")


@functools.cache
def _pgbouncer_problem() -> str | None:
    try:  # nothing prepared: the pooler may hand each statement another server connection
        with psycopg.connect(PGBOUNCER_URL, connect_timeout=3, prepare_threshold=None) as conn:
            conn.execute("SELECT 1")
        return None
    except Exception as exc:  # pragma: no cover - depends on the machine
        return str(exc)


def require_pgbouncer() -> None:
    problem = _pgbouncer_problem()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PgBouncer is required under CI=true but {PGBOUNCER_URL} is unreachable: {problem}")
        pytest.skip(f"no PgBouncer at {PGBOUNCER_URL} (scripts/test starts one): {problem}")


def _with_schema(url: str, schema: str) -> str:
    return url + ("&" if "?" in url else "?") + f"schema={schema}"


def backend_param(request: pytest.FixtureRequest) -> str:
    """The backend fixture's body, for modules that parametrize it over more backends."""
    if str(request.param).removeprefix("http-") in ("postgresql", PGBOUNCER):
        _require_pg()
    if request.param == PGBOUNCER:
        require_pgbouncer()
    return str(request.param)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL for this test (not yet migrated); for an
    ``http-*`` backend, the database behind the server."""
    if backend.removeprefix("http-") == "sqlite":
        yield f"sqlite:///{tmp_path / 'tether.db'}"
        return
    schema = f"t_{secrets.token_hex(6)}"
    if backend == PGBOUNCER:
        yield _with_schema(PGBOUNCER_URL, schema) + "&pgbouncer=transaction"
    else:
        yield _with_schema(PG_URL, schema)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextlib.contextmanager
def served(db_url: str, *, client_clock: bool = True, tokens: str | None = None, **options: float) -> Iterator[str]:
    """A tether server over ``db_url`` (migrated) on a thread; yields its URL."""
    from tether.server import create_app, parse_tokens
    from tether.server.run import ServerThread

    local = open_store(db_url)
    local.migrate()
    table = parse_tokens(tokens or f"{TEST_TOKEN} admin", "test tokens")
    try:
        with ServerThread(create_app(local, table, client_clock=client_clock, **options)) as server:  # type: ignore[arg-type]
            yield server.url
    finally:
        local.close()


@pytest.fixture
def store(backend: str, db_url: str) -> Iterator[Store]:
    if backend.startswith("http-"):
        with served(db_url) as url:
            s = open_store(url, token=TEST_TOKEN)
            yield s
            s.close()
        return
    s = open_store(db_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def direct(backend: str, db_url: str, store: Store) -> Iterator[Store]:
    """The database itself: ``store``, or, for an ``http-*`` backend, the
    database behind the server (what a server has no endpoint for yet, such
    as enqueueing a workflow, is done here)."""
    if not backend.startswith("http-"):
        yield store
        return
    s = open_store(db_url)
    yield s
    s.close()


@pytest.fixture
def flows_app(db_url: str, backend: str) -> Iterator[Tether]:
    """An app on this test's database (migrated), for the workflow and batch
    APIs, which need a direct store: skipped for the others."""
    if backend.startswith("http-") or backend.endswith("pgbouncer"):
        pytest.skip("the app's workflow and batch API is tested on a direct store")
    app = Tether(db_url)
    app.migrate()
    yield app
    app.close()


@pytest.fixture
def make_app(db_url: str) -> Iterator[object]:
    """``make_app(**timers) -> Tether`` on this test's database, migrated."""
    apps: list[Tether] = []

    def factory(**kwargs: object) -> Tether:
        app = Tether(db_url, **kwargs)  # type: ignore[arg-type]
        app.migrate()
        apps.append(app)
        return app

    yield factory
    for app in apps:
        app.close()


def take_from(store: Store, worker_id: str, job_id: int, *, reap: Callable[[], object] | None = None,
              timeout: float = 10) -> None:
    """End a live worker's lease on ``job_id`` as if another worker's reaper had
    judged it dead: expire its leases, then reap. That worker's heartbeat may
    renew the lease between the two statements (a lapsed lease is still its
    own until reaped), or its own reaper may reap first: so this repeats until
    the attempt has left the worker's hands, whoever reaped it."""
    held = store.get_job(job_id)
    assert held is not None and held.state.value == "running" and held.locked_by == worker_id, held
    deadline = time.monotonic() + timeout
    while True:
        store.lapse_leases([worker_id])
        if reap is not None:
            reap()
        else:
            store.reap(100)
        job = store.get_job(job_id)
        assert job is not None
        if job.attempt != held.attempt or job.state.value != "running":
            return
        assert time.monotonic() < deadline, f"job {job_id} stayed with worker {worker_id}"
        time.sleep(0.01)
