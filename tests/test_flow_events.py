"""workflow.finished and batch.finished (issue 42): the ending statement (on
SQLite, the ending's transaction) that finishes a run or a batch says so in
its answer, and the process that ran it, once it has committed, tells its
store's flow listeners (the app's emits the events and publishes what the
ending released). One statement finishes each: its count of open steps (or
its batch's pending shards) reaches zero under the row lock, so concurrent
endings of the last two steps make one event, never two, never zero.

On every direct store (SQLite, PostgreSQL, PostgreSQL through PgBouncer),
and through a tether server (the statement runs in the server, whose answer
to the remote worker's report names what it finished)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tether import ConfigError, JobContext, JobState, Outcome, Tether
from tether.events import Event
from tether.store import Store, open_store
from tether.store.flows import FlowsEnded, NewBatch

from .conftest import BACKENDS, HTTP_BACKENDS, PGBOUNCER, TEST_TOKEN, backend_param
from .test_conformance import TTL, W, new_job
from .test_nats import nats_app, nats_url, prefix  # noqa: F401 (fixtures)
from .test_processes import wait_for
from .test_worker import running, wait_job
from .test_workflows import enqueue, states, succeed


@pytest.fixture(params=[*BACKENDS, PGBOUNCER])
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture
def heard(store: Store) -> list[FlowsEnded]:
    said: list[FlowsEnded] = []
    store.add_flow_listener(said.append)
    return said


def finished_runs(heard: list[FlowsEnded]) -> list[int]:
    return [r for d in heard for r in d.workflows]


def race_the_last_two(store: Store, other: Store) -> None:
    """Each store claims one of the two queued steps; both complete at once
    (a barrier), on threads of their own."""
    (c1,) = store.claim(W, ["default"], 1, TTL)
    (c2,) = other.claim("worker-2", ["default"], 1, TTL)
    barrier = threading.Barrier(2)

    def finish(s: Store, worker: str, job_id: int, attempt: int) -> set[int]:
        barrier.wait()
        return s.complete(worker, [(job_id, attempt, None)])

    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(finish, store, W, c1.id, c1.attempt)
        two = pool.submit(finish, other, "worker-2", c2.id, c2.attempt)
        assert one.result() == {c1.id} and two.result() == {c2.id}


def test_the_ending_of_a_chains_last_step_finishes_the_run_once(store: Store, heard: list[FlowsEnded]) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"], "c": ["b"]})
    succeed(store, jobs, "a")
    assert heard == [FlowsEnded(released=((jobs["b"], "default"),))]  # b released by a's ending
    succeed(store, jobs, "b")
    assert finished_runs(heard) == []
    succeed(store, jobs, "c")  # c is depended on by nothing: its ending still counts on its run
    run = store.job_workflow(jobs["c"])
    assert heard[-1] == FlowsEnded(workflows=(run,)) and finished_runs(heard) == [run]


def test_a_failure_that_cancels_the_rest_finishes_the_run_and_a_retry_reopens_it(
        store: Store, heard: list[FlowsEnded]) -> None:
    jobs = enqueue(store, {"a": [], "b": ["a"], "c": ["b"]}, max_attempts=1)
    run = store.job_workflow(jobs["a"])
    (c,) = store.claim(W, ["default"], 5, TTL)
    store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="boom")
    assert states(store, jobs) == {"a": "dead", "b": "cancelled", "c": "cancelled"}
    assert finished_runs(heard) == [run]  # the fail statement ended the run with its cascade
    store.retry(jobs["a"])
    assert states(store, jobs) == {"a": "queued", "b": "waiting", "c": "waiting"}
    for name in "abc":
        succeed(store, jobs, name)
    assert finished_runs(heard) == [run, run]  # reopened by the retry, finished again


def test_cancelling_the_only_open_step_finishes_the_run(store: Store, heard: list[FlowsEnded]) -> None:
    jobs = enqueue(store, {"a": [], "b": []})
    store.cancel(jobs["a"])
    assert finished_runs(heard) == []
    store.cancel(jobs["b"])
    assert finished_runs(heard) == [store.job_workflow(jobs["b"])]


def test_the_last_members_ending_finishes_the_batch_once(store: Store, heard: list[FlowsEnded]) -> None:
    batch_id, members, (on_complete,) = store.enqueue_batch(
        NewBatch([new_job(args={"i": i}) for i in range(20)], on_complete=new_job(args={"cb": 1})))
    done = 0
    while done < len(members):
        got = store.claim(W, ["default"], 7, TTL)
        assert got
        store.complete(W, [(c.id, c.attempt, None) for c in got])
        done += len(got)
        assert [d.batches for d in heard if d.batches] == ([(batch_id,)] if done == len(members) else [])
    assert heard[-1] == FlowsEnded(batches=(batch_id,), released=((on_complete, "default"),))


def test_two_workers_racing_the_last_two_steps_finish_the_run_once(
        store: Store, heard: list[FlowsEnded], db_url: str) -> None:
    """Two stores (two workers, their own connections) end a run's last two
    steps at once, many times: each run is finished by exactly one of the two
    statements (each reads the other's step as still running until its commit;
    the count under the run's row lock is what lets exactly one see zero)."""
    other = open_store(db_url)
    heard2: list[FlowsEnded] = []
    other.add_flow_listener(heard2.append)
    try:
        runs = []
        for _ in range(25):
            jobs = enqueue(store, {"a": [], "b": [], "c": ["a"], "d": ["b"]})
            runs.append(store.job_workflow(jobs["a"]))
            succeed(store, jobs, "a", "b")  # c and d released: the run's last two steps
            race_the_last_two(store, other)
        ended = finished_runs(heard) + finished_runs(heard2)
        assert sorted(ended) == sorted(runs)  # each run once: never two, never zero
    finally:
        other.close()


# -- the app: events ------------------------------------------------------------------------

@pytest.fixture
def events_app(flows_app: Tether) -> Iterator[tuple[Tether, list[Event]]]:
    got: list[Event] = []
    flows_app.on("workflow.finished")(got.append)
    flows_app.on("batch.finished")(got.append)
    yield flows_app, got


def test_a_worker_emits_workflow_finished_and_batch_finished(events_app: tuple[Tether, list[Event]]) -> None:
    app, got = events_app

    @app.task
    def step(ctx: JobContext, n: int = 0) -> int:
        return n

    run = app.chain(step.spec(n=1), step.spec(n=2), step.spec(n=3))  # type: ignore[attr-defined]
    with app.batch(on_complete=step.spec()) as batch:  # type: ignore[attr-defined]
        for i in range(5):
            batch.add(step.spec(n=i))  # type: ignore[attr-defined]
    app.drain()
    assert sorted((e.name, e.workflow_id, e.batch_id) for e in got) == [
        ("batch.finished", None, batch.id), ("workflow.finished", run.id, None)]


def test_the_docs_example_runs(flows_app: Tether, db_url: str, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """docs/examples/workflows/events.py, on this backend (registered in test_docs_examples.EXECUTED)."""
    import runpy
    from pathlib import Path

    monkeypatch.setenv("TETHER_DATABASE_URL", db_url)
    runpy.run_path(str(Path(__file__).resolve().parent.parent / "docs" / "examples" / "workflows" / "events.py"),
                   run_name="__main__")
    out = capsys.readouterr().out.splitlines()
    run_id, batch_id = out[-1].split()[1:]
    assert sorted(out[:-1]) == [f"batch {batch_id} finished", f"run {run_id} finished"]


# -- NATS: what an ending releases is published after its commit ------------------------------

def test_steps_and_callbacks_released_by_an_ending_are_published_on_nats(
        make_app: Callable[..., Tether], nats_url: str, prefix: str) -> None:  # noqa: F811
    """A 3-step chain and a batch's callback on a NATS worker that never sweeps
    and never claims from the database after its start (sweep, fallback and
    grace an hour): every step after the first, and the callback, is released
    by an ending and reaches the worker only by the message published after
    that ending's commit (before this, only the sweep published them); so too
    a member that a member added with ctx.batch.add."""
    app = nats_app(make_app, nats_url, prefix, fallback_interval=3600, sweep_interval=3600, sweep_grace=3600)

    @app.task(name="step")
    def step(ctx: JobContext, n: int = 0) -> int:
        if n == -1:
            ctx.batch.add(step.spec(n=-2))  # type: ignore[attr-defined]
        return n

    with running(app) as w:
        wait_for(lambda: w.transport.healthy and w.counts["db_claims"], 10, "worker start")
        run = app.chain(step.spec(n=1), step.spec(n=2), step.spec(n=3))  # type: ignore[attr-defined]
        with app.batch(on_complete=step.spec(n=9)) as batch:  # type: ignore[attr-defined]
            batch.add_many(step, [{"n": i} for i in (-1, 1)])
        for job_id in [*run.jobs.values(), batch.callbacks["on_complete"]]:
            wait_job(app, job_id, lambda j: j.state is JobState.SUCCEEDED)
        info = app.get_batch(batch.id)
        assert info is not None and info.total == 3  # the added member ran before the callback was released
        assert w.counts["db_claims"] == 1  # the start's only: all 7 came by their messages
        assert w.counts["deliveries_claimed"] == 7


# -- ctx.batch.member_ids ---------------------------------------------------------------------

def test_a_batchs_member_ids_page_in_order(store: Store) -> None:
    batch_id, members, _ = store.enqueue_batch(NewBatch([new_job(args={"i": i}) for i in range(2500)],
                                                        on_complete=new_job()))
    (c,) = store.claim(W, ["default"], 1, TTL)
    added = store.batch_add(c.id, [new_job(args={"added": 1})])
    pages, after = [], 0
    while page := store.batch_members(batch_id, after=after, limit=1000):
        pages.append(page)
        after = page[-1]
    assert [len(p) for p in pages] == [1000, 1000, 501]
    assert [i for p in pages for i in p] == sorted(members + added)
    assert store.batch_members(batch_id + 1, after=0, limit=10) == []


def test_a_callbacks_ctx_batch_gives_its_member_ids(flows_app: Tether) -> None:
    seen: dict[str, object] = {}

    @flows_app.task
    def member(ctx: JobContext, i: int) -> int:
        if i == 0:
            ctx.batch.add(member.spec(i=99))  # type: ignore[attr-defined]
        return i

    @flows_app.task
    def callback(ctx: JobContext) -> None:
        seen["ids"] = list(ctx.batch.iter_member_ids(page=3))
        seen["page"] = ctx.batch.member_ids(limit=2)
        with pytest.raises(ConfigError, match="between 1 and 10000"):
            ctx.batch.member_ids(limit=10_001)

    with flows_app.batch(on_complete=callback.spec()) as batch:  # type: ignore[attr-defined]
        batch.add_many(member, [{"i": i} for i in range(7)])
    flows_app.drain()
    ids = seen["ids"]
    assert isinstance(ids, list) and len(ids) == 8 and ids == sorted(ids) and ids[:7] == batch.jobs
    assert seen["page"] == ids[:2]


def test_a_step_that_succeeds_in_its_own_transaction_finishes_its_run(
        events_app: tuple[Tether, list[Event]]) -> None:
    """ctx.transaction(): the success is written in the handler's transaction;
    once that commits, its ending's answer is told as any other's (sync and
    async handlers), so the run that its last step ends fires its event."""
    app, got = events_app

    @app.task
    def plain(ctx: JobContext) -> int:
        return 1

    @app.task
    def in_tx(ctx: JobContext) -> int:
        with ctx.transaction():
            pass
        return 2

    @app.task
    async def in_tx_async(ctx: JobContext) -> int:
        async with ctx.transaction():
            pass
        return 3

    runs = [app.chain(plain.spec(), t.spec()) for t in (in_tx, in_tx_async)]  # type: ignore[attr-defined]
    app.drain()
    assert sorted(e.workflow_id for e in got) == sorted(r.id for r in runs)


def test_the_chaos_check_waits_a_batchs_callbacks_for_the_members_a_member_added(store: Store, db_url: str) -> None:
    """I9 in tether chaos judges a batch's callbacks against every member the
    database has, ctx.batch.add's too (FlowLoad reads them a page at a time),
    not only those its enqueue named."""
    from tether.chaos.flows import FlowLoad

    load = FlowLoad(db_url, steps=3, seed=1)
    ids, due = load._batch(5, 0.0)(store)
    members = due
    added = store.batch_add(members[0], [new_job(args={"added": 1})])
    (complete, success) = load._batch_waiters(store)
    assert complete.after == success.after == tuple(sorted([*members, *added]))
    assert (complete.job_id, success.job_id) == tuple(ids[-2:])


def test_the_upgrade_counts_the_open_steps_of_runs_enqueued_before_it(backend: str, db_url: str) -> None:
    """Runs enqueued by the release before migration 0017 (PostgreSQL) / 0015
    (SQLite): the migration gives each step its edge to job 0 and each run its
    count of open steps, so a run halfway through finishes once, and one that
    had finished is never announced."""
    if backend.endswith("pgbouncer"):
        pytest.skip("the same PostgreSQL migration")
    store = open_store(db_url)
    try:
        full = store._migrations  # type: ignore[attr-defined]
        mine = next(i for i, (_, name, _sql) in enumerate(full) if name == "flows_finished")
        store._migrations = full[:mine]  # type: ignore[attr-defined]
        store.migrate()
        a, b, c, d = store.enqueue([new_job(args={"s": s}) for s in "abcd"])
        sqlite = backend == "sqlite"
        t = "tether_" if sqlite else f'"{store.schema}".'  # type: ignore[attr-defined]
        p = "?" if sqlite else "%s"
        old_style = [  # as the release before wrote a run: steps, edges, counts, 'waiting'
            (f"INSERT INTO {t}workflows (name, created_at) VALUES ('old', 0)" if sqlite
             else f"INSERT INTO {t}workflows (name) VALUES ('old')", ()),
            (f"INSERT INTO {t}workflows (name, created_at) VALUES ('done', 0)" if sqlite
             else f"INSERT INTO {t}workflows (name) VALUES ('done')", ()),
            *[(f"INSERT INTO {t}workflow_steps (job_id, workflow_id, name) VALUES ({p}, {p}, {p})", row)
              for row in [(a, 1, "a"), (b, 1, "b"), (c, 1, "c"), (d, 2, "d")]],
            *[(f"INSERT INTO {t}job_deps (upstream_id, job_id) VALUES ({p}, {p})", e) for e in [(a, b), (b, c)]],
            *[(f"INSERT INTO {t}job_waits (job_id, pending, on_failure) VALUES ({p}, 1, 'cancel')", (j,))
              for j in (b, c)],
            (f"UPDATE {t}jobs SET state = 'waiting' WHERE id IN ({p}, {p})", (b, c)),
            (f"UPDATE {t}jobs SET state = 'cancelled', finished_at = created_at WHERE id = {p}", (d,)),
        ]
        with (store._write() if sqlite else store.pool.connection()) as conn:  # type: ignore[attr-defined]
            for sql, params in old_style:
                conn.execute(sql, params)
        store._migrations = full  # type: ignore[attr-defined]
        assert "0015_flows_finished" in store.migrate() or not sqlite
        heard: list[FlowsEnded] = []
        store.add_flow_listener(heard.append)
        jobs = {"a": a, "b": b, "c": c}
        succeed(store, jobs, "a")
        succeed(store, jobs, "b")
        assert finished_runs(heard) == []
        succeed(store, jobs, "c")
        assert finished_runs(heard) == [1]
    finally:
        store.close()


# -- through a tether server: its answer says what the endings it ran finished -------------------

@pytest.mark.parametrize("backend", HTTP_BACKENDS, indirect=True)
def test_a_remote_worker_hears_the_runs_and_batches_its_reports_finished(
        store: Store, direct: Store, heard: list[FlowsEnded]) -> None:
    """The ending runs in the server; the answer to the report that ran it
    names the run or batch it finished (``flows``), so the remote worker's
    app emits the event, once, as on a direct store; two remote workers
    racing a run's last two steps: once, never twice, never zero."""
    jobs = enqueue(store, {"a": [], "b": ["a"]})
    succeed(store, jobs, "a")
    assert finished_runs(heard) == []
    succeed(store, jobs, "b")
    assert finished_runs(heard) == [direct.job_workflow(jobs["a"])]
    batch_id, _, _ = store.enqueue_batch(NewBatch([new_job() for _ in range(3)], on_complete=new_job()))
    got = store.claim(W, ["default"], 10, TTL)  # its 3 members
    store.fail(W, got[0].id, got[0].attempt, outcome=Outcome.FAILED, error="x", retry=False)
    store.complete(W, [(c.id, c.attempt, None) for c in got[1:]])
    assert [d.batches for d in heard if d.batches] == [(batch_id,)]
    (cb,) = store.claim(W, ["default"], 10, TTL)  # the callback it released
    store.complete(W, [(cb.id, cb.attempt, None)])
    other = open_store(store.url, token=TEST_TOKEN)  # type: ignore[attr-defined]
    heard2: list[FlowsEnded] = []
    other.add_flow_listener(heard2.append)
    try:
        runs = []
        for _ in range(10):
            jobs = enqueue(store, {"a": [], "b": []})
            runs.append(direct.job_workflow(jobs["a"]))
            race_the_last_two(store, other)
        assert sorted(finished_runs(heard)[1:] + finished_runs(heard2)) == sorted(runs)
    finally:
        other.close()


def test_a_server_whose_rounds_run_on_its_threads_still_answers_what_they_finished(tmp_path: Path) -> None:
    """A SQLite server with synchronous=full runs every worker round on a
    database thread (not inline on its loop): the request's context must go
    with the call, or the ending's news is lost on that thread."""
    from .conftest import served

    with served(f"sqlite:///{tmp_path / 'full.db'}?synchronous=full") as url:
        remote = open_store(url, token=TEST_TOKEN)
        heard: list[FlowsEnded] = []
        remote.add_flow_listener(heard.append)
        try:
            jobs = enqueue(remote, {"a": [], "b": ["a"]})
            succeed(remote, jobs, "a")
            succeed(remote, jobs, "b")
            assert finished_runs(heard) == [1]
        finally:
            remote.close()
