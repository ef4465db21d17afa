"""Remote workers under real process faults: a `tether server` process holds
the database; worker processes (``tests/proc_app.py``) reach it only over
HTTP with a worker token. The same lease rules must hold as for local
workers (``test_processes.py``, whose helpers these reuse): a SIGKILLed
remote worker's job is recovered within the bound, and a remote worker cut
off from the server past its lease stops its handler and has its late report
refused once it can reach the server again. A worker token acts only for the
workers it registered, so a worker restarting beside another token's dead
worker still starts, and leaves that worker's job to the reaper.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tether import JobContext, JobState, Outcome, Tether
from tether.chaos.proxy import TCPProxy
from tether.errors import StaleAttempt
from tether.model import NewJob
from tether.store import Store, open_store

from .http_raw import free_port, stop
from .test_processes import (
    ROOT,
    SLACK,
    TTL,
    Workers,
    assert_recovered_by,
    enqueue,
    finished,
    job,
    sigkill_mid_job_is_recovered_by_a_sibling,
    wait_for,
)
from .test_worker import FAST, running

pytestmark = pytest.mark.processes

TOKEN = secrets.token_urlsafe(24)
#: another deployment's worker token on the same server
OTHER = secrets.token_urlsafe(24)


class ServerProcess:
    """``python -m tether server`` over the test's database, with two worker tokens."""

    def __init__(self, db_url: str, tmp: Path, *options: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        tokens = tmp / "tokens"
        tokens.write_text(f"{TOKEN} worker,producer\n{OTHER} worker\n")
        self.log = tmp / "server.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tether", "-d", db_url, "server", "--port", str(self.port),
                 "--token-file", str(tokens), "--log-level", "warning", *options],
                env=env, stdout=subprocess.DEVNULL, stderr=err)
        client = open_store(self.url, token=TOKEN)
        try:
            wait_for(lambda: self._answers(client), 20, "the server to answer")
        finally:
            client.close()

    def _answers(self, client: Store) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        try:
            client.db_now()
            return True
        except ConnectionError:
            return False

    def close(self) -> None:
        stop(self.proc)


@pytest.fixture
def server(db_url: str, store: Store, tmp_path: Path) -> Iterator[ServerProcess]:
    s = ServerProcess(db_url, tmp_path)
    yield s
    s.close()


@pytest.fixture
def remote(server: ServerProcess, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes whose 'database URL' is the server (plus TETHER_TOKEN)."""
    w = Workers(server.url, tmp_path)
    yield w
    w.close()


def test_sigkilled_remote_worker_is_recovered_by_a_remote_sibling_within_the_bound(
    remote: Workers, store: Store
) -> None:
    sigkill_mid_job_is_recovered_by_a_sibling(remote, store, TETHER_TOKEN=TOKEN)


def test_remote_worker_cut_off_past_its_lease_stops_and_its_late_report_is_refused(
    server: ServerProcess, tmp_path: Path, store: Store
) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    proxy = TCPProxy("127.0.0.1", port)
    (tmp_path / "cut").mkdir()
    (tmp_path / "direct").mkdir()
    cut = Workers(f"http://127.0.0.1:{proxy.port}", tmp_path / "cut")  # A reaches the server through the proxy
    direct = Workers(server.url, tmp_path / "direct")
    try:
        jid = enqueue(store, "coop", seconds=4)
        a = cut.start(TETHER_TOKEN=TOKEN)
        wait_for(lambda: cut.started(jid), 15, "remote worker A to start the job")
        b = direct.start(TETHER_TOKEN=TOKEN)
        direct.wait_started(b)

        proxy.blackhole()  # packets vanish; A's sockets stay half-open
        cut_at = time.monotonic()
        stopped = wait_for(lambda: list(cut.marks.glob(f"{jid}-1-{a.pid}.stopped")), TTL + SLACK + 2,
                           "A to fence itself and stop its handler")
        assert stopped
        assert time.monotonic() - cut_at <= TTL + SLACK + 2
        assert "lease could not be renewed" in cut.log(a)

        done = wait_for(lambda: finished(store, jid), 25, "B to recover and finish the job")
        assert done.state is JobState.SUCCEEDED and done.result["pid"] == b.pid
        assert not list(cut.marks.glob(f"{jid}-1-*.end")), "A's handler ran to the end despite losing the lease"

        proxy.heal()  # A can reach the server again; its attempt's late report must change nothing
        late = open_store(f"http://127.0.0.1:{proxy.port}", token=TOKEN)
        try:
            a_worker = done.attempts[0].worker
            assert late.complete(a_worker, [(jid, 1, '{"late": true}')]) == set()
            with pytest.raises(StaleAttempt):
                late.fail(a_worker, jid, 1, outcome=Outcome.FAILED, error="late")
            assert late.heartbeat(a_worker, [(jid, 1)], TTL)[jid] == "lost"
        finally:
            late.close()
        after = job(store, jid)
        assert after == done, "a late report from the cut-off attempt changed the job"
        assert [(x.attempt, x.outcome) for x in after.attempts] == [(1, Outcome.LEASE_EXPIRED),
                                                                     (2, Outcome.SUCCEEDED)]
        assert a.poll() is None, "A should survive the cut and keep serving"
    finally:
        for w in (cut, direct):
            w.close()
        proxy.close()


def test_sigterm_on_a_remote_worker_releases_its_job(remote: Workers, store: Store) -> None:
    jid = enqueue(store, "sleepy", max_attempts=1, seconds=3)
    w = remote.start(TETHER_TOKEN=TOKEN, T_SHUTDOWN=0.3)
    wait_for(lambda: remote.started(jid), 15, "the remote worker to start the job")
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=15) == 0
    released = job(store, jid)
    assert released.state is JobState.QUEUED
    assert (released.attempt, released.released) == (1, 1)
    assert [a.outcome for a in released.attempts] == [Outcome.RELEASED]


def test_a_worker_restarting_beside_another_tokens_dead_worker_starts_and_the_reaper_recovers_it(
    remote: Workers, store: Store
) -> None:
    # B's start-up reconciliation finds A dead on this host, but A is not B's
    # token's worker: B may not end A's leases, so it must still start, and
    # its reaper recover A's job once the lease lapses (within the bound).
    jid = enqueue(store, "sleepy", seconds=1)
    a = remote.start(TETHER_TOKEN=TOKEN)
    wait_for(lambda: remote.started(jid), 15, "worker A to start the job")
    a.kill()
    killed_at = datetime.now(UTC)
    a.wait(timeout=5)
    b = remote.start(TETHER_TOKEN=OTHER)
    remote.wait_started(b)
    done = wait_for(lambda: finished(store, jid), 25, "the job to finish")
    assert_recovered_by(done, dead=a.pid, sibling=b.pid, killed_at=killed_at)
    assert b.poll() is None, remote.log(b)
    assert "not ending the leases of" in remote.log(b)


def test_a_remote_worker_keeps_claims_in_flight_and_runs_each_job_once(server: ServerProcess, store: Store) -> None:
    """Through a tether server a round passes through three processes in turn
    (worker, server, database): with short handlers the worker keeps three
    claims in flight (HttpStore.claims_in_flight), so one is on the server or
    the database while another travels. Every job still runs once, and a
    graceful stop answers them all before the worker ends."""
    app = Tether(server.url, token=TOKEN, **FAST)
    ran: list[int] = []

    @app.task(name="quick")
    async def quick(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    ids = store.enqueue([NewJob(task="quick", args_json="{}") for _ in range(3000)])
    try:
        with running(app, concurrency=10) as w:
            wait_for(lambda: len(ran) >= len(ids), 60, "every job to run")
            assert w.counts["claims_ahead_of_another"] > 0
            # A stop in mid-stream: the claims in flight are answered and what
            # they took is run or handed back; no job is left running.
            more = store.enqueue([NewJob(task="quick", args_json="{}") for _ in range(5_000)])
            wait_for(lambda: len(ran) >= len(ids) + 1000, 60, "the stream to flow")
        assert w.counts["stale_reports"] == 0
        assert len(ran) == len(set(ran))  # each once
        states = Counter(j.state for j in map(store.get_job, [*ids, *more]) if j is not None)
        assert states[JobState.RUNNING] == 0, states
        assert states[JobState.SUCCEEDED] == len(ran) and states[JobState.QUEUED] == 8_000 - len(ran), states
    finally:
        app.close()
