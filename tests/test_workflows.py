"""Workflows (issue 42; I9): a step waits until the ending of its last
dependency releases it, in that ending's statement or transaction, fenced
like it. Conformance on every store: SQLite, PostgreSQL, PostgreSQL through
PgBouncer, and both through a tether server (its remote workers end jobs
through the server, and the runs are enqueued through it: POST /v1/workflows)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tether import ConfigError, JobContext, JobState, Outcome, Tether, UnknownTask
from tether.config import parse_database_url
from tether.model import NewJob
from tether.search import JobFilter
from tether.store import Store, open_store
from tether.store.flows import NewWorkflow

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import TTL, W, get, new_job, sec

W2 = "worker-2"


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def enqueue(direct: Store, steps: dict[str, Sequence[str]], *, run: Sequence[str] = (),
            max_attempts: int = 3) -> dict[str, int]:
    """A run whose steps (in order) wait for the named ones; ``run``: the steps
    whose policy is on_failure='run'. {step: job id}"""
    names = list(steps)
    flow = NewWorkflow("test", [new_job(args={"step": n}, max_attempts=max_attempts) for n in names], names,
                       [[names.index(u) for u in ups] for ups in steps.values()],
                       ["run" if n in run else "cancel" for n in names])
    _, ids = direct.enqueue_workflow(flow)
    return dict(zip(names, ids, strict=True))


def states(store: Store, jobs: dict[str, int]) -> dict[str, str]:
    return {n: str(get(store, i).state) for n, i in jobs.items()}


def claim(store: Store, worker: str = W) -> dict[int, int]:
    """{job id: attempt} of everything claimable now."""
    return {c.id: c.attempt for c in store.claim(worker, ["default"], 50, TTL)}


def succeed(store: Store, jobs: dict[str, int], *names: str) -> None:
    """Claim exactly the named steps and complete them."""
    got = claim(store)
    assert set(got) == {jobs[n] for n in names}, (got, names, states(store, jobs))
    assert store.complete(W, [(i, a, f'{{"from": "{i}"}}') for i, a in got.items()]) == set(got)


def test_a_chain_runs_step_by_step(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"], "c": ["b"]})
    assert states(store, jobs) == {"a": "queued", "b": "waiting", "c": "waiting"}
    assert store.stats().counts[("default", "waiting")] == 2  # tether_queue_depth{state="waiting"}
    succeed(store, jobs, "a")
    assert states(store, jobs) == {"a": "succeeded", "b": "queued", "c": "waiting"}
    succeed(store, jobs, "b")
    succeed(store, jobs, "c")
    assert set(states(store, jobs).values()) == {"succeeded"}


def test_a_diamond_joins_once_both_branches_succeeded(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    succeed(store, jobs, "a")
    got = claim(store)
    assert set(got) == {jobs["b"], jobs["c"]}
    assert store.complete(W, [(jobs["b"], got[jobs["b"]], None)]) == {jobs["b"]}
    assert states(store, jobs)["d"] == "waiting"
    # the last one ends through a round (complete_and_claim): it releases d in that statement
    done, claimed = store.complete_and_claim(W, [(jobs["c"], got[jobs["c"]], None)], ["default"], 5, TTL)
    assert done == {jobs["c"]}
    assert states(store, jobs)["d"] in ("queued", "running")
    if not claimed:  # the round's claim ran before the release in its statement: the next one takes it
        claimed = store.claim(W, ["default"], 5, TTL)
    assert [c.id for c in claimed] == [jobs["d"]]


def test_fan_in_waits_for_every_upstream(store: Store, direct: Store) -> None:
    parts = {f"p{i}": [] for i in range(6)}
    jobs = enqueue(store, {**parts, "join": list(parts)})
    got = claim(store)
    assert set(got) == {jobs[p] for p in parts}
    for i, (job_id, attempt) in enumerate(got.items()):
        assert states(store, jobs)["join"] == "waiting", i
        store.complete(W, [(job_id, attempt, None)])
    assert states(store, jobs)["join"] == "queued"


def test_a_dead_upstream_cancels_its_dependents_transitively(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"], "c": ["b"], "side": []}, max_attempts=1)
    (a_attempt,) = [att for i, att in claim(store).items() if i == jobs["a"]]
    assert store.fail(W, jobs["a"], a_attempt, outcome=Outcome.FAILED, error="boom") is JobState.DEAD
    assert states(store, jobs) == {"a": "dead", "b": "cancelled", "c": "cancelled", "side": "running"}
    for step in ("b", "c"):
        job = get(store, jobs[step])
        assert job.last_error == f"upstream job {jobs['a']} ended dead" and job.finished_at is not None


def test_on_failure_run_runs_once_every_dependency_ended(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"ok": [], "bad": [], "after_bad": ["bad"], "report": ["ok", "after_bad"]},
                   run=["report"], max_attempts=1)
    got = claim(store)
    assert store.fail(W, jobs["bad"], got[jobs["bad"]], outcome=Outcome.FAILED, error="x") is JobState.DEAD
    # after_bad is cut (policy cancel); report counts it as ended, failed, and still waits for ok
    assert states(store, jobs) == {"ok": "running", "bad": "dead", "after_bad": "cancelled", "report": "waiting"}
    store.complete(W, [(jobs["ok"], got[jobs["ok"]], None)])
    assert states(store, jobs)["report"] == "queued"


def test_retry_of_a_dead_upstream_puts_what_it_cancelled_back_to_waiting(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"], "c": ["b"], "r": ["a"]}, run=["r"], max_attempts=1)
    got = claim(store)
    store.fail(W, jobs["a"], got[jobs["a"]], outcome=Outcome.FAILED, error="boom")
    assert states(store, jobs) == {"a": "dead", "b": "cancelled", "c": "cancelled", "r": "queued"}
    store.retry(jobs["a"])
    assert states(store, jobs) == {"a": "queued", "b": "waiting", "c": "waiting", "r": "queued"}
    got = claim(store)
    assert set(got) == {jobs["a"], jobs["r"]}
    store.complete(W, [(jobs["a"], got[jobs["a"]], None)])
    succeed(store, jobs, "b")
    succeed(store, jobs, "c")


def test_cancelling_a_waiting_step_cancels_what_waits_for_it(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"], "c": ["b"]})
    assert store.cancel(jobs["b"]) is JobState.CANCELLED
    assert states(store, jobs) == {"a": "queued", "b": "cancelled", "c": "cancelled"}
    assert get(store, jobs["c"]).last_error == f"upstream job {jobs['b']} ended cancelled"


def test_the_reaper_releases_the_dependents_of_a_job_whose_worker_died(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"]}, max_attempts=1)
    claim(store)
    [r] = store.reap(10, now=store.db_now() + sec(TTL + 1))  # its lease lapsed: its last attempt
    assert (r.id, r.state) == (jobs["a"], JobState.DEAD)
    assert states(store, jobs) == {"a": "dead", "b": "cancelled"}


def test_a_zombies_late_completion_releases_nothing(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"]})
    first = claim(store)[jobs["a"]]
    [r] = store.reap(10, now=store.db_now() + sec(TTL + 1))  # lapsed, budget left: queued again
    assert r.state is JobState.QUEUED
    second = claim(store, W2)[jobs["a"]]
    assert second == first + 1
    assert store.complete(W, [(jobs["a"], first, None)]) == set()  # the zombie's report: fenced out
    assert states(store, jobs) == {"a": "running", "b": "waiting"}
    assert store.complete(W2, [(jobs["a"], second, None)]) == {jobs["a"]}
    assert states(store, jobs) == {"a": "succeeded", "b": "queued"}


# -- the app's API (a store of its own: SQLite and PostgreSQL) ---------------------------------


def _tasks(flows_app: Tether) -> tuple[Callable[..., object], ...]:
    @flows_app.task(name="fetch")
    def fetch(ctx: JobContext, url: str) -> dict[str, str]:
        return {"body": url}

    @flows_app.task(name="parse")
    def parse(ctx: JobContext) -> dict[str, object]:
        return {"up": ctx.upstream, "states": ctx.upstream_states, "wf": ctx.workflow_id}

    @flows_app.task(name="boom", max_attempts=1)
    def boom(ctx: JobContext) -> None:
        raise RuntimeError("boom")

    return fetch, parse, boom


def test_a_workflow_runs_with_its_upstream_results(flows_app: Tether) -> None:
    fetch, parse, boom = _tasks(flows_app)
    wf = flows_app.workflow("import-42")
    a = wf.add(fetch.spec(url="u"))  # type: ignore[attr-defined]
    b = wf.add(parse.spec(), after=[a])  # type: ignore[attr-defined]
    x = wf.add(boom.spec(), after=[a])  # type: ignore[attr-defined]
    wf.add(parse.spec(), after=[b, x], name="report", on_failure="run")  # type: ignore[attr-defined]
    run = wf.enqueue()
    assert list(run.jobs) == ["fetch", "parse", "boom", "report"]
    flows_app.drain()
    report = get(flows_app.store, run.jobs["report"])
    assert report.state is JobState.SUCCEEDED
    assert report.result == {"up": {"parse": {"up": {"fetch": {"body": "u"}}, "states": {"fetch": "succeeded"},
                                              "wf": run.id}, "boom": None},
                             "states": {"parse": "succeeded", "boom": "dead"}, "wf": run.id}
    info = flows_app.get_workflow(run.id)
    assert info is not None and info.finished and info.name == "import-42"
    assert info.edges == [("fetch", "parse"), ("fetch", "boom"), ("parse", "report"), ("boom", "report")]
    assert flows_app.get_workflow(run.id + 1000) is None


def test_chain_and_enqueue_async(flows_app: Tether) -> None:
    fetch, parse, _ = _tasks(flows_app)
    run = flows_app.chain(fetch.spec(url="v"), parse.spec(), parse.spec())  # type: ignore[attr-defined]
    assert list(run.jobs) == ["fetch", "parse", "parse-2"]
    assert states(flows_app.store, run.jobs) == {"fetch": "queued", "parse": "waiting", "parse-2": "waiting"}
    wf = flows_app.workflow("async")
    wf.add(parse.using(queue="other").spec(), name="p")  # type: ignore[attr-defined]
    other = asyncio.run(wf.enqueue_async())
    assert get(flows_app.store, other.jobs["p"]).queue == "other"
    flows_app.drain()
    assert set(states(flows_app.store, run.jobs).values()) == {"succeeded"}


def _count_jobs(flows_app: Tether) -> int:
    return sum(flows_app.store.stats().counts.values())


def test_bad_workflows_get_a_clear_error_and_write_nothing(flows_app: Tether, db_url: str) -> None:
    fetch, parse, _ = _tasks(flows_app)
    other = Tether(db_url)

    @other.task(name="stranger")
    def stranger(ctx: JobContext) -> None: ...

    wf = flows_app.workflow("bad")
    a = wf.add(fetch.spec(url="u"))  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="a step named 'fetch' exists already"):
        wf.add(fetch.spec(url="w"))  # type: ignore[attr-defined]
    with pytest.raises(UnknownTask, match="'stranger' of this spec is not registered on this app"):
        wf.add(stranger.spec())
    with pytest.raises(ConfigError, match="on_failure must be 'cancel' or 'run'"):
        wf.add(parse.spec(), after=[a], on_failure="ignore")  # type: ignore[attr-defined]
    elsewhere = flows_app.workflow("elsewhere")
    with pytest.raises(ConfigError, match="after= names step 'fetch' of another workflow"):
        elsewhere.add(parse.spec(), after=[a])  # type: ignore[attr-defined]
    # a cycle (by name, the only way to name a later step)
    wf.add(parse.spec(), after=["report"], name="p1")  # type: ignore[attr-defined]
    wf.add(parse.spec(), after=["p1"], name="report")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"has a cycle: steps 'p1', 'report' wait for each other"):
        wf.enqueue()
    with pytest.raises(ConfigError, match="has no steps"):
        flows_app.workflow("empty").enqueue()
    with pytest.raises(ConfigError, match="cannot have a dedup_key"):
        flows_app.workflow("d").add(fetch.using(dedup_key="k").spec(url="u"))  # type: ignore[attr-defined]
    assert _count_jobs(flows_app) == 0
    other.close()


def test_connection_joins_the_callers_transaction(flows_app: Tether, backend: str, db_url: str) -> None:
    fetch, parse, _ = _tasks(flows_app)
    dsn = parse_database_url(db_url)

    def build() -> object:
        wf = flows_app.workflow("tx")
        wf.add(parse.spec(), after=[wf.add(fetch.spec(url="u"))])  # type: ignore[attr-defined]
        return wf

    if backend == "sqlite":
        conn = sqlite3.connect(dsn.url)
        build().enqueue(connection=conn)  # type: ignore[attr-defined]
        conn.rollback()
        assert _count_jobs(flows_app) == 0
        run = build().enqueue(connection=conn)  # type: ignore[attr-defined]
        conn.commit()
        conn.close()
    else:
        with psycopg.connect(dsn.url) as pg:
            build().enqueue(connection=pg)  # type: ignore[attr-defined]
            pg.rollback()
            assert _count_jobs(flows_app) == 0
            run = build().enqueue(connection=pg)  # type: ignore[attr-defined]
            pg.commit()
    assert states(flows_app.store, run.jobs) == {"fetch": "queued", "parse": "waiting"}


def test_retention_keeps_a_run_until_every_step_ended(store: Store, direct: Store) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"]})
    succeed(store, jobs, "a")
    later = store.db_now() + sec(3600)
    assert store.prunable({JobState.SUCCEEDED: 60}, now=later) == {JobState.SUCCEEDED: 0}
    assert store.prune({JobState.SUCCEEDED: 60}, 100, now=later) == {}
    assert states(store, jobs) == {"a": "succeeded", "b": "queued"}  # b still reads a's result
    succeed(store, jobs, "b")
    later = store.db_now() + sec(3600)
    assert store.prune({JobState.SUCCEEDED: 60}, 100, now=later) == {JobState.SUCCEEDED: 2}
    assert store.get_job(jobs["a"]) is None


def test_upstreams_ending_at_once_release_their_join_exactly_once(store: Store, direct: Store) -> None:
    """The endings of a join's upstreams on concurrent connections: each decrements
    the join's count under its row lock, so exactly one of them sees it reach
    zero (read apart, each could see the others as still running)."""
    for _ in range(3):
        parts = {f"p{i}": [] for i in range(8)}
        jobs = enqueue(store, {**parts, "join": list(parts)})
        held = [(f"w{i}", c.id, c.attempt) for i in range(8) for c in store.claim(f"w{i}", ["default"], 1, TTL)]
        assert len(held) == 8
        barrier = threading.Barrier(8)

        def finish(held: tuple[str, int, int], barrier: threading.Barrier = barrier) -> set[int]:
            worker, job_id, attempt = held
            barrier.wait()
            return store.complete(worker, [(job_id, attempt, None)])

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(finish, held))
        assert states(store, jobs)["join"] == "queued"
        (c,) = store.claim(W, ["default"], 5, TTL)
        assert c.id == jobs["join"]
        store.complete(W, [(c.id, c.attempt, None)])


def test_the_cli_shows_a_run_and_lists_waiting_jobs(flows_app: Tether, db_url: str) -> None:
    from click.testing import CliRunner

    from tether.cli.main import cli

    fetch, parse, _ = _tasks(flows_app)
    run = flows_app.chain(fetch.spec(url="u"), parse.spec(), name="cli-run")  # type: ignore[attr-defined]
    runner = CliRunner()
    shown = runner.invoke(cli, ["-d", db_url, "workflow", str(run.id), "--json"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    got = json.loads(shown.output)
    assert got["name"] == "cli-run" and not got["finished"]
    assert [(s["name"], s["state"], s["after"]) for s in got["steps"]] == [
        ("fetch", "queued", []), ("parse", "waiting", ["fetch"])]
    table = runner.invoke(cli, ["-d", db_url, "workflow", str(run.id)], catch_exceptions=False)
    assert "parse" in table.output and "waiting" in table.output
    listed = runner.invoke(cli, ["-d", db_url, "jobs", "--state", "waiting"], catch_exceptions=False)
    assert listed.exit_code == 0 and str(run.jobs["parse"]) in listed.output
    missing = runner.invoke(cli, ["-d", db_url, "workflow", str(run.id + 99)])
    assert missing.exit_code != 0 and f"no workflow run {run.id + 99}" in missing.output


def test_the_docs_example_runs(flows_app: Tether, db_url: str, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """docs/examples/workflows/example.py, on this backend (registered in test_docs_examples.EXECUTED)."""
    import runpy
    from pathlib import Path

    monkeypatch.setenv("TETHER_DATABASE_URL", db_url)
    path = Path(__file__).resolve().parent.parent / "docs" / "examples" / "workflows" / "example.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "parse-checked cancelled after ['check']" in out
    assert "cancelled upstream job" in out and "ended dead" in out
    assert "'check': 'dead'" in out and "'parse': 'succeeded'" in out  # report's ctx.upstream_states


def test_the_sqlite_upgrade_rebuilds_jobs_keeping_rows_indexes_and_ids(tmp_path: Path) -> None:
    """Migration 0010 rebuilds tether_jobs (SQLite cannot change a CHECK in place):
    the rows stay, the indexes and trigger come back, and an id that was
    handed out before (even if deleted since) is never handed out again."""
    from tether.model import NewJob
    from tether.store.sqlfile import load_migrations
    from tether.store.sqlite.schema import _split

    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE tether_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL)")
    for version, name, sql in load_migrations("tether.store.sqlite.migrations", {})[:9]:
        for statement in _split(sql):
            old.execute(statement)
        old.execute("INSERT INTO tether_migrations VALUES (?, ?, 0)", (version, name))
    indexes = {r[0] for r in old.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'tether_jobs'")}
    for _ in range(5):
        old.execute("INSERT INTO tether_jobs (queue, task, args, run_at, max_attempts, created_at) "
                    "VALUES ('default', 't', '{}', 0, 3, 0)")
    old.execute("DELETE FROM tether_jobs WHERE id = 5")
    old.close()
    store = open_store(f"sqlite:///{path}")
    try:
        assert store.migrate()[0] == "0010_workflows"  # (and the migrations after it)
        assert store.enqueue([NewJob(task="t", args_json="{}")]) == [6]
        assert len(store.list_jobs()) == 5
        with closing(sqlite3.connect(path)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'tether_jobs'")} \
                >= indexes  # every one kept (later migrations add their own)
    finally:
        store.close()


# -- the endings added beside workflows (bulk cancel, expiry) and bulk retry ---------------------


def _with_upstream(direct: Store, first: NewJob) -> dict[str, int]:
    """a (as given), b waiting for it (policy cancel), r waiting for it (policy run)."""
    names = ["a", "b", "r"]
    flow = NewWorkflow("test", [first, new_job(args={"step": "b"}), new_job(args={"step": "r"})], names,
                       [[], [0], [0]], ["cancel", "cancel", "run"])
    _, ids = direct.enqueue_workflow(flow)
    return dict(zip(names, ids, strict=True))


def test_a_bulk_cancel_releases_what_waits_for_the_jobs_it_ends(store: Store, direct: Store) -> None:
    """cancel_many is an ending: its statement cuts the cancel-policy step and
    releases the run-policy one, as a single cancel does (SQLite's bulk cancel
    lacked the dependents flag: they stayed waiting for ever)."""
    jobs = _with_upstream(direct, new_job(args={"step": "a"}))
    count, _ = store.cancel_batch(JobFilter.of({"ids": [jobs["a"]]}), after_id=0, limit=10)
    assert count == 1
    assert states(store, jobs) == {"a": "cancelled", "b": "cancelled", "r": "queued"}


def test_an_expired_upstream_releases_what_waits_for_it(store: Store, direct: Store) -> None:
    """The expiry sweep is an ending too (SQLite's lacked the dependents flag)."""
    jobs = _with_upstream(direct, new_job(args={"step": "a"}, expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    assert [b.id for b in direct.expire("sweeper", limit=10)] == [jobs["a"]]
    assert states(store, jobs) == {"a": "cancelled", "b": "cancelled", "r": "queued"}


def test_a_bulk_retry_of_a_dead_upstream_puts_what_it_cancelled_back_to_waiting(store: Store, direct: Store) -> None:
    """retry_many reopens as retry does (it left the cut steps cancelled)."""
    jobs = _with_upstream(direct, new_job(args={"step": "a"}, max_attempts=1))
    got = claim(store)
    store.fail(W, jobs["a"], got[jobs["a"]], outcome=Outcome.FAILED, error="boom")
    assert states(store, jobs) == {"a": "dead", "b": "cancelled", "r": "queued"}
    retried, _ = store.retry_batch(JobFilter.of({"ids": [jobs["a"]]}), after_id=0, limit=10)
    assert [i for i, _ in retried] == [jobs["a"]]
    assert states(store, jobs) == {"a": "queued", "b": "waiting", "r": "queued"}


def test_a_remote_app_enqueues_workflows_and_batches_through_the_server(
        backend: str, db_url: str, direct: Store) -> None:
    """wf.enqueue(), enqueue_async() and app.batch() on an app whose URL is a
    tether server's (POST /v1/workflows, /v1/batches), and a remote worker
    running them; bad input is refused by the server with nothing written."""
    if not backend.startswith("http-"):
        pytest.skip("the app's own store is direct here: test_a_workflow_runs_with_its_upstream_results")
    from tether import PayloadError

    from .conftest import TEST_TOKEN, served
    with served(db_url) as url:
        app = Tether(url, token=TEST_TOKEN)
        finished: list[tuple[str, int | None]] = []
        app.on("workflow.finished")(lambda e: finished.append((e.name, e.workflow_id)))
        app.on("batch.finished")(lambda e: finished.append((e.name, e.batch_id)))
        fetch, parse, _ = _tasks(app)
        run = app.chain(fetch.spec(url="r"), parse.spec(), parse.spec())  # type: ignore[attr-defined]
        wf = app.workflow("async")
        wf.add(parse.spec(), name="p")  # type: ignore[attr-defined]
        other = asyncio.run(wf.enqueue_async())
        with app.batch(on_complete=parse.spec()) as batch:  # type: ignore[attr-defined]
            batch.add_many(fetch, [{"url": f"u{i}"} for i in range(3)])
        assert states(direct, run.jobs) == {"fetch": "queued", "parse": "waiting", "parse-2": "waiting"}
        before = sum(direct.stats().counts.values())
        bad = NewWorkflow("bad", [new_job(), new_job()], ["a", "b"], [[1], []], ["cancel", "cancel"])
        with pytest.raises(PayloadError, match="not an earlier step"):
            app.store.enqueue_workflow(bad)
        dup = NewWorkflow("dup", [new_job(), new_job()], ["a", "a"], [[], []], ["cancel", "cancel"])
        with pytest.raises(PayloadError, match="duplicate step name"):
            app.store.enqueue_workflow(dup)
        with pytest.raises(ConfigError, match="connection= needs a direct database URL"):
            app.store.enqueue_workflow(bad, conn=object())
        assert sum(direct.stats().counts.values()) == before
        app.drain()
        assert set(states(direct, {**run.jobs, **other.jobs}).values()) == {"succeeded"}
        info = direct.get_batch(batch.id)
        assert info is not None and info.finished and get(direct, batch.callbacks["on_complete"]).state.terminal
        # the server's answers to this remote worker's reports said so: each once
        assert sorted(finished) == [("batch.finished", batch.id), ("workflow.finished", run.id),
                                    ("workflow.finished", other.id)]
        app.close()
