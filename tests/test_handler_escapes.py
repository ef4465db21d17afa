"""A handler's exception is its attempt's outcome, whatever it is: one whose
``__str__`` raises, ``SystemExit`` and ``KeyboardInterrupt`` included. None
may leave the job ``running`` under a live lease or stop the worker (found by
a new user's walkthrough: both did). SQLite and PostgreSQL, ``async def`` and
``def``."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from tether import JobContext, JobState, Outcome, Tether

from .test_worker import FAST, is_final, running, wait_job


class Unprintable(Exception):
    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code

    def __str__(self) -> str:
        return self.message  # type: ignore[attr-defined,no-any-return]  # the typo a user made


def _register(app: Tether, kind: str, raises: Callable[[], None]) -> None:
    if kind == "async":
        @app.task(name="bad", max_attempts=2, retry_backoff=0)
        async def bad(ctx: JobContext) -> None:
            raises()

        @app.task(name="good")
        async def good(ctx: JobContext, i: int) -> int:
            return i
    else:
        @app.task(name="bad", max_attempts=2, retry_backoff=0)
        def bad(ctx: JobContext) -> None:
            raises()

        @app.task(name="good")
        def good(ctx: JobContext, i: int) -> int:
            return i


def _unprintable() -> None:
    raise Unprintable(3)


def _exits() -> None:
    sys.exit(4)


def _interrupted() -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("raises, error", [
    (_unprintable, "Unprintable: <str() raised AttributeError>"),
    (_exits, "SystemExit: 4"),
    (_interrupted, "KeyboardInterrupt"),
], ids=["unprintable", "sys.exit", "KeyboardInterrupt"])
def test_whatever_a_handler_raises_fails_its_attempt_and_the_worker_goes_on(
    make_app: Callable[..., Tether], kind: str, raises: Callable[[], None], error: str,
) -> None:
    app = make_app(**FAST)
    _register(app, kind, raises)
    bad = app.get_task("bad").enqueue()
    before = [app.get_task("good").enqueue(i=i) for i in range(5)]  # in the same claims as the bad one
    with running(app) as w:
        job = wait_job(app, bad, is_final)
        after = [app.get_task("good").enqueue(i=i) for i in range(5, 10)]  # the worker still claims
        done = [wait_job(app, j, is_final) for j in before + after]
        assert not w.state.stopping
    assert job.state is JobState.DEAD, job
    assert [a.outcome for a in job.attempts] == [Outcome.FAILED, Outcome.FAILED]
    assert job.last_error == error
    assert job.attempts[0].traceback is not None and error.split(":")[0] in job.attempts[0].traceback
    assert [(d.state, d.result) for d in done] == [(JobState.SUCCEEDED, i) for i in range(10)]
