"""``tether worker --burst`` as a real process on both backends: it runs every
due job (and the jobs those enqueue), leaves jobs due later alone, and exits 0
once no job is due and none is running."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tether import JobContext, JobState, Tether
from tether.model import NewJob

ROOT = Path(__file__).resolve().parent.parent

BURST_APP = """
import os
import time

from tether import JobContext, Tether

app = Tether(os.environ["TETHER_DATABASE_URL"])


@app.task(name="add")
def add(ctx: JobContext, a: int, b: int) -> int:
    time.sleep(0.05)
    return a + b


@app.task(name="fan_out")
async def fan_out(ctx: JobContext, n: int) -> None:
    for i in range(n):
        await add.enqueue_async(a=i, b=i)


@app.task(name="broken", max_attempts=1)
def broken(ctx: JobContext) -> None:
    raise ValueError("no")
"""


def _burst(db_url: str, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "TETHER_DATABASE_URL": db_url,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])}
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tether", "worker", "--app", "burst_app:app", "--burst",
                           "--concurrency", "4", *extra],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - began


def test_burst_runs_what_is_due_then_exits_0(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "burst_app.py").write_text(textwrap.dedent(BURST_APP))
    app = Tether(db_url)
    app.migrate()
    try:
        store = app.store  # the test's app registers no task: enqueue rows as a producer elsewhere would
        adds = store.enqueue([NewJob(task="add", args_json=f'{{"a": {i}, "b": 1}}') for i in range(6)])
        [fan] = store.enqueue([NewJob(task="fan_out", args_json='{"n": 3}')])
        [bad] = store.enqueue([NewJob(task="broken", args_json="{}", max_attempts=1)])
        [later] = store.enqueue([NewJob(task="add", args_json='{"a": 0, "b": 0}', delay=3600)])

        proc, took = _burst(db_url, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "burst: no job is due" in proc.stderr and "stopped after" in proc.stderr

        for job_id, i in zip(adds, range(6), strict=True):
            job = app.get_job(job_id)
            assert job is not None and job.state is JobState.SUCCEEDED and job.result == i + 1
        fanned = [j for j in store.list_jobs(task="add", state="succeeded", limit=100) if j.id not in adds]
        assert sorted(j.result for j in fanned) == [0, 2, 4]  # enqueued by fan_out during the burst
        assert store.get_job(fan).state is JobState.SUCCEEDED  # type: ignore[union-attr]
        dead = store.get_job(bad)
        assert dead is not None and dead.state is JobState.DEAD and dead.last_error == "ValueError: no"
        waiting = store.get_job(later)
        assert waiting is not None and waiting.state is JobState.QUEUED and waiting.attempt == 0

        again, quick = _burst(db_url, tmp_path)  # nothing is due: it starts, looks once, and exits
        assert again.returncode == 0, again.stderr
        assert "no jobs finished" in again.stderr
        assert quick < 30 and took < 60
    finally:
        app.close()


def test_a_burst_worker_with_prefetch_finishes_every_job_before_it_stops(db_url: str) -> None:
    """Short handlers on PostgreSQL make the worker claim ahead into its buffer;
    buffered jobs count as in flight, so the burst ends only after all of them."""
    app = Tether(db_url)
    app.migrate()

    @app.task(name="noop")
    async def noop(ctx: JobContext, i: int) -> int:
        return i

    try:
        ids = noop.enqueue_many([{"i": i} for i in range(300)])
        worker = app.worker(concurrency=8, burst=True, shutdown_timeout=5)
        asyncio.run(asyncio.wait_for(worker.run(), 60))
        assert worker.counts["succeeded"] == 300 and worker.counts["released"] == 0, worker.counts
        done = store_states(app, ids)
        assert done == {JobState.SUCCEEDED: 300}
    finally:
        app.close()


def store_states(app: Tether, ids: list[int]) -> dict[JobState, int]:
    states: dict[JobState, int] = {}
    for job_id in ids:
        job = app.get_job(job_id)
        assert job is not None
        states[job.state] = states.get(job.state, 0) + 1
    return states


def test_a_burst_claimer_looks_again_when_its_last_claim_went_out_before_a_report(db_url: str) -> None:
    """The race behind a flaky drain: the claim that found nothing was sent
    while a failed job's report was still being written, and the report (a
    retry due at once) landed before that claim's answer. With nothing in
    flight any more the claimer stopped, leaving the retry queued. It must
    look once more instead, and stop only after a claim that went out with
    nothing in flight."""
    app = Tether(db_url)
    app.migrate()
    try:
        worker = app.worker(concurrency=1, burst=True)
        claimer = worker.claimer
        stopped: list[bool] = []
        claimer.on_empty = lambda: stopped.append(True)  # type: ignore[attr-defined]

        async def look() -> None:
            claimer.state.bind(asyncio.get_running_loop())
            claimer.bind()
            claimer._looked_early = True  # type: ignore[attr-defined]  # as after a claim sent mid-report
            await claimer.idle()
            assert stopped == [], "stopped without looking again after the report"
            claimer._looked_early = False  # type: ignore[attr-defined]  # the next claim went out clean
            await claimer.idle()
            assert stopped == [True]
            claimer.state.stop_waiter.cancel()

        asyncio.run(look())
    finally:
        app.close()


def test_a_burst_that_stops_says_which_due_jobs_no_live_worker_knows(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A v1 burst worker in a deploy, with a job of a task only v2 has: it
    stops, leaving that job queued, and now says so instead of "no job is
    due" alone."""
    import logging

    app = Tether(db_url)
    try:
        app.migrate()

        @app.task(name="v1.task")
        def v1(ctx: JobContext) -> None: ...

        v1.enqueue()
        app.store.enqueue([NewJob(task="v2.task", args_json="{}")])
        with caplog.at_level(logging.INFO, logger="tether"):
            asyncio.run(app.worker(burst=True).run())
        [line] = [r.getMessage() for r in caplog.records if "burst: no job is due" in r.getMessage()]
        assert "1 due job(s) of tasks no live worker knows wait: v2.task on default (1)" in line
        assert app.store.stats().counts.get(("default", JobState.QUEUED)) == 1
    finally:
        app.close()


def test_a_burst_that_stops_names_its_paused_queues_due_jobs(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A drain in CI over a paused queue ran nothing and said only "no job is
    due": a run could pass with work left undone. The stop now counts the
    paused queues' due jobs, at WARNING."""
    import logging

    app = Tether(db_url)
    try:
        app.migrate()

        @app.task(name="mail", queue="emails")
        def mail(ctx: JobContext) -> None: ...

        @app.task(name="noop")
        def noop(ctx: JobContext) -> None: ...

        mail.enqueue()
        mail.enqueue()
        mail.using(delay=3600).enqueue()  # not due: not counted
        app.pause("emails")
        app.pause("elsewhere")  # not this worker's
        with caplog.at_level(logging.INFO, logger="tether"):
            assert app.drain() == []
        [record] = [r for r in caplog.records if "burst: no job is due" in r.getMessage()]
        assert record.levelno == logging.WARNING
        assert "2 due job(s) wait in paused queue(s): emails (2) (tether resume QUEUE)" in record.getMessage()
        assert "elsewhere" not in record.getMessage()
        caplog.clear()
        app.resume("emails")
        with caplog.at_level(logging.INFO, logger="tether"):
            assert len(app.drain()) == 2
        [record] = [r for r in caplog.records if "burst: no job is due" in r.getMessage()]
        assert record.levelno == logging.INFO and "paused" not in record.getMessage()
    finally:
        app.close()
