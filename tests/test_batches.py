"""Batches (issue 42; I9): callbacks released exactly once, by the ending of
the last member, whatever ended it. Conformance on every store (SQLite,
PostgreSQL, through PgBouncer, and both through a tether server, whose remote
workers end the members; the batch itself is enqueued on the database)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tether import ConfigError, InvalidTransition, JobContext, JobState, Outcome, Tether, UnknownTask
from tether.store import Store
from tether.store.flows import NewBatch

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import TTL, W, get, new_job, sec

W2 = "worker-2"


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def enqueue(direct: Store, n: int, *, max_attempts: int = 3) -> tuple[int, list[int], int, int]:
    """A batch of ``n`` members with both callbacks: (id, members, on_complete, on_success)."""
    batch = NewBatch([new_job(args={"i": i}, max_attempts=max_attempts) for i in range(n)],
                     new_job("done"), new_job("ok"))
    batch_id, members, (on_complete, on_success) = direct.enqueue_batch(batch)
    return batch_id, members, on_complete, on_success


def state(store: Store, job_id: int) -> str:
    return str(get(store, job_id).state)


def claim_all(store: Store, worker: str = W) -> dict[int, int]:
    return {c.id: c.attempt for c in store.claim(worker, ["default"], 100, TTL)}


def test_the_callbacks_wait_for_the_last_member_and_fire_once(store: Store, direct: Store) -> None:
    batch_id, members, done, ok = enqueue(store, 20)
    assert (state(store, done), state(store, ok)) == ("waiting", "waiting")
    got = claim_all(store)
    assert set(got) == set(members)  # the callbacks are not claimable
    last = members[-1]
    assert store.complete(W, [(i, a, None) for i, a in got.items() if i != last]) == set(members) - {last}
    info = direct.get_batch(batch_id)
    assert info is not None and not info.finished and info.counts == {JobState.SUCCEEDED: 19, JobState.RUNNING: 1}
    assert (state(store, done), state(store, ok)) == ("waiting", "waiting")
    store.complete(W, [(last, got[last], None)])
    assert (state(store, done), state(store, ok)) == ("queued", "queued")
    info = direct.get_batch(batch_id)
    assert info is not None and info.finished and (info.on_complete, info.on_success) == (done, ok)
    assert info.counts == {JobState.SUCCEEDED: 20} and info.total == 20
    assert direct.job_batch(members[0]) == batch_id and direct.job_batch(done) is None


def test_a_failed_member_fires_on_complete_and_cancels_on_success(store: Store, direct: Store) -> None:
    batch_id, members, done, ok = enqueue(store, 3, max_attempts=1)
    got = claim_all(store)
    assert store.fail(W, members[0], got[members[0]], outcome=Outcome.FAILED, error="x") is JobState.DEAD
    assert store.cancel(members[1]) is JobState.RUNNING  # a request; its worker then ends it cancelled
    assert store.fail(W, members[1], got[members[1]], outcome=Outcome.CANCELLED, error="c") is JobState.CANCELLED
    assert state(store, done) == "waiting"
    store.complete(W, [(members[2], got[members[2]], None)])
    assert state(store, done) == "queued"
    assert state(store, ok) == "cancelled"
    assert get(store, ok).last_error == f"batch {batch_id}: 2 member(s) did not succeed"


def test_members_ending_at_once_fire_the_callbacks_exactly_once(store: Store, direct: Store) -> None:
    batch_id, members, done, ok = enqueue(store, 40)
    held = [(f"w{i}", c.id, c.attempt) for i in range(8) for c in store.claim(f"w{i}", ["default"], 5, TTL)]
    assert len(held) == 40
    barrier = threading.Barrier(8)

    def finish(worker: str) -> set[int]:
        mine = [(i, a, None) for w, i, a in held if w == worker]
        barrier.wait()
        out: set[int] = set()
        for one in mine:  # one statement each: forty endings racing over the shards
            out |= store.complete(worker, [one])
        return out

    with ThreadPoolExecutor(8) as pool:
        assert set().union(*pool.map(finish, [f"w{i}" for i in range(8)])) == set(members)
    assert (state(store, done), state(store, ok)) == ("queued", "queued")
    assert sorted(c.id for c in store.claim(W, ["default"], 10, TTL)) == [done, ok]
    info = direct.get_batch(batch_id)
    assert info is not None and info.finished


def test_members_added_by_a_running_member_count(store: Store, direct: Store) -> None:
    batch_id, members, done, _ = enqueue(store, 2)
    got = claim_all(store)
    (added,) = direct.batch_add(members[0], [new_job(args={"child": 1})])
    assert direct.job_batch(added) == batch_id
    store.complete(W, [(i, a, None) for i, a in got.items()])
    assert state(store, done) == "waiting"  # the added member has not ended
    (child,) = claim_all(store).items()
    store.complete(W, [(child[0], child[1], None)])
    assert state(store, done) == "queued"
    with pytest.raises(InvalidTransition, match=f"batch {batch_id} may have completed already"):
        direct.batch_add(members[0], [new_job()])
    with pytest.raises(InvalidTransition, match="is no member of a batch"):
        direct.batch_add(done, [new_job()])


def test_the_reaper_ends_a_member_whose_worker_died(store: Store, direct: Store) -> None:
    _, members, done, ok = enqueue(store, 2, max_attempts=1)
    got = claim_all(store)
    store.complete(W, [(members[0], got[members[0]], None)])
    [r] = store.reap(10, now=store.db_now() + sec(TTL + 1))
    assert (r.id, r.state) == (members[1], JobState.DEAD)
    assert (state(store, done), state(store, ok)) == ("queued", "cancelled")


def test_a_zombies_late_completion_counts_nothing(store: Store, direct: Store) -> None:
    _, (member,), done, _ = enqueue(store, 1)
    first = claim_all(store)[member]
    [r] = store.reap(10, now=store.db_now() + sec(TTL + 1))
    assert r.state is JobState.QUEUED
    second = claim_all(store, W2)[member]
    assert store.complete(W, [(member, first, None)]) == set()
    assert state(store, done) == "waiting"
    assert store.complete(W2, [(member, second, None)]) == {member}
    assert state(store, done) == "queued"


# -- the app's API -------------------------------------------------------------------------------


def test_a_batch_with_a_member_that_adds_members(flows_app: Tether, db_url: str) -> None:
    @flows_app.task(name="resize", max_attempts=1)
    def resize(ctx: JobContext, path: str) -> dict[str, object]:
        if path == "bad":
            raise RuntimeError("bad")
        if path == "spawn":
            ctx.batch.add(resize.spec(path="child"))
        return {"path": path, "batch": ctx.batch_id}

    @flows_app.task(name="summarize")
    def summarize(ctx: JobContext, report_id: int) -> dict[str, object]:
        info = ctx.batch.info()  # a callback's view of its batch
        return {"report": report_id, "batch": ctx.batch.id, "counts": {str(s): n for s, n in info.counts.items()}}

    @flows_app.task(name="notify")
    def notify(ctx: JobContext) -> str:
        return "sent"

    with flows_app.batch(on_complete=summarize.spec(report_id=7), on_success=notify.spec()) as batch:
        batch.add(resize.spec(path="spawn"))
        batch.add_many(resize, [{"path": f"p{i}"} for i in range(5)])
    assert len(batch.jobs) == 6 and set(batch.callbacks) == {"on_complete", "on_success"}
    drained = flows_app.drain()
    assert [d.task for d in drained][-2:] == ["summarize", "notify"]
    info = flows_app.get_batch(batch.id)
    assert info is not None and info.finished and info.counts == {JobState.SUCCEEDED: 7}
    child = [d for d in drained if d.result == {"path": "child", "batch": batch.id}]
    assert len(child) == 1
    assert drained[-2].result == {"report": 7, "batch": batch.id, "counts": {"succeeded": 7}}

    with flows_app.batch(on_success=notify.spec()) as failing:
        failing.add_many(resize, [{"path": "bad"}, {"path": "fine"}])
    flows_app.drain()
    assert get(flows_app.store, failing.callbacks["on_success"]).state is JobState.CANCELLED

    with pytest.raises(ConfigError, match="an empty batch"), flows_app.batch(on_complete=notify.spec()):
        pass
    other = Tether(db_url)

    @other.task(name="stranger")
    def stranger(ctx: JobContext) -> None: ...

    with pytest.raises(UnknownTask, match="not registered on this app"), flows_app.batch() as b:
        b.add(stranger.spec())
    other.close()
    with pytest.raises(ConfigError, match="no id until"):
        _ = flows_app.batch().id


def test_the_docs_example_runs(flows_app: Tether, db_url: str, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """docs/examples/workflows/batch.py, on this backend (registered in test_docs_examples.EXECUTED)."""
    import runpy
    from pathlib import Path

    monkeypatch.setenv("TETHER_DATABASE_URL", db_url)
    runpy.run_path(str(Path(__file__).resolve().parent.parent / "docs" / "examples" / "workflows" / "batch.py"),
                   run_name="__main__")
    out = capsys.readouterr().out
    assert "True {'succeeded': 6}" in out
    assert "on_complete succeeded report 7 done" in out and "on_success succeeded every image resized" in out


def test_retention_keeps_the_members_of_an_unfinished_batch(store: Store, direct: Store) -> None:
    _, members, done, _ = enqueue(store, 2)
    got = claim_all(store)
    store.complete(W, [(members[0], got[members[0]], None)])
    later = store.db_now() + sec(3600)
    assert store.prune({JobState.SUCCEEDED: 60}, 100, now=later) == {}
    store.complete(W, [(members[1], got[members[1]], None)])
    later = store.db_now() + sec(3600)
    assert store.prune({JobState.SUCCEEDED: 60}, 100, now=later) == {JobState.SUCCEEDED: 2}
    assert state(store, done) == "queued"


def test_the_cli_shows_a_batch(flows_app: Tether, db_url: str) -> None:
    import json

    from click.testing import CliRunner

    from tether.cli.main import cli

    @flows_app.task(name="member")
    def member(ctx: JobContext) -> None: ...

    with flows_app.batch(on_complete=member.spec()) as batch:
        batch.add_many(member, [{}, {}])
    runner = CliRunner()
    shown = runner.invoke(cli, ["-d", db_url, "batch", str(batch.id), "--json"], catch_exceptions=False)
    got = json.loads(shown.output)
    assert (got["total"], got["counts"], got["finished"]) == (2, {"queued": 2}, False)
    assert got["on_complete"] == batch.callbacks["on_complete"] and got["on_success"] is None
    text = runner.invoke(cli, ["-d", db_url, "batch", str(batch.id)], catch_exceptions=False).output
    assert f"batch {batch.id}: 2 member(s): queued 2; not finished" in text
    missing = runner.invoke(cli, ["-d", db_url, "batch", str(batch.id + 9)])
    assert missing.exit_code != 0 and f"no batch {batch.id + 9}" in missing.output


def test_a_retried_member_counts_again_until_its_batch_has_finished(store: Store, direct: Store) -> None:
    _, members, done, ok = enqueue(store, 2, max_attempts=1)
    got = claim_all(store)
    store.fail(W, members[0], got[members[0]], outcome=Outcome.FAILED, error="x")
    store.retry(members[0])  # before the batch finished: it is pending (and not failed) again
    store.complete(W, [(members[1], got[members[1]], None)])
    assert state(store, done) == "waiting"
    (again,) = claim_all(store).items()
    store.complete(W, [(*again, None)])
    assert (state(store, done), state(store, ok)) == ("queued", "queued")


def test_a_member_retried_after_its_batch_finished_fires_nothing_again(store: Store, direct: Store) -> None:
    batch_id, (member,), done, ok = enqueue(store, 1, max_attempts=1)
    got = claim_all(store)
    store.fail(W, member, got[member], outcome=Outcome.FAILED, error="x")
    assert (state(store, done), state(store, ok)) == ("queued", "cancelled")
    store.retry(member)
    got = claim_all(store)
    assert set(got) == {member, done}
    store.complete(W, [(i, a, None) for i, a in got.items()])
    assert (state(store, done), state(store, ok)) == ("succeeded", "cancelled")
    info = direct.get_batch(batch_id)
    assert info is not None and info.finished and info.counts == {JobState.SUCCEEDED: 1}
