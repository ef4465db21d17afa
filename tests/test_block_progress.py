"""``ctx.progress()`` beside ``ctx.transaction()`` blocks (found by a new
user's walkthrough).

SQLite: an ``async def`` handler's ``ctx.progress()`` while another
handler's ``ctx.transaction()`` block, on the same worker's loop, holds the
one write lock. The progress write used to wait for the lock on the loop,
which the block needed to finish: both stood until ``busy_timeout`` (30 s),
heartbeats failed, and jobs were lost (a new user's walkthrough: 5 of 200
jobs done in 100 s). A real worker on a real SQLite file.

Any backend: progress after the block, as the README advised, was refused
as StaleAttempt (the block's commit is the job's success), and the
handler's result was lost with it."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tether import JobContext, JobState, Tether

from .test_worker import is_final, running, wait_job


def test_progress_beside_an_open_block_does_not_stall_the_worker(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    app = Tether(f"sqlite:///{path}")
    app.migrate()
    with contextlib.closing(sqlite3.connect(path)) as conn:  # the app's own table, beside tether's
        conn.execute("CREATE TABLE effects (job_id INTEGER)")
        conn.commit()

    @app.task(name="holds")
    async def holds(ctx: JobContext) -> int:
        async with ctx.transaction() as conn:  # type: ignore[attr-defined]
            conn.execute("INSERT INTO effects (job_id) VALUES (?)", (ctx.job_id,))
            await asyncio.sleep(0.3)  # the lock is held while the loop runs others
        return ctx.job_id

    @app.task(name="reports")
    async def reports(ctx: JobContext) -> int:
        for i in range(10):
            ctx.progress(i / 10, f"step {i}")  # README: progress before or after a block, never inside
            await asyncio.sleep(0.05)
        return ctx.job_id

    ids = [app.get_task("holds" if i % 2 else "reports").enqueue() for i in range(12)]
    started = time.monotonic()
    with running(app, concurrency=4):
        jobs = [wait_job(app, j, is_final, timeout=25) for j in ids]  # 30 s each, stalled
    took = time.monotonic() - started
    assert [j.state for j in jobs] == [JobState.SUCCEEDED] * len(ids), jobs
    assert all(j.attempts_used == 1 for j in jobs), jobs
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM effects").fetchone()[0] == len(ids) // 2
    assert took < 25
    app.close()


@pytest.mark.parametrize("kind", ["def", "async"])
def test_progress_after_the_block_keeps_the_result(make_app: Callable[..., Tether], kind: str) -> None:
    app = make_app()
    if kind == "def":
        @app.task(name="after")
        def after(ctx: JobContext) -> str:
            with ctx.transaction():
                pass
            ctx.progress(1.0, "done")
            return "kept"
    else:
        @app.task(name="after")
        async def after(ctx: JobContext) -> str:  # type: ignore[misc]
            async with ctx.transaction():  # type: ignore[attr-defined]
                pass
            ctx.progress(1.0, "done")
            return "kept"

    job_id = app.get_task("after").enqueue()
    with running(app):
        job = wait_job(app, job_id, is_final)
        # the block's commit made the job succeeded; the handler's result is
        # written after it returns (a moment later under load): kept, not lost
        deadline = time.monotonic() + 15
        while job.result is None and time.monotonic() < deadline:
            time.sleep(0.05)
            job = app.get_job(job_id) or job
    assert job.state is JobState.SUCCEEDED and job.result == "kept", job
