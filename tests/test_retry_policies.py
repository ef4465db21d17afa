"""Retry policies in a real worker (issue 20): ``retry_on``, ``tether.Retry``,
``tether.Discard`` and a callable ``retry_backoff``, each recorded in the
attempts audit with its own outcome. SQLite and PostgreSQL (``backend``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import tether
from tether import JobContext, JobState, Outcome, Tether
from tether.errors import ConfigError
from tether.model import Job, NewJob

from .test_worker import FAST, is_final, running, wait_job


def outcomes(job: Job) -> list[Outcome | None]:
    return [a.outcome for a in job.attempts]


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_retry_on_retries_the_listed_exceptions_and_kills_the_others(
    make_app: Callable[..., Tether], kind: str,
) -> None:
    app = make_app(**FAST)
    seen: list[int] = []

    def body(ctx: JobContext, exc: str) -> None:
        seen.append(ctx.attempt)
        if ctx.attempt == 1:
            raise TimeoutError("slow") if exc == "timeout" else KeyError("missing")

    if kind == "async":
        @app.task(name="flaky", retry_on=(TimeoutError, ConnectionError), retry_backoff=0, max_attempts=3)
        async def flaky(ctx: JobContext, exc: str) -> None:
            body(ctx, exc)
    else:
        @app.task(name="flaky", retry_on=(TimeoutError, ConnectionError), retry_backoff=0, max_attempts=3)
        def flaky(ctx: JobContext, exc: str) -> None:
            body(ctx, exc)

    retried = flaky.enqueue(exc="timeout")
    killed = flaky.enqueue(exc="key")
    with running(app):
        a = wait_job(app, retried, is_final)
        b = wait_job(app, killed, is_final)
    assert a.state is JobState.SUCCEEDED and outcomes(a) == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert b.state is JobState.DEAD and outcomes(b) == [Outcome.FAILED]
    assert b.last_error is not None and "KeyError" in b.last_error and "not retried" in b.last_error
    assert b.attempts[0].traceback is not None and "KeyError" in b.attempts[0].traceback


def test_a_single_exception_class_is_a_retry_on_too(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(name="one", retry_on=ValueError)
    def one(ctx: JobContext) -> None: ...

    assert one.options.retry_on == (ValueError,)


def test_retry_snoozes_without_spending_the_budget(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(name="snoozy", max_attempts=1)
    async def snoozy(ctx: JobContext) -> str:
        if ctx.attempt < 3:
            raise tether.Retry(delay=0.2)
        return "done"

    job_id = snoozy.enqueue()
    with running(app):
        job = wait_job(app, job_id, is_final)
    assert job.state is JobState.SUCCEEDED and job.result == "done"
    assert outcomes(job) == [Outcome.SNOOZED, Outcome.SNOOZED, Outcome.SUCCEEDED]
    assert job.attempts[0].error == "snoozed for 0.2s"
    # the snoozes took their delay: each claim came at least 0.2 s after the last attempt ended
    for before, after in zip(job.attempts, job.attempts[1:], strict=False):
        assert before.finished_at is not None
        assert (after.claimed_at - before.finished_at).total_seconds() >= 0.15
    assert job.attempts_used == 1


def test_discard_ends_the_job_dead_at_once_with_its_reason(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(name="picky", max_attempts=5)
    def picky(ctx: JobContext) -> None:
        raise tether.Discard("customer deleted")

    job_id = picky.enqueue()
    with running(app):
        job = wait_job(app, job_id, is_final)
    assert job.state is JobState.DEAD and outcomes(job) == [Outcome.DISCARDED]
    assert job.last_error == "discarded: customer deleted"
    assert job.attempts[-1].traceback is None


def test_discard_from_an_error_records_that_errors_traceback(make_app: Callable[..., Tether]) -> None:
    """``raise Discard(reason) from exc``: dead at once, and the attempt keeps
    what went wrong, ``exc``'s traceback (the Django backend records a
    return value that is not JSON so, as Django's TypeError)."""
    app = make_app(**FAST)

    @app.task(name="bad_value", max_attempts=5)
    def bad_value(ctx: JobContext) -> None:
        try:
            int("x")
        except ValueError as exc:
            raise tether.Discard("cannot parse") from exc

    job_id = bad_value.enqueue()
    with running(app):
        job = wait_job(app, job_id, is_final)
    assert job.state is JobState.DEAD and outcomes(job) == [Outcome.DISCARDED]
    assert job.last_error == "discarded: cannot parse"
    tb = job.attempts[-1].traceback
    assert tb is not None and tb.endswith("ValueError: invalid literal for int() with base 10: 'x'\n"), tb
    assert "Discard" not in tb


def test_a_callable_retry_backoff_chooses_each_delay(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    asked: list[int] = []

    def backoff(attempt: int) -> float:
        asked.append(attempt)
        return 0.3 * attempt

    @app.task(name="slowly", max_attempts=3, retry_backoff=backoff)
    def slowly(ctx: JobContext) -> None:
        raise ConnectionError("down")

    job_id = slowly.enqueue()
    with running(app):
        job = wait_job(app, job_id, is_final)
    assert job.state is JobState.DEAD and outcomes(job) == [Outcome.FAILED] * 3
    assert asked[:2] == [1, 2]  # asked with the attempt that failed (the last one is asked in vain)
    gaps = [(b.claimed_at - a.finished_at).total_seconds()  # type: ignore[operator]
            for a, b in zip(job.attempts, job.attempts[1:], strict=False)]
    assert gaps[0] >= 0.25 and gaps[1] >= 0.55, gaps


def test_a_retry_backoff_that_raises_falls_back_to_the_default(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    def broken(attempt: int) -> float:
        raise RuntimeError("oops")

    @app.task(name="b", max_attempts=2, retry_backoff=broken)
    def b(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("down")

    job_id = b.enqueue()
    with running(app):
        job = wait_job(app, job_id, is_final)
    assert job.state is JobState.SUCCEEDED and outcomes(job) == [Outcome.FAILED, Outcome.SUCCEEDED]


@pytest.mark.parametrize("options, message", [
    ({"retry_on": "ValueError"}, "retry_on must be an exception class"),
    ({"retry_on": (ValueError, 3)}, "retry_on must be an exception class"),
    ({"retry_backoff": -1}, "retry_backoff must be"),
    ({"retry_backoff": "fast"}, "retry_backoff must be"),
])
def test_bad_retry_policies_are_refused_at_registration(
    make_app: Callable[..., Tether], options: dict[str, object], message: str,
) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match=message):
        app.task(name="x", **options)(lambda ctx: None)  # type: ignore[call-overload]


def test_policies_are_the_tasks_not_a_callers(make_app: Callable[..., Tether]) -> None:
    app = make_app()

    @app.task(name="x")
    def x(ctx: JobContext) -> None: ...

    with pytest.raises(ConfigError, match="not per call"):
        x.using(retry_on=(ValueError,))
    with pytest.raises(ConfigError, match="not per call"):
        x.using(retry_backoff=lambda n: 1.0)
    assert x.using(retry_backoff=5).options.retry_backoff == 5


@pytest.mark.parametrize("delay", [-1, float("inf"), "soon", True])
def test_retry_refuses_a_bad_delay(delay: object) -> None:
    with pytest.raises(ConfigError, match=r"tether\.Retry"):
        tether.Retry(delay=delay)  # type: ignore[arg-type]


def test_tether_job_and_the_dashboard_show_snoozed_and_discarded_attempts(
    make_app: Callable[..., Tether], db_url: str,
) -> None:
    """Written through the store (no worker needed): one job snoozed then
    discarded, as its attempts audit has it."""
    from click.testing import CliRunner
    from starlette.testclient import TestClient

    from tether.cli.main import cli
    from tether.dashboard import create_app
    from tether.metrics import Metrics

    from .test_dashboard import HOSTS, TOKEN, login

    app = make_app()
    store = app.store
    (job_id,) = store.enqueue([NewJob(task="t", args_json="{}")])
    c = store.claim("w", ["default"], 1, 30.0)[0]
    store.fail("w", c.id, c.attempt, outcome=Outcome.SNOOZED, error="snoozed for 0s", delay=0)
    c = store.claim("w", ["default"], 1, 30.0)[0]
    store.fail("w", c.id, c.attempt, outcome=Outcome.DISCARDED, error="discarded: spam", retry=False)
    out = CliRunner().invoke(cli, ["--database", db_url, "job", str(job_id)], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "snoozed" in out.output and "discarded" in out.output and "discarded: spam" in out.output
    metrics = Metrics(depth_cache=0).attach(app).watch_store(store)
    with TestClient(create_app(app, token=TOKEN, metrics=metrics, allowed_hosts=HOSTS), follow_redirects=False) as web:
        login(web)
        page = web.get(f"/jobs/{job_id}").text
    assert 'class="state o-snoozed"' in page and 'class="state o-discarded"' in page
