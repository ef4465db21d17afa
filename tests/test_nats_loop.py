"""Where the NATS client runs: on the worker's own event loop when a worker
starts on a transport with no link yet, handed back as the worker stops, and
on a thread of the transport's own otherwise (``transport/nats.py``'s
docstring). Against the real nats-server the other NATS tests use; each test's
workers take jobs only by message (no fallback claims, no sweep), so a job
that runs was published."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from tether import JobContext, JobState, Tether
from tether.contrib.asgi import worker_lifespan
from tether.transport.nats import NatsTransport

from .test_nats import nats_app, nats_url, prefix  # noqa: F401 - fixtures
from .test_processes import wait_for
from .test_worker import running, wait_job

ONLY_MESSAGES = {"fallback_interval": 3600, "sweep_grace": 3600}


def link_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "tether-nats"]


def transport_of(app: Tether) -> NatsTransport:
    assert isinstance(app.transport, NatsTransport)
    return app.transport


def test_a_worker_runs_the_client_on_its_own_loop_and_hands_it_back_as_it_stops(
    make_app: Callable[..., Tether], nats_url: str, prefix: str  # noqa: F811
) -> None:
    app = nats_app(make_app, nats_url, prefix, **ONLY_MESSAGES)
    t = transport_of(app)
    children: list[int] = []

    @app.task(name="child")
    def child(ctx: JobContext) -> None:
        children.append(ctx.job_id)

    @app.task(name="parent")
    async def parent(ctx: JobContext) -> None:
        child.enqueue()  # a sync publish on the loop that runs the client: sent in the background

    with running(app, concurrency=4) as w:
        wait_for(lambda: t.healthy and w.counts["db_claims"], 10, "worker start")
        assert t._adopted and link_threads() == []  # no thread of the transport's own
        ids = parent.enqueue_many([{} for _ in range(20)])  # from this thread: over to the worker's loop
        for job_id in ids:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        wait_for(lambda: len(children) == 20, 10, "the children, published from the async handlers")
        assert w.counts["deliveries_claimed"] == 40
    assert t._loop is None and not t.healthy  # handed back with the worker's loop

    # with no worker, a publish starts a link on a thread of its own, and the next worker uses that one
    early = child.enqueue()
    assert link_threads() == ["tether-nats"]
    with running(app, concurrency=4) as w:
        wait_for(lambda: t.healthy and w.counts["db_claims"], 10, "second worker start")
        assert not t._adopted
        wait_job(app, early, lambda j: j.state is JobState.SUCCEEDED)
        late = child.enqueue()
        wait_job(app, late, lambda j: j.state is JobState.SUCCEEDED)
        assert w.counts["deliveries_claimed"] >= 1


def test_when_the_worker_holding_the_link_stops_another_worker_sharing_it_goes_on(
    make_app: Callable[..., Tether], nats_url: str, prefix: str  # noqa: F811
) -> None:
    app = nats_app(make_app, nats_url, prefix, **ONLY_MESSAGES)
    t = transport_of(app)

    @app.task(name="noop")
    def noop(ctx: JobContext) -> None:
        pass

    with contextlib.ExitStack() as second:
        with running(app, concurrency=4) as first:
            wait_for(lambda: t.healthy and first.counts["db_claims"], 10, "first worker start")
            assert t._adopted and t._thread is not threading.current_thread()
            w = second.enter_context(running(app, concurrency=4))
            wait_for(lambda: w.counts["db_claims"], 10, "second worker start")
        # the first worker stopped, and took its loop with it: the link moved to a thread
        wait_for(lambda: t.healthy, 10, "the link again, on a thread")
        assert not t._adopted and link_threads() == ["tether-nats"]
        ids = noop.enqueue_many([{} for _ in range(30)])
        for job_id in ids:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        assert w.counts["deliveries_claimed"] == 30


def test_a_link_on_a_loop_closes_without_waiting_on_itself_or_is_replaced_once_that_loop_ends(
    nats_url: str, prefix: str  # noqa: F811
) -> None:
    t = NatsTransport(nats_url, prefix=prefix)

    async def consume(close: bool) -> asyncio.AbstractEventLoop:
        t.start(["default"])
        for _ in range(200):
            if t.healthy:
                break
            await asyncio.sleep(0.025)
        assert t.healthy and t._adopted and t._loop is asyncio.get_running_loop()
        if close:
            t.close()  # sync, on the loop the link runs on: must not wait on it
            assert t._loop is None
            await asyncio.sleep(0.2)  # its shut runs here, and only its own tasks end
        return asyncio.get_running_loop()

    try:
        asyncio.run(consume(close=True))
        asyncio.run(consume(close=False))  # its loop ends without stop(), the link with it
        # a publish afterwards does not reach for the ended loop: it starts a link of its own
        assert t.publish([(1, "default")]) == 1
        assert link_threads() == ["tether-nats"]
    finally:
        t.close()


def test_an_asgi_apps_loop_runs_the_client_for_its_worker_and_its_request_handlers_enqueues(
    make_app: Callable[..., Tether], nats_url: str, prefix: str  # noqa: F811
) -> None:
    """``worker_lifespan``: the worker, and so the client, on the server's
    loop. A request handler's sync ``enqueue`` there is sent in the
    background, its ``enqueue_async`` crosses from a thread to that loop;
    both reach the worker by message. The lifespan's end hands the link back."""
    app = nats_app(make_app, nats_url, prefix, **ONLY_MESSAGES)
    t = transport_of(app)
    done: list[int] = []

    @app.task(name="job")
    def job(ctx: JobContext, i: int) -> None:
        done.append(i)

    async def serve() -> int:
        async with worker_lifespan(app, concurrency=4) as w:
            for _ in range(200):
                if t.healthy and w.counts["db_claims"]:
                    break
                await asyncio.sleep(0.025)
            assert t._adopted and t._loop is asyncio.get_running_loop() and link_threads() == []
            for i in range(5):
                job.enqueue(i=i)
            await job.enqueue_async(i=99)
            for _ in range(400):
                if len(done) == 6:
                    break
                await asyncio.sleep(0.025)
            delivered = w.counts["deliveries_claimed"]
        assert t._loop is None
        return delivered

    assert asyncio.run(serve()) == 6
    assert sorted(done) == [0, 1, 2, 3, 4, 99]
