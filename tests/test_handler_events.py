"""``event.exception`` on ``job.failed`` (and the event that follows it): the
live exception where the worker has it, None where it does not; and the
docs' Sentry example (docs/examples/handlers/middleware.py) run with the real
sentry_sdk and an in-memory transport: the event carries the traceback and the job id."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from tether import JobContext, JobState, Tether
from tether.events import Event

from .test_worker import FAST, is_final, running, wait_job

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "handlers" / "middleware.py"


class Captured(Transport):
    """A Sentry transport that keeps the events in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(event)


@pytest.fixture
def sentry() -> Iterator[Captured]:
    transport = Captured()
    sentry_sdk.init(
        dsn="https://key@sentry.invalid/1",
        transport=transport,
        default_integrations=False,
        auto_enabling_integrations=False,
    )
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.init()  # no DSN: a client that sends nothing


def _example(db_url: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("TETHER_DATABASE_URL", db_url)
    spec = importlib.util.spec_from_file_location("handlers_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "handlers_example", module)
    spec.loader.exec_module(module)
    return module


def test_docs_example_sends_the_live_exception_to_sentry(
    db_url: str, monkeypatch: pytest.MonkeyPatch, sentry: Captured
) -> None:
    ex = _example(db_url, monkeypatch)
    app: Tether = ex.app
    try:
        app.migrate()
        app.timers = type(app.timers)(**FAST)
        bad, good, coro = (
            ex.charge.enqueue(tenant="acme", amount=-5),
            ex.charge.enqueue(tenant="acme", amount=3),
            ex.charge_async.enqueue(tenant="umbrella", amount=4),
        )
        with running(app):
            jb, jg, jc = (wait_job(app, j, is_final) for j in (bad, good, coro))
        assert jb.state is JobState.DEAD
        assert (jg.state, jg.result) == (JobState.SUCCEEDED, {"tenant": "acme", "amount": 3})
        assert (jc.state, jc.result) == (JobState.SUCCEEDED, {"tenant": "umbrella", "amount": 4})
        sentry_sdk.flush()
        assert len(sentry.events) == 1
        event = sentry.events[0]
        assert str(event["tags"]["tether.job_id"]) == str(bad) and event["tags"]["tether.task"] == "charge"
        (value,) = event["exception"]["values"]
        assert value["type"] == "ValueError" and value["value"] == "cannot charge -5 to acme"
        frames = [f["function"] for f in value["stacktrace"]["frames"]]
        assert frames[-1] == "charge" and "tenant" in frames  # the traceback runs through the middleware
    finally:
        app.close()


def test_exception_is_live_on_failed_and_dead_and_none_on_timeout(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    seen: list[Event] = []
    app.on("*")(seen.append)

    class Boom(Exception):
        pass

    raised: list[Boom] = []

    @app.task(name="boom", max_attempts=1)
    def boom(ctx: JobContext) -> None:
        exc = Boom("the live one")
        raised.append(exc)
        raise exc

    @app.task(name="slow", max_attempts=1, timeout=0.3)
    async def slow(ctx: JobContext) -> None:
        import asyncio

        await asyncio.sleep(30)

    a, b = boom.enqueue(), slow.enqueue()
    with running(app):
        wait_job(app, a, is_final)
        wait_job(app, b, is_final)
        for _ in range(100):
            if len([e for e in seen if e.name == "job.dead"]) == 2:
                break
            import time

            time.sleep(0.02)
    failed = {e.job_id: e for e in seen if e.name == "job.failed"}
    dead = {e.job_id: e for e in seen if e.name == "job.dead"}
    assert failed[a].exception is raised[0] and dead[a].exception is raised[0]
    assert failed[a].exception.__traceback__ is not None
    assert failed[b].exception is None and dead[b].exception is None  # timed out: nothing raised here
    assert all(e.exception is None for e in seen if e.name in ("job.enqueued", "job.started", "job.succeeded"))
