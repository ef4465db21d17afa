"""Retention behind ``tether server``: the server prunes its own database;
workers that reach it over HTTP (a worker token, which may not prune) run no
pruner and say so once, instead of a refused prune logged every minute.

On SQLite: which database the server holds does not matter here (the pruner's
statements on both backends are in test_retention.py and the conformance suite).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tether import JobContext, Tether
from tether.cli.main import cli
from tether.cli.server_cmd import RETENTION_ENV, RetentionParam
from tether.model import JobState, Outcome
from tether.server import create_app, parse_tokens
from tether.server.run import ServerThread
from tether.store import Store, open_store
from tether.worker.pruner import RETENTION_DEFAULTS, Pruner, parse_retention
from tether.worker.service import PeriodicService

from .test_conformance import TTL, W, new_job
from .test_processes import ROOT, wait_for
from .test_retention import finish

WORKER = secrets.token_urlsafe(20)
ADMIN = secrets.token_urlsafe(20)
TOKENS = f"{WORKER} worker\n{ADMIN} admin\n"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    store = open_store(url)
    store.migrate()
    yield url, store
    store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def past_now(store: Store, ids: list[int]) -> None:
    """Let the database's clock pass the jobs' finish (SQLite's has millisecond
    steps: age 0 prunes what finished strictly before now)."""
    last = max(j.finished_at for j in (store.get_job(i) for i in ids) if j is not None and j.finished_at)
    while store.db_now() <= last:
        time.sleep(0.001)


def remote_app(url: str, **kwargs: object) -> Tether:
    app = Tether(url, token=WORKER, **kwargs)  # type: ignore[arg-type]

    @app.task(name="noop", queue="done")
    def noop(ctx: JobContext) -> None:
        pass

    return app


def run_burst(app: Tether) -> None:
    worker = app.worker(queues=["done"], burst=True)
    asyncio.run(worker.run())


# -- the worker's side -----------------------------------------------------------------


@pytest.mark.parametrize("retention", [RETENTION_DEFAULTS, {"succeeded": "1h"}, None])
def test_a_worker_through_a_server_runs_no_pruner_and_says_so_once(
    db: tuple[str, Store], caplog: pytest.LogCaptureFixture, retention: object,
) -> None:
    """Before the fix each remote worker ran a pruner whose every tick the
    server refused (a worker token may not prune): a warning a minute, forever,
    and no retention. Each service's tick is run once here, as its timer would."""
    _, store = db
    with ServerThread(create_app(store, parse_tokens(TOKENS, "test"))) as server:
        app = remote_app(server.url, retention=retention)
        try:
            with caplog.at_level(logging.INFO, logger="tether"):
                worker = app.worker(queues=["done"])
                assert not [s for s in worker.services if isinstance(s, Pruner)]
                for service in worker.services:
                    service.run_once()  # none is refused
        finally:
            app.close()
    said = [r for r in caplog.records if r.name == "tether.pruner"]
    assert [r.levelno for r in said] == [logging.INFO], [r.getMessage() for r in said]
    assert "tether server" in said[0].getMessage() and "--retention" in said[0].getMessage()


def test_a_worker_on_the_database_still_prunes(db: tuple[str, Store]) -> None:
    url, _ = db
    app = Tether(url)
    try:
        assert [s.ages for s in app.worker().services if isinstance(s, Pruner)] == [app.retention]
    finally:
        app.close()


# -- the server's side -----------------------------------------------------------------


def test_the_server_prunes_what_its_remote_workers_finished(db: tuple[str, Store]) -> None:
    """create_app(services=[pruner]): the server ticks the pruner on its own
    database while remote workers (worker tokens) finish jobs; run_once here."""
    url, store = db
    local = open_store(url)
    pruner = Pruner(local, {JobState.SUCCEEDED: 0.0})
    pruner.spread_start = False  # its timer ticks at start, before any job finished, then not for a minute
    with ServerThread(create_app(local, parse_tokens(TOKENS, "test"), services=[pruner])) as server:
        wait_for(lambda: pruner.ticks == 1, 10, "the pruner's first tick")
        ids = store.enqueue([new_job("noop", queue="done") for _ in range(5)])
        app = remote_app(server.url)
        try:
            run_burst(app)
        finally:
            app.close()
        past_now(store, ids)
        assert pruner.run_once() == {JobState.SUCCEEDED: 5}
        assert all(store.get_job(i) is None for i in ids)
    local.close()


def test_the_server_runs_its_services_on_a_timer_and_stops_them_with_it(db: tuple[str, Store]) -> None:
    url, store = db
    ids = finish(store, 3)
    past_now(store, ids)
    local = open_store(url)
    pruner = Pruner(local, {JobState.SUCCEEDED: 0.0}, interval=0.05)
    pruner.spread_start = False
    with ServerThread(create_app(local, parse_tokens(TOKENS, "test"), services=[pruner])):
        wait_for(lambda: pruner.total == 3, 10, "the server's pruner to tick")
    ticks = pruner.ticks
    time.sleep(0.2)
    assert pruner.ticks == ticks  # stopped with the server
    local.close()


class SlowTick(PeriodicService):
    name = "slow"

    def __init__(self) -> None:
        super().__init__(60.0, spread_start=False)
        self.started = threading.Event()
        self.ended = False

    def run_once(self) -> None:
        self.started.set()
        time.sleep(0.3)
        self.ended = True


def test_the_server_stops_only_after_a_tick_in_flight_has_ended(db: tuple[str, Store]) -> None:
    """Else the caller closes the store under the tick's statement (on SQLite, a crash)."""
    _, store = db
    slow = SlowTick()
    with ServerThread(create_app(store, parse_tokens(TOKENS, "test"), services=[slow])):
        assert slow.started.wait(10)
    assert slow.ended


def test_several_pruners_at_once_delete_each_job_once(backend: str, db_url: str) -> None:
    """Several servers (or direct workers) on one database prune side by side:
    each statement takes a bounded batch, and no job is counted twice."""
    stores = [open_store(db_url) for _ in range(3)]
    stores[0].migrate()
    try:
        ids = finish(stores[0], 60)
        past_now(stores[0], ids)
        live = stores[0].enqueue([new_job(queue="live")])
        pruners = [Pruner(s, {JobState.SUCCEEDED: 0.0}, limit=7) for s in stores]

        def drain(p: Pruner) -> None:
            while sum(p.tick().values()):
                pass

        with ThreadPoolExecutor(3) as pool:
            list(pool.map(drain, pruners))
        assert sum(p.total for p in pruners) == 60
        assert all(stores[0].get_job(i) is None for i in ids)
        assert stores[0].claim(W, ["live"], 1, TTL)[0].id == live[0]
    finally:
        for s in stores:
            s.close()


# -- tether server --retention -----------------------------------------------------------


def test_retention_option_values() -> None:
    param = RetentionParam()
    assert param.convert("succeeded=7d,cancelled=30d,dead=30d", None, None) == parse_retention(RETENTION_DEFAULTS)
    assert param.convert(" succeeded = 12h , dead=none ", None, None) == {
        JobState.SUCCEEDED: 12 * 3600.0, JobState.CANCELLED: 30 * 86400.0}
    assert param.convert("none", None, None) == {}
    assert param.convert("succeeded=0s", None, None)[JobState.SUCCEEDED] == 0.0


@pytest.mark.parametrize("value, fragment", [
    ("succeeded=7 days", "retention['succeeded'] must be a duration"),
    ("queued=1d", "finished states only"),
    ("succeeded", "STATE=AGE"),
    ("succeeded=1d,succeeded=2d", "twice"),
])
def test_bad_retention_options_are_refused_before_serving(value: str, fragment: str, tmp_path: Path) -> None:
    with pytest.raises(click.BadParameter, match=re.escape(fragment)):
        RetentionParam().convert(value, None, None)
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    out = CliRunner().invoke(cli, ["-d", f"sqlite:///{tmp_path / 'x.db'}", "server", "--token-file", str(tokens),
                                   "--retention", value])
    assert out.exit_code == 2 and fragment in out.output, out.output
    out = CliRunner().invoke(cli, ["-d", f"sqlite:///{tmp_path / 'x.db'}", "server", "--token-file", str(tokens)],
                             env={RETENTION_ENV: value})
    assert out.exit_code == 2 and fragment in out.output, out.output


def test_a_tether_server_process_prunes_and_its_remote_workers_warn_of_nothing(
    db: tuple[str, Store], tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The user's walkthrough: `tether server` with a worker-scope token, a
    remote worker finishing jobs; the server's retention (here: succeeded at
    once, dead kept) deletes them, and the worker logs no pruner warning."""
    url, store = db
    port = free_port()
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    log = tmp_path / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), RETENTION_ENV: "succeeded=0s,dead=none"}
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tether", "-d", url, "server", "--port", str(port),
                                 "--token-file", str(tokens), "--prune-interval", "0.2"],
                                env=env, stdout=subprocess.DEVNULL, stderr=err)
    server = f"http://127.0.0.1:{port}"
    try:
        probe = open_store(server, token=WORKER)

        def answers() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                probe.db_now()
                return True
            except ConnectionError:
                return False

        wait_for(answers, 20, "the server to answer")
        probe.close()
        ok = store.enqueue([new_job("noop", queue="done") for _ in range(4)])
        dead = store.enqueue([new_job(queue="kept", max_attempts=1)])
        (claimed,) = store.claim(W, ["kept"], 1, TTL)
        store.fail(W, claimed.id, claimed.attempt, outcome=Outcome.FAILED, error="x", retry=False)
        app = remote_app(server)
        try:
            with caplog.at_level(logging.INFO, logger="tether"):
                run_burst(app)
        finally:
            app.close()
        wait_for(lambda: all(store.get_job(i) is None for i in ok), 10, "the server to prune the succeeded jobs")
        job = store.get_job(dead[0])
        assert job is not None and job.state == JobState.DEAD  # dead=none: kept
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    finally:
        proc.terminate()
        proc.wait(10)
    text = log.read_text()
    assert sum(int(n) for n in re.findall(r"pruned (\d+) finished job\(s\): succeeded", text)) == 4, text
    assert "retention: succeeded after 0s, cancelled after 30d; dead kept" in text, text
