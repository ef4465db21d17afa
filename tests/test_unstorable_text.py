"""Text the databases cannot store: NUL characters and lone surrogates.

``"bad\\x00"`` is valid Python and valid JSON (``"\\u0000"``), and ``"\\ud800"``
a valid Python str, yet PostgreSQL's text and jsonb refuse a NUL, and no
driver can encode a lone surrogate as UTF-8. A worker's own free text from a
handler (a failure's error and traceback, a progress message) is made
storable (``config.storable_text``): a refused report was retried for as long
as the heartbeat kept the lease, that is forever.

The store tests run on every backend (``STORE_BACKENDS``, the tether server
included), as the conformance suite does; the worker tests run a real
in-process burst worker on each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tether import JobContext, Tether
from tether.config import storable_text
from tether.model import JobState, NewJob, Outcome
from tether.store import Store

from .conftest import STORE_BACKENDS, TEST_TOKEN, backend_param, served

W = "host-a:111:w1"
TTL = 30.0
FAST = {"lease_ttl": 1.5, "heartbeat_interval": 0.3, "reaper_interval": 0.3}


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture
def app(backend: str, db_url: str) -> Iterator[Tether]:
    """An app on this backend (through a tether server for ``http-*``), migrated."""
    if backend.startswith("http-"):
        with served(db_url) as url:
            remote = Tether(url, token=TEST_TOKEN, **FAST)
            yield remote
            remote.close()
        return
    local = Tether(db_url, **FAST)
    local.migrate()
    yield local
    local.close()


# -- dump_json and storable_text, alone ------------------------------------------------------


def test_storable_text_escapes_what_no_database_stores_and_keeps_the_rest() -> None:
    assert storable_text("bad\x00error") == "bad\\x00error"
    assert storable_text("x\ud800y\x00") == "x\\ud800y\\x00"
    assert storable_text("héllo ✓ \\x00") == "héllo ✓ \\x00"  # the user's own four characters, untouched
    assert storable_text(None) is None
    ok = "plain"
    assert storable_text(ok) is ok


# -- every backend: a worker's cleaned text is stored ------------------------------------


def test_a_worker_s_cleaned_text_is_stored_as_it_is_on_every_backend(store: Store) -> None:
    """What ``storable_text`` makes of a handler's text, every backend stores
    (and a tether server accepts), and gives back unchanged."""
    store.enqueue([NewJob(task="t", args_json="{}", max_attempts=2), NewJob(task="t", args_json="{}")])
    first, second = store.claim(W, ["default"], 2, TTL)
    message = storable_text("half\x00way \ud800")
    assert not store.progress(W, first.id, first.attempt, 0.5, message, TTL)
    got = store.get_job(first.id)
    assert got is not None and got.progress_message == "half\\x00way \\ud800"
    error = storable_text("ValueError: bad\x00error \udfff")
    tb = storable_text('Traceback (most recent call last):\n  raise ValueError("bad\x00error")\n')
    assert store.fail(W, first.id, first.attempt, outcome=Outcome.FAILED, error=error, traceback=tb,
                      retry=True, delay=0) is JobState.QUEUED
    got = store.get_job(first.id)
    assert got is not None and got.last_error == "ValueError: bad\\x00error \\udfff"
    assert got.attempts[-1].error == got.last_error and got.attempts[-1].traceback == tb
    assert store.fail(W, second.id, second.attempt, outcome=Outcome.DISCARDED, error=storable_text("discarded: \x00"),
                      retry=False) is JobState.DEAD


# -- a real worker ------------------------------------------------------------------------------------


def _run(app: Tether, concurrency: int = 4, within: float = 30) -> Any:
    worker = app.worker(concurrency=concurrency, burst=True, shutdown_timeout=5)
    asyncio.run(asyncio.wait_for(worker.run(), within))  # a jammed worker never ends its burst
    return worker


def test_a_worker_ends_jobs_with_unstorable_text_and_finishes_every_other(app: Tether) -> None:
    @app.task(name="nul_error", max_attempts=2, retry_backoff=lambda attempt: 0.0)
    def nul_error(ctx: JobContext) -> None:
        raise ValueError("bad\x00error \ud800")

    @app.task(name="nul_progress")
    def nul_progress(ctx: JobContext) -> int:
        ctx.progress(0.5, "half\x00way \ud800")
        job = app.get_job(ctx.job_id)
        assert job is not None
        return 1 if job.progress_message == "half\\x00way \\ud800" else 0

    @app.task(name="ordinary")
    def ordinary(ctx: JobContext, i: int) -> dict[str, int]:
        return {"i": i}

    bad = {"error": nul_error.enqueue(), "progress": nul_progress.enqueue()}
    innocent = ordinary.enqueue_many([{"i": i} for i in range(20)])

    worker = _run(app)

    for i, job_id in enumerate(innocent):
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.SUCCEEDED and job.result == {"i": i}, job
    # the failure path as for any exception: retried, then dead, its text cleaned
    job = app.get_job(bad["error"])
    assert job is not None and job.state is JobState.DEAD and job.attempts_used == 2
    assert [a.error for a in job.attempts] == ["ValueError: bad\\x00error \\ud800"] * 2
    assert all(a.traceback is not None and 'raise ValueError("bad\\x00error \\ud800")' in a.traceback
               for a in job.attempts)
    job = app.get_job(bad["progress"])
    assert job is not None and job.state is JobState.SUCCEEDED and job.result == 1, job
    assert worker.counts["succeeded"] == 21, worker.counts
