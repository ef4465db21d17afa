"""The testing helpers (issue 21.3): ``app.drain()``, the memory URL,
``tether.testing.context()``, the assertions, and the pytest plugin (in a real
pytest process, loaded as a user loads it)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether import JobContext, JobState, Outcome, Tether
from tether.context import CancelReason, JobCancelled
from tether.errors import ConfigError, SchemaMissing, StaleAttempt
from tether.testing import MEMORY_URL, assert_enqueued, assert_not_enqueued, context, enqueued, temporary_database
from tether.testing.pytest_plugin import load_app

SRC = Path(__file__).resolve().parent.parent / "src"
EXAMPLES = Path(__file__).resolve().parent / "examples"


def test_drain_runs_every_due_job_through_the_store_and_says_how_each_ended(
    make_app: Callable[..., Tether],
) -> None:
    app = make_app()
    seen: list[str] = []
    app.on("job.succeeded")(lambda e: seen.append(f"succeeded {e.job_id}"))

    @app.task(name="double")
    def double(ctx: JobContext, n: int) -> int:
        if n == 3:
            follow_up.enqueue(n=n)  # enqueued by a handler: due now, so the same drain runs it
        return 2 * n

    @app.task(name="follow_up")
    def follow_up(ctx: JobContext, n: int) -> str:
        return f"after {n}"

    @app.task(name="broken", max_attempts=1)
    async def broken(ctx: JobContext) -> None:
        raise ValueError("bad input")

    a = double.enqueue(n=2)
    b = double.enqueue(n=3)
    c = broken.enqueue()
    later = double.using(delay=3600).enqueue(n=9)

    ran = app.drain()

    by_id = {r.job_id: r for r in ran}
    assert [r.task for r in ran][:3] == ["double", "double", "broken"]
    assert (by_id[a].outcome, by_id[a].state, by_id[a].result, by_id[a].attempt) == (
        Outcome.SUCCEEDED, JobState.SUCCEEDED, 4, 1)
    assert by_id[b].result == 6 and by_id[b].succeeded
    assert by_id[c].outcome is Outcome.FAILED and by_id[c].state is JobState.DEAD
    assert by_id[c].error == "ValueError: bad input" and "raise ValueError" in (by_id[c].traceback or "")
    [after] = [r for r in ran if r.task == "follow_up"]
    assert after.result == "after 3"
    assert later not in by_id and len(ran) == 4
    job = app.get_job(later)
    assert job is not None and job.state is JobState.QUEUED and job.attempt == 0
    # real claims: each attempt is in the audit under the drain's worker, and the hooks fired
    done = app.get_job(a)
    assert done is not None and done.attempts[0].outcome is Outcome.SUCCEEDED and done.attempts[0].worker
    assert f"succeeded {a}" in seen
    assert app.drain() == []  # nothing is due


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_an_attempt_past_its_timeout_ends_timed_out_not_lost(make_app: Callable[..., Tether], kind: str) -> None:
    """The fence thread and the loop's timeout timer both fire at the
    attempt's deadline (renewals stop there). When the fence came first it
    judged the lease lost: "lease could not be renewed", nothing reported, the
    job left running for the reaper, and drain() returned it running (every
    time for a def handler, half the time for an async one). The fence now
    knows a deadline that is the timeout's, and times the attempt out.

    And a def handler's thread cannot be stopped: it runs on past its
    attempt's end. Its slot stays taken until it returns, so drain (one job
    at a time) never runs two handlers at once; it started the next job
    beside the sleeping thread before."""
    app = make_app(lease_ttl=10, heartbeat_interval=1)
    lost: list[int] = []
    app.on("job.lost")(lambda e: lost.append(e.job_id))
    bodies: list[tuple[float, float]] = []

    if kind == "def":
        @app.task(name="slow", timeout=0.5, max_attempts=1)
        def slow(ctx: JobContext) -> str:
            began = time.monotonic()
            time.sleep(1.5)
            bodies.append((began, time.monotonic()))
            return "late"
    else:
        @app.task(name="slow", timeout=0.5, max_attempts=1)
        async def slow(ctx: JobContext) -> str:
            await asyncio.sleep(3)
            return "late"

    ids = [app.enqueue("slow") for _ in range(3)]
    ran = app.drain()
    assert sorted(r.job_id for r in ran) == ids
    assert {(r.outcome, r.state) for r in ran} == {(Outcome.TIMED_OUT, JobState.DEAD)}, ran
    assert all("timed out" in (r.error or "") for r in ran)
    assert lost == []
    if kind == "def":
        deadline = time.monotonic() + 5
        while len(bodies) < 3 and time.monotonic() < deadline:  # the last thread runs on after drain returns
            time.sleep(0.05)
        spans = sorted(bodies)
        assert len(spans) == 3 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def test_drain_max_jobs_and_queues(make_app: Callable[..., Tether]) -> None:
    app = make_app()

    @app.task(name="noop")
    def noop(ctx: JobContext, i: int) -> int:
        return i

    @app.task(name="mail", queue="emails")
    def mail(ctx: JobContext, to: str) -> None:
        pass

    ids = [noop.enqueue(i=i) for i in range(5)]
    m = mail.enqueue(to="a@example.com")
    assert app.drain(max_jobs=0) == []
    ran = app.drain(queues=["default"], max_jobs=2)
    assert [r.job_id for r in ran] == ids[:2] and all(r.succeeded for r in ran)
    for job_id in [*ids[2:], m]:  # untouched: never claimed, so no attempt spent or released
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.QUEUED and job.attempt == 0
    assert [r.job_id for r in app.drain(queues=["emails"])] == [m]
    assert [r.job_id for r in app.drain()] == ids[2:]
    with pytest.raises(ConfigError, match="max_jobs"):
        app.drain(max_jobs=-1)
    # a string is one name, not a list of its letters (before: queues d, e, f, ... and nothing ran)
    with pytest.raises(ConfigError, match=r"write queues=\['emails'\]"):
        app.drain(queues="emails")
    with pytest.raises(ConfigError, match="not the string"):
        app.worker(queues="emails")  # type: ignore[arg-type]


def test_a_retry_is_due_later_so_drain_leaves_it_queued_with_its_error(make_app: Callable[..., Tether]) -> None:
    app = make_app()

    @app.task(name="flaky", retry_backoff=3600)
    def flaky(ctx: JobContext) -> None:
        raise RuntimeError(f"attempt {ctx.attempt}")

    job_id = flaky.enqueue()
    [ran] = app.drain()
    assert ran.job_id == job_id
    assert (ran.outcome, ran.state, ran.error) == (Outcome.FAILED, JobState.QUEUED, "RuntimeError: attempt 1")
    assert app.drain() == []


def test_a_retry_due_at_once_runs_again_in_the_same_drain(make_app: Callable[..., Tether]) -> None:
    """The burst worker waits for the failed attempt's report before its last
    look: the retry it queued (no backoff) is due, so the drain runs it too."""
    app = make_app()

    @app.task(name="second_time_lucky", retry_backoff=0)
    def second_time_lucky(ctx: JobContext) -> int:
        if ctx.attempt == 1:
            raise RuntimeError("first")
        return ctx.attempt

    job_id = second_time_lucky.enqueue()
    first, second = app.drain()
    assert (first.job_id, first.attempt, first.outcome, first.error) == (job_id, 1, Outcome.FAILED, "RuntimeError: first")
    assert (second.job_id, second.attempt, second.outcome, second.result) == (job_id, 2, Outcome.SUCCEEDED, 2)
    assert first.state is second.state is JobState.SUCCEEDED  # where the job is now


def test_drain_on_a_database_without_tether_tables_says_so(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(SchemaMissing, match="tether migrate"):
            app.drain()
    finally:
        app.close()


def test_drain_async_runs_on_the_callers_loop_and_drain_refuses_to_block_it(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 't.db'}")
    app.migrate()

    @app.task(name="hello")
    async def hello(ctx: JobContext, name: str) -> str:
        await asyncio.sleep(0.01)
        return f"hello {name}"

    async def main() -> list[Any]:
        await hello.enqueue_async(name="world")
        with pytest.raises(RuntimeError, match="drain_async"):
            app.drain()
        return [r.result for r in await app.drain_async()]

    try:
        assert asyncio.run(main()) == ["hello world"]
    finally:
        app.close()


def test_the_memory_url_is_a_private_database_per_app_removed_with_it() -> None:
    one, two = Tether(MEMORY_URL), Tether(MEMORY_URL)

    @one.task(name="t")
    def t(ctx: JobContext) -> str:
        return "ran"

    t.enqueue()  # no migrate needed: the tables are created on first use
    assert [j.task for j in one.store.list_jobs()] == ["t"]
    assert two.store.list_jobs() == []
    assert [r.result for r in one.drain()] == ["ran"]
    assert one.scratch is not None
    folder = Path(one.scratch)
    assert folder.is_dir()
    one.close()
    two.close()
    del one, t
    gc.collect()
    assert not folder.exists()


def test_context_for_calling_a_handler_directly() -> None:
    def resize(ctx: JobContext, path: str) -> str:
        for i in range(3):
            ctx.raise_if_cancelled()
            ctx.progress((i + 1) / 4, f"step {i}")
        return f"{path} by {ctx.job_id}/{ctx.attempt}"

    ctx = context(job_id=7, attempt=2, args={"path": "a.png"})
    assert resize(ctx, path="a.png") == "a.png by 7/2"
    assert ctx.progress_reports == [(0.25, "step 0"), (0.5, "step 1"), (0.75, "step 2")]
    assert (ctx.task, ctx.queue, ctx.args, ctx.max_attempts) == ("test", "default", {"path": "a.png"}, 3)

    cancelled = context()
    cancelled.request_cancel()
    assert cancelled.cancelled and cancelled.cancel_reason == CancelReason.REQUESTED
    assert cancelled.wait_cancelled(0)
    with pytest.raises(JobCancelled):
        resize(cancelled, path="b.png")

    lost = context()
    lost.lose()
    with pytest.raises(StaleAttempt):
        lost.progress(0.5)
    assert lost.cancel_reason == CancelReason.LOST


def test_assert_enqueued_matches_queued_jobs_by_included_args(tether_app: Tether) -> None:
    @tether_app.task(name="resize")
    def resize(ctx: JobContext, path: str, width: int = 100) -> None:
        pass

    assert_not_enqueued(resize)
    resize.enqueue(path="a.png", width=50)
    job = assert_enqueued(resize, path="a.png")
    assert job.args == {"path": "a.png", "width": 50}
    assert_enqueued(resize)
    assert_not_enqueued(resize, path="b.png")
    with pytest.raises(AssertionError, match=r"no queued job of task 'resize'.*'a.png'"):
        assert_enqueued(resize, path="a.png", width=51)
    with pytest.raises(AssertionError, match=r"1 queued job\(s\)"):
        assert_not_enqueued(resize, path="a.png")
    tether_app.drain()
    assert enqueued(resize) == []  # ran: no longer queued


def test_enqueue_takes_args_by_name_only(tether_app: Tether) -> None:
    @tether_app.task(name="resize")
    def resize(ctx: JobContext, path: str) -> None:
        pass

    with pytest.raises(TypeError, match="by name"):
        resize.enqueue("a.png")


def test_the_pytest_plugin_in_a_real_pytest_run(tmp_path: Path) -> None:
    """The README's "Testing your tasks" project (tests/examples/testing: an app
    module, the ini option naming it, tests using the fixture, the assertions,
    context() and drain), run by pytest in a process of its own with the plugin
    loaded as ``-p`` names it (an installed tether loads it by entry point)."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "testing", project)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(project)])}
    env.pop("TETHER_DATABASE_URL", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "tether.testing.pytest_plugin",
                           "-p", "no:cacheprovider", str(project)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    assert not (project / "tether.db").exists()  # the app's own database was never touched


def test_wait_reads_the_database_the_app_points_at_now(tmp_path: Path) -> None:
    """app.wait inside temporary_database (the tether_app fixture with an ini
    app) reads the block's database. Before, the app's first wait kept its
    store: a later test's wait returned an earlier database's job of that id,
    or failed on its deleted file."""
    app = Tether(f"sqlite:///{tmp_path / 'own.db'}")
    app.migrate()

    @app.task(name="echo")
    def echo(ctx: JobContext, n: int) -> int:
        return n

    own = echo.enqueue(n=0)
    app.drain()
    assert app.wait(own, timeout=5).result == 0
    for n in (1, 2):
        with temporary_database(app):
            job_id = echo.enqueue(n=n)
            assert job_id == own  # a fresh database numbers from 1 again
            app.drain()
            assert app.wait(job_id, timeout=5).result == n
    assert app.wait(own, timeout=5).result == 0
    app.close()


def test_the_plugins_ini_option_names_a_missing_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "walk_tasks.py").write_text("from tether import Tether\napp = Tether('sqlite:///:memory:')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pytest.UsageError) as info:
        load_app("walk_tasks:ap")
    assert "module 'walk_tasks' has no attribute 'ap'; it has walk_tasks:app" in str(info.value)
    assert load_app("walk_tasks:app").dsn.backend == "sqlite"
    load_app("walk_tasks:app").close()


TYPED_EXAMPLE = """
from tether import JobContext, Tether
from tether.testing import context

app = Tether()


@app.task
def resize(ctx: JobContext, path: str, width: int = 100) -> str:
    return path


@app.task(queue="images")
async def thumbnail(ctx: JobContext, path: str) -> None:
    pass


resize.enqueue(path="a.png")
name: str = resize(context(), path="a.png")  # a direct call is typed too
resize.enqueue(path="a.png", width=50)
resize.using(priority=5).enqueue(path="a.png")
thumbnail.enqueue(path="a.png")
resize.enqueue(path=1)  # error: wrong type
resize.enqueue(paht="a.png")  # error: no such parameter
thumbnail.enqueue()  # error: missing path
resize.using(priority=5).enqueue(width="wide")  # error: wrong type, and missing path
resize(context(), path=2)  # error: wrong type
"""


def test_enqueue_is_typed_by_the_handlers_parameters(tmp_path: Path) -> None:
    """mypy over a small typed example: the good calls pass, each bad one is an error."""
    example = tmp_path / "typed_example.py"
    example.write_text(TYPED_EXAMPLE)
    env = {**os.environ, "MYPYPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                           "--no-error-summary", "--hide-error-context", str(example)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    lines = sorted({int(line.split(":")[1]) for line in errors})
    bad = [n for n, line in enumerate(TYPED_EXAMPLE.splitlines(), 1) if "# error:" in line]
    assert len(bad) == 5 and lines == bad, proc.stdout + proc.stderr
    assert any('"path" to "enqueue" of "Task" has incompatible type "int"; expected "str"' in e for e in errors), errors
    assert proc.returncode == 1


def test_the_docs_show_the_examples_the_suite_runs() -> None:
    """docs/how-to/testing.md and asgi.md include (pymdownx.snippets) the very
    files the suite runs: this project (tests/examples/testing) and
    tests/asgi_app.py, which tests/test_asgi.py serves."""
    docs = SRC.parent / "docs" / "how-to"
    testing, asgi = (docs / "testing.md").read_text(), (docs / "asgi.md").read_text()
    for name in ("tasks.py", "pytest.ini", "test_tasks.py"):
        assert (EXAMPLES / "testing" / name).is_file()
        assert f'--8<-- "tests/examples/testing/{name}' in testing, name
    assert '--8<-- "tests/asgi_app.py:app"' in asgi
