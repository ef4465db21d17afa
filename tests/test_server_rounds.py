"""A tether server's database connections for its remote workers' rounds.

Every remote worker's claims and reports pass through the server's event
loop. They ran on the store's default for one worker (two connections), so
all of a fleet's rounds queued for the same two: against a database 10 ms
away, 8 remote workers ran 0.4x as many local ones (docs/performance.md).
Here the rounds are held at the database by a lock the test takes, and the
test counts how many of them wait there at once.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from tether.config import DEFAULT_SERVER_ROUND_CONNECTIONS
from tether.errors import ConfigError
from tether.server import create_app, parse_tokens
from tether.store import open_store

from .conftest import PG_URL, served
from .test_remote_processes import TOKEN, ServerProcess
from .test_server import WORKER, Client, register

#: the tests whose database is PostgreSQL's (SQLite runs a server's rounds on its loop, one at a time)
postgresql = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def _waiting(conn: psycopg.Connection[tuple[int]], schema: str) -> int:
    """Statements on the jobs of this schema that wait for a lock (the rounds held back)."""
    row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                       (f'%"{schema}".jobs%',)).fetchone()
    assert row is not None
    return row[0]


def _rounds_at_once(url: str, token: str, db_url: str, workers: int, expect: int) -> int:
    """Send one claim for each of ``workers`` workers, all held at the database;
    the most that waited there at once (sampled until ``expect`` did, then 0.5 s more)."""
    schema = db_url.rpartition("schema=")[2]
    client = Client(url)
    for k in range(workers):
        assert register(client, f"w{k}", token)[0] == 200
    with psycopg.connect(PG_URL) as lock, ThreadPoolExecutor(workers) as pool:
        # Every claim reads the queues table (paused queues, limits): held
        # here, each round waits at the database on a connection of its own.
        lock.execute(f'LOCK TABLE "{schema}".queues IN ACCESS EXCLUSIVE MODE')
        claims = [pool.submit(client.request, "POST", "/v1/claim",
                              {"worker": f"w{k}", "queues": ["default"], "limit": 1, "lease_ttl": 30}, token)
                  for k in range(workers)]
        with psycopg.connect(PG_URL, autocommit=True) as probe:
            deadline, seen = time.monotonic() + 6, 0  # (the client gives up after 10 s)
            while time.monotonic() < deadline:
                seen = max(seen, _waiting(probe, schema))
                if seen >= expect:
                    deadline = min(deadline, time.monotonic() + 0.5)
                time.sleep(0.05)
        lock.rollback()
        answers = [c.result(timeout=30) for c in claims]
    assert [status for status, _ in answers] == [200] * workers
    return seen


@postgresql
def test_a_server_runs_its_workers_rounds_side_by_side(db_url: str) -> None:
    workers = 6
    assert workers <= DEFAULT_SERVER_ROUND_CONNECTIONS
    with served(db_url, client_clock=False, tokens=f"{WORKER} worker") as url:
        seen = _rounds_at_once(url, WORKER, db_url, workers, workers)
    assert seen == workers, f"{seen} of {workers} workers' rounds reached the database at once"


@postgresql
def test_tether_server_round_connections_bounds_them(db_url: str, tmp_path: Path) -> None:
    """``tether server --round-connections 3``: three rounds at the database at
    once, the rest wait on the server for a connection."""
    open_store(db_url).migrate()
    server = ServerProcess(db_url, tmp_path, "--round-connections", "3")
    try:
        assert _rounds_at_once(server.url, TOKEN, db_url, 5, 3) == 3
    finally:
        server.close()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_round_connections_must_be_a_positive_int(tmp_path: Path, bad: object) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    try:
        with pytest.raises(ConfigError, match="round_connections"):
            create_app(store, parse_tokens(f"{secrets.token_urlsafe(20)} admin", "t"),
                       round_connections=bad)  # type: ignore[arg-type]
    finally:
        store.close()
