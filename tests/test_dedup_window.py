"""Uniqueness windows (issue 44): ``using(dedup_key=..., dedup_for="1h")``
keeps the key taken for that long after the job ended, whatever state it
ended in; within the window an enqueue returns the existing id, with
``.duplicate`` True, and adds nothing. On every store (the ``store``
fixture: SQLite, PostgreSQL, PgBouncer, and both through ``tether server``),
and through the app's every enqueue path. Clocks are moved with ``now=``."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from tether import ConfigError, JobContext, JobId, Tether
from tether.model import JobState, Outcome
from tether.store import Store

from .conftest import PG_URL, STORE_BACKENDS, TEST_TOKEN, backend_param, served
from .test_conformance import TTL, W, get, new_job

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def one(store: Store, key: str, now: object, window: float | None = 3600.0, **options: object) -> JobId:
    (jid,) = store.enqueue([new_job(dedup_key=key, dedup_for=window, **options)], now=now)  # type: ignore[arg-type]
    return jid


def finish(store: Store, job_id: int, now: object, how: str = "complete") -> None:
    (c,) = store.claim_ids(W, [job_id], ["default"], TTL, now=now)  # type: ignore[arg-type]
    if how == "complete":
        assert store.complete(W, [(c.id, c.attempt, None)], now=now) == {c.id}  # type: ignore[arg-type]
    else:
        store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="boom", retry=False, now=now)  # type: ignore[arg-type]


def test_the_key_stays_taken_for_the_window_after_the_job_ends(store: Store) -> None:
    t0 = store.db_now()
    first = one(store, "stripe:1", t0)
    assert isinstance(first, int) and first.duplicate is False
    again = one(store, "stripe:1", t0)
    assert again == first and again.duplicate is True
    finish(store, first, t0 + timedelta(seconds=10))
    assert get(store, first).state is JobState.SUCCEEDED
    # inside the window (ended at t0+10, for an hour): its id, nothing added
    late = one(store, "stripe:1", t0 + timedelta(seconds=3000))
    assert late == first and late.duplicate
    assert len(store.list_jobs(limit=100)) == 1
    # past the window: a new job, and the old one gave its key up
    fresh = one(store, "stripe:1", t0 + timedelta(seconds=3611))
    assert fresh != first and not fresh.duplicate
    assert get(store, first).dedup_for is None and get(store, fresh).dedup_for == 3600.0


def test_a_plain_dedup_key_enqueue_respects_a_window_too(store: Store) -> None:
    """A key inside a window is taken for every enqueue; a plain dedup_key
    enqueue of a key never windowed behaves as before (freed at the end)."""
    t0 = store.db_now()
    windowed = one(store, "mixed", t0)
    finish(store, windowed, t0)
    (plain,) = store.enqueue([new_job(dedup_key="mixed")], now=t0 + timedelta(seconds=5))
    assert plain == windowed and plain.duplicate


def test_any_terminal_state_holds_the_key(store: Store) -> None:
    t0 = store.db_now()
    dead = one(store, "k-dead", t0, max_attempts=1)
    finish(store, dead, t0, how="fail")
    assert get(store, dead).state is JobState.DEAD
    cancelled = one(store, "k-cancel", t0)
    store.cancel(cancelled, now=t0)
    for key, jid in (("k-dead", dead), ("k-cancel", cancelled)):
        hit = one(store, key, t0 + timedelta(seconds=60))
        assert hit == jid and hit.duplicate


def test_without_a_window_the_key_is_freed_at_the_end_as_before(store: Store) -> None:
    t0 = store.db_now()
    first = one(store, "plain", t0, window=None)
    assert one(store, "plain", t0, window=None).duplicate
    finish(store, first, t0)
    second = one(store, "plain", t0, window=None)
    assert second != first and not second.duplicate


def test_many_jobs_in_one_enqueue_say_which_were_there(store: Store) -> None:
    t0 = store.db_now()
    held = one(store, "a", t0)
    finish(store, held, t0)
    ids = store.enqueue([new_job(dedup_key="a", dedup_for=60.0), new_job(), new_job(dedup_key="b", dedup_for=60.0)],
                        now=t0 + timedelta(seconds=30))
    assert [i.duplicate for i in ids] == [True, False, False] and ids[0] == held
    # one of them past its window: released and inserted again, the rest answered in place
    ids = store.enqueue([new_job(dedup_key="b", dedup_for=60.0), new_job(dedup_key="a", dedup_for=60.0)],
                        now=t0 + timedelta(seconds=3601))
    assert ids[0].duplicate and not ids[1].duplicate and ids[1] != held


# -- the app's enqueue paths ---------------------------------------------------------------

@pytest.fixture
def app_url(backend: str, db_url: str) -> Iterator[tuple[str, str | None]]:
    """The URL an app opens (the database, or a server over it) and its token."""
    if backend.startswith("http-"):
        with served(db_url) as url:
            yield url, TEST_TOKEN
        return
    yield db_url, None


def _app(url: str, token: str | None) -> Tether:
    app = Tether(url, token=token) if token else Tether(url)
    if not token:
        app.migrate()
    return app


def test_every_enqueue_path_tells_a_duplicate(app_url: tuple[str, str | None]) -> None:
    app = _app(*app_url)
    try:
        @app.task()
        def hook(ctx: JobContext, event: int) -> None: ...

        first = hook.using(dedup_key="evt:1", dedup_for="1h").enqueue(event=1)
        assert type(first) is JobId and not first.duplicate
        assert hook.using(dedup_key="evt:1", dedup_for="1h").enqueue(event=1).duplicate
        assert hook.using(dedup_key="evt:1").enqueue(event=1).duplicate  # a plain dedup_key hit says so too
        assert hook.enqueue(event=1).duplicate is False
        again = asyncio.run(hook.using(dedup_key="evt:1", dedup_for="1h").enqueue_async(event=1))
        assert again == first and again.duplicate
        many = hook.using(dedup_key="evt:1", dedup_for="1h").enqueue_many([{"event": 1}])
        assert many == [first] and many[0].duplicate
        assert app.enqueue(hook.name, event=2) != first
        assert app.get_job(first).dedup_for is not None  # type: ignore[union-attr]
    finally:
        app.close()


@pytest.mark.parametrize("bad", ["soon", "-1m", "1y", float("nan"), 1e12, True])
def test_bad_windows_are_refused_with_a_clear_error(tmp_path: object, bad: object) -> None:
    app = Tether(f"sqlite:///{tmp_path}/t.db")
    try:
        @app.task()
        def hook(ctx: JobContext) -> None: ...

        with pytest.raises(ConfigError, match="dedup_for"):
            hook.using(dedup_key="k", dedup_for=bad).enqueue()
    finally:
        app.close()


def test_a_window_needs_a_key(tmp_path: object) -> None:
    app = Tether(f"sqlite:///{tmp_path}/t.db")
    app.migrate()
    try:
        @app.task()
        def hook(ctx: JobContext) -> None: ...

        with pytest.raises(ConfigError, match="dedup_for needs a dedup_key"):
            hook.using(dedup_for="1h").enqueue()
        assert app.store.list_jobs() == []
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_the_transactional_enqueue_tells_a_duplicate(db_url: str, backend: str) -> None:
    app = Tether(db_url)
    app.migrate()
    try:
        @app.task()
        def hook(ctx: JobContext) -> None: ...

        first = hook.using(dedup_key="tx", dedup_for="1h").enqueue()
        if backend == "sqlite":
            conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            got = hook.using(dedup_key="tx", dedup_for="1h", connection=conn).enqueue()
            conn.execute("COMMIT")
            conn.close()
        else:
            with psycopg.connect(db_url.split("?")[0], options=f"-c search_path={db_url.split('schema=')[1]}") as c:
                got = hook.using(dedup_key="tx", dedup_for="1h", connection=c).enqueue()
        assert got == first and got.duplicate
    finally:
        app.close()


# -- producers racing one key inside the window: one job -----------------------------------

def _race_in_process(url: str, key: str, n: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    app = Tether(url)
    try:
        @app.task(name="hook")
        def hook(ctx: JobContext) -> None: ...

        out.put([int(hook.using(dedup_key=key, dedup_for="1h").enqueue()) for _ in range(n)])
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_racing_producers_inside_the_window_make_one_job(db_url: str) -> None:
    """Threads and processes enqueue one key at once, before and after its
    first holder ended (and once its window passed on a second key): one job
    per key and window, every producer told its id."""
    app = Tether(db_url)
    app.migrate()
    try:
        @app.task(name="hook")
        def hook(ctx: JobContext) -> None: ...

        held = hook.using(dedup_key="race", dedup_for="1h").enqueue()
        app.store.cancel(held)  # ended: the window holds the key now
        got: list[int] = []
        lock = threading.Lock()
        start = threading.Barrier(8)

        def produce() -> None:
            start.wait()
            for key in ("race", "race-new"):
                for _ in range(5):
                    jid = hook.using(dedup_key=key, dedup_for="1h").enqueue()
                    with lock:
                        got.append(int(jid))

        threads = [threading.Thread(target=produce) for _ in range(8)]
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=_race_in_process, args=(db_url, "race-new", 5, out)) for _ in range(3)]
        for p in procs:
            p.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        from_procs = [jid for _ in procs for jid in out.get(timeout=60)]
        for p in procs:
            p.join(30)
        assert {jid for jid in got if jid == held} == {held}  # the finished holder answered for "race"
        new_ids = set(got) - {held} | set(from_procs)
        assert len(new_ids) == 1, new_ids
        jobs = app.store.list_jobs(limit=100)
        assert sorted(j.dedup_key or "" for j in jobs) == ["race", "race-new"]
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_a_previous_release_producer_still_enqueues_on_the_new_schema(db_url: str, backend: str) -> None:
    """Its ON CONFLICT names migration 0001's predicate: PostgreSQL infers the
    widened index from it; SQLite keeps 0001's index for it."""
    app = Tether(db_url)
    app.migrate()
    old = ("INSERT INTO {t} (queue, task, args, state, priority, run_at, created_at, dedup_key, max_attempts) "
           "VALUES ('default', 't', '{{}}', 'queued', 0, {now}, {now}, 'old', 3) "
           "ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running') DO NOTHING")
    try:
        if backend == "sqlite":
            with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
                for _ in range(2):
                    conn.execute(old.format(t="tether_jobs", now="0"))
        else:
            schema = db_url.split("schema=")[1]
            with psycopg.connect(PG_URL) as conn:
                for _ in range(2):
                    conn.execute(old.format(t=f'"{schema}".jobs', now="now()"))  # type: ignore[arg-type]
        assert [j.dedup_key for j in app.store.list_jobs()] == ["old"]
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_the_docs_example(db_url: str, tmp_path: Path) -> None:
    """docs/examples/uniqueness-and-expiry/example.py, as a reader runs it."""
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "uniqueness-and-expiry" / "example.py"
    env = {**os.environ, "TETHER_DATABASE_URL": db_url,
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    done = subprocess.run([sys.executable, str(example)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "before it is due to run" in done.stdout and ": done" in done.stdout


def test_tether_enqueue_takes_a_window_and_says_duplicate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    (tmp_path / "cli_app.py").write_text(
        "from tether import JobContext, Tether\n"
        f"app = Tether({url!r})\n"
        "@app.task(name='hook')\n"
        "def hook(ctx: JobContext) -> None: ...\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent / "src"),
                                                        str(tmp_path)])}
    env.pop("TETHER_DATABASE_URL", None)

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tether", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)

    assert tether("-d", url, "migrate").returncode == 0
    first = tether("enqueue", "hook", "--app", "cli_app:app", "--dedup-key", "k", "--dedup-for", "1h", "--expires",
                   "10m")
    again = tether("enqueue", "hook", "--app", "cli_app:app", "--dedup-key", "k", "--dedup-for", "1h")
    assert first.returncode == 0 and again.returncode == 0, (first.stderr, again.stderr)
    assert first.stdout == again.stdout and "duplicate" in again.stderr and "duplicate" not in first.stderr
    shown = tether("-d", url, "job", first.stdout.strip())
    assert shown.returncode == 0 and "taken for 1h" in shown.stdout and "expires" in shown.stdout, shown.stdout
    bad = tether("enqueue", "hook", "--app", "cli_app:app", "--dedup-key", "j", "--dedup-for", "soon")
    assert bad.returncode != 0 and "dedup_for must be a duration" in bad.stderr
