"""Acting on many jobs (issue 43) on every store (sqlite, postgresql,
pgbouncer, and both through ``tether server``): cancel_many, retry_many,
delete_many in batches, beside a running worker, and rerun; bad input
refused with nothing changed."""

from __future__ import annotations

import threading

import pytest

from tether import JobContext, JobState, Tether
from tether import many as many_module
from tether.errors import ConfigError, InvalidTransition, JobNotFound
from tether.events import Event

from .test_search import app_fixture, backend_fixture, ids  # noqa: F401  (the app and backend fixtures)
from .test_worker import running, wait_job


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 3, so that every walk here takes several statements."""
    monkeypatch.setattr(many_module, "BATCH", 3)


def states(app: Tether, job_ids: list[int]) -> list[JobState | None]:
    out = []
    for i in job_ids:
        job = app.get_job(i)
        out.append(None if job is None else job.state)
    return out


def noop_task(app: Tether) -> object:
    @app.task(name="work", max_attempts=1)
    def work(ctx: JobContext, n: int) -> int:
        if n < 0:
            raise RuntimeError("boom")
        return n

    return work


def test_cancel_many_cancels_queued_ones_and_asks_the_running_one_whose_handler_sees_it(app: Tether) -> None:
    started, seen = threading.Event(), threading.Event()

    @app.task(name="slow")
    def slow(ctx: JobContext) -> str:
        started.set()
        if ctx.wait_cancelled(20):
            seen.set()
            ctx.raise_if_cancelled()  # ends the job cancelled
        return "not cancelled"

    @app.task(name="other")
    def other(ctx: JobContext) -> None:
        return None

    run_id = slow.using(tags=["bad-deploy"]).enqueue()
    with running(app, concurrency=1):
        assert started.wait(10)
        queued = [slow.using(tags=["bad-deploy"]).enqueue() for _ in range(7)]
        spared = other.using(queue="elsewhere", tags=["bad-deploy"]).enqueue()
        progress: list[int] = []
        n = app.cancel_many(task="slow", tags=["bad-deploy"], progress=progress.append)
        assert n == 8 and sum(progress) == 8  # seven queued at once, the running one asked
        assert states(app, queued) == [JobState.CANCELLED] * 7
        assert seen.wait(10), "the running job's handler never saw the cancel"
        wait_job(app, run_id, lambda j: j.state is JobState.CANCELLED)
    assert states(app, [spared]) == [JobState.QUEUED]
    assert app.cancel_many(task="slow") == 0  # nothing left: not an error


def test_cancel_many_fires_job_cancelled_once_for_each_job_it_ended(app: Tether) -> None:
    work = noop_task(app)
    done = work.using(tags=["bad"]).enqueue(n=1)  # type: ignore[attr-defined]
    app.drain()  # succeeded: not cancelled, no event
    queued = {work.using(queue=f"q{n % 2}", tags=["bad"]).enqueue(n=n): f"q{n % 2}"  # type: ignore[attr-defined]
              for n in range(7)}
    spared = work.enqueue(n=99)  # type: ignore[attr-defined]
    seen: list[Event] = []
    app.on("job.cancelled")(seen.append)
    assert app.cancel_many(tags=["bad"]) == 7  # in batches of 3
    assert sorted((e.job_id, e.task, e.queue, e.state) for e in seen) == sorted(
        (i, "work", q, JobState.CANCELLED) for i, q in queued.items())
    assert states(app, [done, spared]) == [JobState.SUCCEEDED, JobState.QUEUED]
    assert app.cancel_many(tags=["bad"]) == 0 and len(seen) == 7  # nothing ended again: no event again


def test_retry_many_brings_dead_and_cancelled_back_and_leaves_the_rest(app: Tether) -> None:
    work = noop_task(app)
    dead = [work.enqueue(n=-1) for _ in range(4)]  # type: ignore[attr-defined]
    ok = work.enqueue(n=1)  # type: ignore[attr-defined]
    app.drain()
    cancelled = [work.enqueue(n=2) for _ in range(3)]  # type: ignore[attr-defined]
    for c in cancelled:
        app.cancel(c)
    queued = work.enqueue(n=3)  # type: ignore[attr-defined]
    assert app.retry_many(state="dead") == 4
    assert states(app, dead) == [JobState.QUEUED] * 4
    assert app.retry_many(task="work") == 3  # the cancelled ones; succeeded and queued are left
    assert states(app, [ok, queued, *cancelled]) == [JobState.SUCCEEDED, JobState.QUEUED, *[JobState.QUEUED] * 3]
    job = app.get_job(dead[0])
    assert job is not None and job.max_attempts >= job.attempts_used + 1  # an attempt left


def test_retry_many_leaves_a_job_whose_dedup_key_an_active_job_holds(app: Tether) -> None:
    work = noop_task(app)
    old = work.using(dedup_key="k").enqueue(n=1)  # type: ignore[attr-defined]
    app.cancel(old)
    holder = work.using(dedup_key="k").enqueue(n=2)  # type: ignore[attr-defined]
    assert holder != old
    assert app.retry_many(task="work", state="cancelled") == 0
    assert states(app, [old, holder]) == [JobState.CANCELLED, JobState.QUEUED]


def test_delete_many_deletes_finished_jobs_only_and_refuses_a_filter_that_matches_live_ones(app: Tether) -> None:
    work = noop_task(app)
    done = [work.enqueue(n=i) for i in range(5)]  # type: ignore[attr-defined]
    app.drain()
    live = work.enqueue(n=9)  # type: ignore[attr-defined]
    with pytest.raises(InvalidTransition, match="not finished"):
        app.delete_many(task="work")
    with pytest.raises(ConfigError, match="finished jobs only"):
        app.delete_many(state="queued")
    with pytest.raises(ConfigError, match="all=True"):
        app.delete_many()
    assert states(app, [*done, live]) == [JobState.SUCCEEDED] * 5 + [JobState.QUEUED]  # nothing changed
    assert app.delete_many(task="work", state="succeeded") == 5
    assert states(app, [*done, live]) == [None] * 5 + [JobState.QUEUED]
    assert app.delete_many(state="succeeded") == 0
    app.cancel(live)
    assert app.delete_many(all=True) == 1 and app.count_jobs() == 0


def test_bulk_beside_a_running_worker_never_deletes_a_running_job(app: Tether) -> None:
    gate = threading.Event()

    @app.task(name="hold")
    def hold(ctx: JobContext) -> None:
        gate.wait(20)

    @app.task(name="quick")
    def quick(ctx: JobContext, n: int) -> int:
        return n

    held = hold.using(tags=["t"]).enqueue()
    with running(app, concurrency=2):
        wait_job(app, held, lambda j: j.state is JobState.RUNNING)
        made = [quick.using(tags=["t"]).enqueue(n=i) for i in range(10)]
        for m in made:
            wait_job(app, m, lambda j: j.state is JobState.SUCCEEDED)
        with pytest.raises(InvalidTransition):
            app.delete_many(tags=["t"])
        assert app.delete_many(tags=["t"], state=["succeeded", "dead", "cancelled"]) == 10
        assert states(app, [held]) == [JobState.RUNNING]
        gate.set()
        wait_job(app, held, lambda j: j.state is JobState.SUCCEEDED)


def test_empty_filters_are_refused_unless_all(app: Tether) -> None:
    work = noop_task(app)
    job = work.enqueue(n=1)  # type: ignore[attr-defined]
    for action in (app.cancel_many, app.retry_many, app.delete_many):
        with pytest.raises(ConfigError, match="all=True"):
            action()
        with pytest.raises(ConfigError, match="unknown filter"):
            action(queue_name="x")
    assert states(app, [job]) == [JobState.QUEUED]
    assert app.cancel_many(all=True) == 1


def test_rerun_copies_a_finished_job_and_links_back(app: Tether) -> None:
    work = noop_task(app)
    first = work.using(meta={"customer": 42}, tags=["eu"], priority=5, queue="q2").enqueue(n=7)  # type: ignore[attr-defined]
    with pytest.raises(InvalidTransition, match="only a finished job"):
        app.rerun(first)
    app.drain(["q2"])
    again = app.rerun(first)
    old, new = app.get_job(first), app.get_job(again)
    assert old is not None and new is not None and new.id != old.id
    assert (new.task, new.args, new.queue, new.priority, new.meta, new.tags, new.max_attempts) == (
        old.task, old.args, old.queue, old.priority, old.meta, old.tags, old.max_attempts)
    assert new.state is JobState.QUEUED and new.rerun_of == first and old.rerun_of is None
    assert [d.result for d in app.drain(["q2"])] == [7]
    with pytest.raises(JobNotFound):
        app.rerun(10**9)
    assert ids(app.jobs(task="work")) == [again, first]
