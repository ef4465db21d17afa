"""An enqueue on PostgreSQL is several statements, each committed on its own
(the insert, then the lookup of the active jobs holding its dedup keys): when
a key's holder finishes between the two, only the jobs still without an id
are inserted again. Driven statement by statement against a real server
(``store._all``), with the holder finished in between by the store itself."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tether.model import NewJob
from tether.store import Store
from tether.store.postgres.steps import enqueue_steps

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def test_a_key_freed_between_insert_and_lookup_inserts_only_the_jobs_still_without_an_id(store: Store) -> None:
    (holder,) = store.enqueue([NewJob(task="t", args_json='{"n": 0}', dedup_key="k")])
    batch = [NewJob(task="t", args_json='{"n": 1}'), NewJob(task="t", args_json='{"n": 2}', dedup_key="k"),
             NewJob(task="t", args_json='{"n": 3}', dedup_key="other")]
    steps = enqueue_steps(batch, None)
    insert = next(steps)
    rows = store._all(*insert)  # type: ignore[attr-defined]
    assert len(rows) == 2  # n=1 and n=3 are in; n=2's key is held
    store.cancel(holder)  # the holder finishes before the lookup
    lookup = steps.send(rows)
    assert lookup[0] == "dedup_holders"
    again = steps.send(store._all(*lookup))  # type: ignore[attr-defined]
    try:
        steps.send(store._all(*again))  # type: ignore[attr-defined]
    except StopIteration as done:
        ids = done.value
    else:
        raise AssertionError("the retry took more than one insert")
    jobs = [store.get_job(i) for i in ids]
    assert [j.args["n"] for j in jobs if j is not None] == [1, 2, 3]
    assert len({*ids}) == 3 and holder not in ids
    every = store.list_jobs(task="t", limit=100)
    assert sorted(j.args["n"] for j in every) == [0, 1, 2, 3], "a job was inserted twice"


def test_a_window_that_passed_is_released_by_the_lookup_and_the_job_inserted_again(store: Store) -> None:
    """Issue 44: the holder ended inside its dedup window at the insert, and
    its window has passed at the lookup: the lookup releases it, answers
    nothing for its key, and the next try inserts that job alone."""
    t0 = store.db_now()
    (holder,) = store.enqueue([NewJob(task="t", args_json='{"n": 0}', dedup_key="w", dedup_for=60.0)], now=t0)
    store.cancel(holder, now=t0)
    steps = enqueue_steps([NewJob(task="t", args_json='{"n": 1}', dedup_key="w", dedup_for=60.0)],
                          t0 + timedelta(seconds=61))
    insert = next(steps)
    assert store._all(*insert) == []  # type: ignore[attr-defined]  # the window's index still holds the key
    lookup = steps.send([])
    assert lookup[0] == "dedup_holders" and store._all(*lookup) == []  # type: ignore[attr-defined]
    again = steps.send([])
    try:
        steps.send(store._all(*again))  # type: ignore[attr-defined]
    except StopIteration as done:
        (new,) = done.value
    else:
        raise AssertionError("the retry took more than one insert")
    assert new != holder and not new.duplicate
    released = store.get_job(holder)
    assert released is not None and released.dedup_for is None
