"""``@app.middleware`` with real workers on both backends: nesting order,
the kind rule (a middleware wraps the handlers of its own kind), failures,
short-circuits, Retry/Discard from a middleware, and the thread it runs on."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tether import ConfigError, Discard, JobContext, JobState, Outcome, Retry, Tether

from .test_worker import FAST, is_final, running, wait_job

TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)


def test_sync_chain_runs_outermost_first_on_the_handler_thread(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    seen: list[str] = []
    threads: dict[str, str] = {}

    @app.middleware
    def outer(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        seen.append("outer>")
        threads["outer"] = threading.current_thread().name
        result = call_next()
        seen.append("<outer")
        return {"outer": result}

    @app.middleware
    def inner(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        seen.append("inner>")
        token = TENANT.set(f"tenant-{ctx.args['n']}")
        try:
            return call_next()
        finally:
            TENANT.reset(token)
            seen.append("<inner")

    @app.task(name="work")
    def work(ctx: JobContext, n: int) -> str | None:
        seen.append("handler")
        threads["handler"] = threading.current_thread().name
        return TENANT.get()

    jid = work.enqueue(n=7)
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.SUCCEEDED
    assert job.result == {"outer": "tenant-7"}
    assert seen == ["outer>", "inner>", "handler", "<inner", "<outer"]
    assert threads["outer"] == threads["handler"] and threads["handler"].startswith("tether-handler")


def test_async_middleware_wraps_async_handlers_and_def_ones_def_handlers(make_app: Callable[..., Tether]) -> None:
    """The kind rule: each middleware wraps only the handlers of its own kind."""
    app = make_app(**FAST)
    calls: list[tuple[str, str]] = []

    @app.middleware
    def sync_mw(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        calls.append(("sync_mw", ctx.task))
        return call_next()

    @app.middleware
    async def async_mw(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        calls.append(("async_mw", ctx.task))
        token = TENANT.set("async-tenant")
        try:
            return await call_next()
        finally:
            TENANT.reset(token)

    @app.task(name="plain")
    def plain(ctx: JobContext) -> str | None:
        return TENANT.get()

    @app.task(name="coro")
    async def coro(ctx: JobContext) -> str | None:
        return TENANT.get()

    a, b = plain.enqueue(), coro.enqueue()
    with running(app):
        ja, jb = wait_job(app, a, is_final), wait_job(app, b, is_final)
    assert (ja.state, ja.result) == (JobState.SUCCEEDED, None)
    assert (jb.state, jb.result) == (JobState.SUCCEEDED, "async-tenant")
    assert sorted(calls) == [("async_mw", "coro"), ("sync_mw", "plain")]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_middleware_raise_is_the_attempts_failure(make_app: Callable[..., Tether], kind: str) -> None:
    app = make_app(**FAST)
    ran: list[int] = []
    if kind == "sync":

        @app.middleware
        def boom(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
            call_next()
            raise ValueError(f"middleware refused attempt {ctx.attempt}")

        @app.task(name="t", max_attempts=2, retry_backoff=0)
        def t(ctx: JobContext) -> None:
            ran.append(ctx.attempt)
    else:

        @app.middleware
        async def aboom(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
            await call_next()
            raise ValueError(f"middleware refused attempt {ctx.attempt}")

        @app.task(name="t", max_attempts=2, retry_backoff=0)
        async def t(ctx: JobContext) -> None:  # type: ignore[misc]
            ran.append(ctx.attempt)

    jid = app.enqueue("t")
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.DEAD
    assert ran == [1, 2]  # retried as a handler's failure is, budget spent
    assert [a.outcome for a in job.attempts] == [Outcome.FAILED, Outcome.FAILED]
    assert "ValueError: middleware refused attempt 2" in (job.last_error or "")
    assert "boom" in (job.attempts[-1].traceback or "")


def test_a_middleware_that_does_not_call_next_ends_the_job_as_it_returns(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    ran: list[str] = []

    @app.middleware
    def gate(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        if ctx.args.get("mode") == "skip":
            return {"skipped": True}
        if ctx.args.get("mode") == "discard":
            raise Discard("tenant is suspended")
        if ctx.args.get("mode") == "snooze" and ctx.attempt == 1:
            raise Retry(delay=0)
        return call_next()

    @app.task(name="t", max_attempts=3)
    def t(ctx: JobContext, mode: str) -> str:
        ran.append(mode)
        return "ran"

    skip, discard, snooze = t.enqueue(mode="skip"), t.enqueue(mode="discard"), t.enqueue(mode="snooze")
    with running(app):
        js, jd, jz = (wait_job(app, j, is_final) for j in (skip, discard, snooze))
    assert (js.state, js.result) == (JobState.SUCCEEDED, {"skipped": True})
    assert (jd.state, jd.last_error) == (JobState.DEAD, "discarded: tenant is suspended")
    assert [a.outcome for a in jd.attempts] == [Outcome.DISCARDED]
    assert (jz.state, jz.result) == (JobState.SUCCEEDED, "ran")
    assert [a.outcome for a in jz.attempts] == [Outcome.SNOOZED, Outcome.SUCCEEDED]
    assert ran == ["snooze"]  # the handler never ran for the skipped or discarded job


def test_call_next_twice_fails_the_attempt(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    ran: list[int] = []

    @app.middleware
    def twice(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        call_next()
        return call_next()

    @app.task(name="t", max_attempts=1)
    def t(ctx: JobContext) -> None:
        ran.append(1)

    jid = t.enqueue()
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.DEAD and "call_next() twice" in (job.last_error or "")
    assert ran == [1]


def test_bad_middleware_is_refused_at_registration(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    with pytest.raises(ConfigError, match="must take"):
        app.middleware(lambda ctx: None)  # type: ignore[arg-type, misc]
    with pytest.raises(ConfigError, match="takes a function"):
        app.middleware(3)  # type: ignore[arg-type]

    def mw(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        return call_next()

    app.middleware(mw)
    with pytest.raises(ConfigError, match="registered twice"):
        app.middleware(mw)
    assert app.middlewares == [mw]
