"""Text the databases cannot store: NUL characters and lone surrogates.

``"bad\\x00"`` is valid Python and valid JSON (``"\\u0000"``), and ``"\\ud800"``
a valid Python str, yet PostgreSQL's text and jsonb refuse a NUL, and no
driver can encode a lone surrogate as UTF-8. A handler's result holding one
used to jam a worker: the batched completion was refused, retried forever, and
the innocent jobs batched with it stayed running. Now:

- args, results and meta (``payload.dump_json``) holding one are a
  ``PayloadError`` on every backend: nothing is enqueued, and a handler's
  result ends its job dead with the reason;
- a worker's own free text from a handler (a failure's error and traceback, a
  progress message) is made storable instead (``payload.storable_text``);
- a batch of successes refused for its data is written one by one, so only
  the job it was refused for fails.

The store tests run on every backend (``STORE_BACKENDS``, the tether server
included), as the conformance suite does; the worker tests run a real
in-process burst worker on each.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tether import JobContext, Tether
from tether.errors import PayloadError
from tether.model import JobState, NewJob, Outcome
from tether.payload import MAX_ERROR_CHARS, dump_json, storable_text
from tether.store import Store
from tether.worker import executor as executor_module
from tether.worker.reporter import data_error

from .conftest import PGBOUNCER, STORE_BACKENDS, TEST_TOKEN, backend_param, served

W = "host-a:111:w1"
TTL = 30.0
FAST = {"lease_ttl": 1.5, "heartbeat_interval": 0.3, "reaper_interval": 0.3}
#: a NUL (PostgreSQL stores none), and a lone surrogate (not UTF-8: no driver encodes it)
NUL, SURROGATE = "bad\x00", "bad\ud800"


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


def _all_jobs(app: Tether) -> list[Any]:
    return app.store.list_jobs(limit=1000)


# -- dump_json and storable_text, alone ------------------------------------------------------


@pytest.mark.parametrize("value", [NUL, {"k\x00": 1}, ["ok", {"deep": [NUL]}], "\\\x00", "a\\\\\x00"],
                         ids=["str", "key", "nested", "after-a-backslash", "after-two-backslashes"])
def test_dump_json_refuses_a_nul_wherever_it_is(value: object) -> None:
    with pytest.raises(PayloadError, match=r"result of task 't' contains a NUL \(\\u0000\) character"):
        dump_json(value, "result of task 't'", 10_000)


@pytest.mark.parametrize("value", ["\\u0000", "\\\\\\u0000", {"\\u0000": "x\\u0000y"}],
                         ids=["six-characters", "escaped-backslashes", "key-and-value"])
def test_dump_json_takes_the_six_characters_backslash_u0000_as_they_are(value: object) -> None:
    """What the user wrote as ``\\u0000`` (a backslash, then five characters)
    is no NUL: json.dumps doubles its backslash, and it round-trips."""
    assert json.loads(dump_json(value, "args", 10_000)) == value


@pytest.mark.parametrize("value", [SURROGATE, {"\udfff": 1}, ["\udc80x"]], ids=["str", "key", "low-in-list"])
def test_dump_json_refuses_a_lone_surrogate(value: object) -> None:
    with pytest.raises(PayloadError, match=r"args of task 't' is not valid Unicode \(a lone surrogate"):
        dump_json(value, "args of task 't'", 10_000)


def test_dump_json_refuses_json_nested_too_deeply_for_python() -> None:
    """A RecursionError from json.dumps is a PayloadError too: from the
    executor's outcome path, anything else would leave the job unreported."""
    deep: list[Any] = []
    inner = deep
    for _ in range(5000):
        inner.append([])
        inner = inner[0]
    with pytest.raises(PayloadError, match="must be JSON"):
        dump_json(deep, "result", 10**6)


def test_storable_text_escapes_what_no_database_stores_and_keeps_the_rest() -> None:
    assert storable_text("bad\x00error") == "bad\\x00error"
    assert storable_text("x\ud800y\x00") == "x\\ud800y\\x00"
    assert storable_text("héllo ✓ \\x00") == "héllo ✓ \\x00"  # the user's own four characters, untouched
    assert storable_text(None) is None
    ok = "plain"
    assert storable_text(ok) is ok


def test_storable_text_cuts_the_middle_past_its_limit() -> None:
    text = "head " + "x" * 5000 + "\x00 tail"
    cut = storable_text(text, 1000)
    assert len(cut) <= 1000 and cut.startswith("head xxx") and cut.endswith("x\\x00 tail")
    assert f"[... {len(text) + 3 - 900} characters cut ...]" in cut  # the NUL's escape counts: 3 more
    assert storable_text("short", 1000) == "short"


# -- every backend: enqueue refuses, a worker's text is stored ------------------------------------


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_args_holding_unstorable_text_are_a_payload_error_and_nothing_is_enqueued(app: Tether, bad: str) -> None:
    @app.task(name="t")
    def t(ctx: JobContext, path: str) -> None: ...

    what = "NUL" if bad == NUL else "lone surrogate"
    with pytest.raises(PayloadError, match=f"args of task 't' .*{what}"):
        t.enqueue(path=bad)
    with pytest.raises(PayloadError, match=what):
        app.enqueue("t", path={"nested": [bad]})
    with pytest.raises(PayloadError, match=what):  # one bad job spoils the batch: all or nothing
        t.enqueue_many([{"path": "fine"}, {"path": bad}])
    assert _all_jobs(app) == []
    # the six characters \u0000 are text like any other
    job = app.get_job(t.enqueue(path="\\u0000"))
    assert job is not None and job.args == {"path": "\\u0000"}


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


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_a_result_a_backend_refuses_is_a_data_error_and_writes_nothing(store: Store, backend: str, bad: str) -> None:
    """What the reporter's split relies on: a completion refused for its data
    raises something ``data_error`` recognises (psycopg's DataError, a
    UnicodeEncodeError, a server's PayloadError), and the whole statement
    writes nothing, the innocent row in it included."""
    if backend == "sqlite":
        # It takes both: a NUL as it is, a surrogate as bytes that are not
        # UTF-8, after which reading the job fails. dump_json refuses both.
        pytest.skip("the SQLite store refuses neither (dump_json does)")
    store.enqueue([NewJob(task="t", args_json="{}"), NewJob(task="t", args_json="{}")])
    good, poor = store.claim(W, ["default"], 2, TTL)
    before = [store.get_job(good.id), store.get_job(poor.id)]
    raw = json.dumps(bad, ensure_ascii=False)  # what dump_json would refuse
    with pytest.raises(Exception) as info:
        store.complete(W, [(good.id, good.attempt, "1"), (poor.id, poor.attempt, raw)])
    assert data_error(info.value), repr(info.value)
    assert [store.get_job(good.id), store.get_job(poor.id)] == before
    assert store.complete(W, [(good.id, good.attempt, "1")]) == {good.id}


# -- a real worker ------------------------------------------------------------------------------------


def _run(app: Tether, concurrency: int = 4, within: float = 30) -> Any:
    worker = app.worker(concurrency=concurrency, burst=True, shutdown_timeout=5)
    asyncio.run(asyncio.wait_for(worker.run(), within))  # a jammed worker never ends its burst
    return worker


def test_a_worker_ends_jobs_with_unstorable_text_and_finishes_every_other(app: Tether) -> None:
    @app.task(name="nul_result")
    def nul_result(ctx: JobContext) -> str:
        return "bad\x00result"

    @app.task(name="surrogate_result")
    def surrogate_result(ctx: JobContext) -> dict[str, str]:
        return {"r": "bad\ud800"}

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

    bad = {"nul": nul_result.enqueue(), "surrogate": surrogate_result.enqueue(), "error": nul_error.enqueue(),
           "progress": nul_progress.enqueue()}
    innocent = ordinary.enqueue_many([{"i": i} for i in range(20)])

    worker = _run(app)

    for i, job_id in enumerate(innocent):
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.SUCCEEDED and job.result == {"i": i}, job
    job = app.get_job(bad["nul"])
    assert job is not None and job.state is JobState.DEAD and job.attempts_used == 1
    assert job.last_error == ("result of task 'nul_result' contains a NUL (\\u0000) character, which the database "
                              "cannot store")
    job = app.get_job(bad["surrogate"])
    assert job is not None and job.state is JobState.DEAD and job.attempts_used == 1
    assert job.last_error is not None and "result of task 'surrogate_result' is not valid Unicode (a lone " \
        "surrogate, '\\ud800'" in job.last_error
    # the failure path as for any exception: retried, then dead, its text cleaned
    job = app.get_job(bad["error"])
    assert job is not None and job.state is JobState.DEAD and job.attempts_used == 2
    assert [a.error for a in job.attempts] == ["ValueError: bad\\x00error \\ud800"] * 2
    assert all(a.traceback is not None and 'raise ValueError("bad\\x00error \\ud800")' in a.traceback
               for a in job.attempts)
    job = app.get_job(bad["progress"])
    assert job is not None and job.state is JobState.SUCCEEDED and job.result == 1, job
    assert worker.counts["succeeded"] == 21, worker.counts


def test_a_failure_s_text_too_long_for_a_tether_server_is_cut_not_refused(app: Tether) -> None:
    """A tether server takes an error of at most MAX_ERROR_CHARS characters
    (and a traceback of MAX_TRACEBACK_CHARS): a longer one was refused, and
    the report retried forever, as a NUL's was."""
    @app.task(name="long_error", max_attempts=1)
    def long_error(ctx: JobContext) -> None:
        raise ValueError("start " + "x" * (2 * MAX_ERROR_CHARS) + " end")

    job_id = long_error.enqueue()
    _run(app, concurrency=1)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.DEAD and job.last_error is not None
    assert len(job.last_error) <= MAX_ERROR_CHARS
    assert job.last_error.startswith("ValueError: start xxx") and job.last_error.endswith("xxx end")
    assert "characters cut ..." in job.last_error


def test_a_batch_of_successes_refused_for_one_result_is_written_one_by_one(
    app: Tether, backend: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Defense in depth: were a result the database refuses ever to get past
    dump_json, the batch it rides in must not be retried whole forever. Four
    ``async def`` handlers end in one turn of the worker's loop (the last to
    start releases the others), so their successes are all waiting before the
    reporter or the claimer runs: one statement. The database refuses it for
    the one bad result; written one by one, the three others succeed and the
    bad one fails with the reason."""
    if backend == "sqlite":
        pytest.skip("the SQLite store refuses no result (dump_json does)")
    monkeypatch.setattr(executor_module, "dump_json",
                        lambda value, what, cap: json.dumps(value, ensure_ascii=False))  # no checks
    bad_result = NUL if backend in ("postgresql", PGBOUNCER) else SURROGATE  # psycopg's DataError; else encoding
    started: list[int] = []
    all_in = asyncio.Event()

    @app.task(name="together", max_attempts=1)
    async def at_once(ctx: JobContext, bad: bool) -> str:
        started.append(ctx.job_id)
        if len(started) == 4:
            all_in.set()
        else:
            await asyncio.wait_for(all_in.wait(), 10)
        return bad_result if bad else "fine"

    ids = at_once.enqueue_many([{"bad": i == 2} for i in range(4)])
    with caplog.at_level(logging.WARNING, logger="tether.worker"):
        _run(app)

    states = [app.get_job(i) for i in ids]
    assert [j.state if j else None for j in states] == [JobState.SUCCEEDED] * 2 + [JobState.DEAD, JobState.SUCCEEDED]
    assert all(j is not None and j.result == "fine" for j in states[:2] + states[3:])
    poor = states[2]
    assert poor is not None and poor.last_error is not None
    assert poor.last_error.startswith("its success could not be written: the database refused its result"), poor
    assert "writing them one by one" in caplog.text, "the four successes were not in one batch"
