"""The conformance suite for job control (issue 20), on every backend (the
``store`` fixture as in test_conformance.py): retention (``prune``,
``prunable``) and the retry policies' outcomes (``fail`` with ``delay``,
``snoozed`` and ``discarded``). Nothing sleeps: clocks are moved with ``now=``."""

from __future__ import annotations

from datetime import datetime

import pytest

from tether.errors import ConfigError, StaleAttempt
from tether.model import JobState, Outcome
from tether.store import Store

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import TTL, W2, W, claim_one, close_to, enqueue_one, get, sec, start_job

DAY = 86400.0
FINISHED = {JobState.SUCCEEDED: 7 * DAY, JobState.DEAD: 30 * DAY, JobState.CANCELLED: 30 * DAY}


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def succeeded(store: Store, now: datetime) -> int:
    c = start_job(store, now)
    assert store.complete(W, [(c.id, c.attempt, None)], now=now) == {c.id}
    return c.id


def dead(store: Store, now: datetime) -> int:
    c = start_job(store, now)
    assert store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="boom", retry=False, now=now) is JobState.DEAD
    return c.id


def cancelled(store: Store, now: datetime) -> int:
    job_id = enqueue_one(store, now)
    assert store.cancel(job_id, now=now) is JobState.CANCELLED
    return job_id


# -- retention -------------------------------------------------------------------


def test_prune_deletes_finished_jobs_past_their_states_age_with_their_attempts(store: Store) -> None:
    t0 = store.db_now()
    old = {succeeded(store, t0): JobState.SUCCEEDED, dead(store, t0): JobState.DEAD,
           cancelled(store, t0): JobState.CANCELLED}
    young_dead = dead(store, t0 + sec(10 * DAY))  # 20 days old at the prune: kept (30 d)
    later = t0 + sec(30 * DAY + 1)
    assert store.prunable(FINISHED, now=later) == {JobState.SUCCEEDED: 1, JobState.DEAD: 1, JobState.CANCELLED: 1}
    assert store.prune(FINISHED, 100, now=later) == {JobState.SUCCEEDED: 1, JobState.DEAD: 1,
                                                     JobState.CANCELLED: 1}
    for job_id in old:
        assert store.get_job(job_id) is None
    assert get(store, young_dead).state is JobState.DEAD
    assert [a.attempt for a in get(store, young_dead).attempts] == [1]
    # the attempts rows went with their jobs: no attempt of a pruned job is left
    assert not {a.job_id for a in store.recent_attempts(list(Outcome), limit=1000)} & set(old)
    assert store.prune(FINISHED, 100, now=later) == {}
    assert store.prunable(FINISHED, now=later) == {JobState.SUCCEEDED: 0, JobState.DEAD: 0, JobState.CANCELLED: 0}


def test_prune_never_touches_queued_or_running_jobs_however_old(store: Store) -> None:
    t0 = store.db_now()
    queued = enqueue_one(store, t0, queue="other")
    running = start_job(store, t0)
    retried = dead(store, t0)
    store.retry(retried, now=t0)  # finished once, queued again: live
    far = t0 + sec(3650 * DAY)
    everything = {JobState.SUCCEEDED: 0.0, JobState.DEAD: 0.0, JobState.CANCELLED: 0.0}
    assert store.prune(everything, 1000, now=far) == {}
    assert get(store, queued).state is JobState.QUEUED
    assert get(store, running.id).state is JobState.RUNNING
    assert get(store, retried).state is JobState.QUEUED
    # and the running one still completes under its fence
    assert store.complete(W, [(running.id, running.attempt, None)], now=far) == {running.id}


def test_prune_takes_the_oldest_first_and_at_most_limit(store: Store) -> None:
    t0 = store.db_now()
    ids = [succeeded(store, t0 + sec(i)) for i in range(5)]
    later = t0 + sec(8 * DAY)
    assert store.prune(FINISHED, 2, now=later) == {JobState.SUCCEEDED: 2}
    assert [store.get_job(i) is None for i in ids] == [True, True, False, False, False]
    assert store.prune(FINISHED, 2, now=later) == {JobState.SUCCEEDED: 2}
    assert store.prune(FINISHED, 2, now=later) == {JobState.SUCCEEDED: 1}
    assert all(store.get_job(i) is None for i in ids)


def test_prune_orders_across_states_by_finish_time(store: Store) -> None:
    t0 = store.db_now()
    first = cancelled(store, t0)
    second = succeeded(store, t0 + sec(1))
    third = dead(store, t0 + sec(2))
    ages = {JobState.SUCCEEDED: 0.0, JobState.DEAD: 0.0, JobState.CANCELLED: 0.0}
    later = t0 + sec(60)
    assert store.prune(ages, 1, now=later) == {JobState.CANCELLED: 1}
    assert store.prune(ages, 1, now=later) == {JobState.SUCCEEDED: 1}
    assert store.prune(ages, 1, now=later) == {JobState.DEAD: 1}
    assert all(store.get_job(i) is None for i in (first, second, third))


def test_prune_only_the_states_asked_for(store: Store) -> None:
    t0 = store.db_now()
    s, d = succeeded(store, t0), dead(store, t0)
    later = t0 + sec(365 * DAY)
    assert store.prunable({JobState.DEAD: DAY}, now=later) == {JobState.DEAD: 1}
    assert store.prune({JobState.DEAD: DAY}, 10, now=later) == {JobState.DEAD: 1}
    assert get(store, s).state is JobState.SUCCEEDED and store.get_job(d) is None
    assert store.prune({}, 10, now=later) == {}


def test_a_job_pruned_while_a_stale_worker_reports_stays_gone(store: Store) -> None:
    t0 = store.db_now()
    job_id = succeeded(store, t0)
    store.prune(FINISHED, 10, now=t0 + sec(8 * DAY))
    assert store.complete(W, [(job_id, 1, None)], now=t0 + sec(8 * DAY)) == set()
    assert store.get_job(job_id) is None


@pytest.mark.parametrize("ages, limit, message", [
    ({JobState.QUEUED: 1.0}, 10, "only finished jobs"),
    ({JobState.RUNNING: 1.0}, 10, "only finished jobs"),
    ({JobState.SUCCEEDED: -1.0}, 10, ">= 0"),
    ({JobState.SUCCEEDED: float("inf")}, 10, "finite"),
    ({JobState.SUCCEEDED: 1.0}, 0, "limit"),
])
def test_prune_refuses_bad_arguments_with_a_clear_error(
    store: Store, ages: dict[JobState, float], limit: int, message: str,
) -> None:
    job_id = enqueue_one(store, store.db_now())
    with pytest.raises(ConfigError, match=message):
        store.prune(ages, limit)
    assert get(store, job_id).state is JobState.QUEUED


# -- retry policies: what fail records ---------------------------------------------------


def test_a_snooze_queues_the_job_later_without_spending_its_budget(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=1)
    assert store.fail(W, c.id, c.attempt, outcome=Outcome.SNOOZED, error="snoozed for 30s", delay=30,
                      now=t0) is JobState.QUEUED
    job = get(store, c.id)
    assert job.state is JobState.QUEUED and job.finished_at is None
    assert close_to(job.run_at, t0 + sec(30))
    assert job.last_error is None  # a snooze is no error
    assert [(a.attempt, a.outcome, a.error) for a in job.attempts] == [(1, Outcome.SNOOZED, "snoozed for 30s")]
    assert store.claim(W, ["default"], 1, TTL, now=t0 + sec(29)) == []
    again = claim_one(store, t0 + sec(31))
    assert again.attempt == 2
    # max_attempts=1 and two claims: the snooze did not count, so a failure now
    # is the job's first and last
    assert store.fail(W, c.id, 2, outcome=Outcome.FAILED, error="boom", now=t0 + sec(31)) is JobState.DEAD
    assert get(store, c.id).attempts_used == 1


def test_a_snooze_of_a_job_with_a_cancel_request_ends_it_cancelled(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    assert store.cancel(c.id, now=t0) is JobState.RUNNING
    assert store.fail(W, c.id, c.attempt, outcome=Outcome.SNOOZED, error="snoozed", delay=5,
                      now=t0) is JobState.CANCELLED


def test_a_discard_ends_the_job_dead_at_once_with_its_reason(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=5)
    assert store.fail(W, c.id, c.attempt, outcome=Outcome.DISCARDED, error="discarded: bad input", retry=False,
                      now=t0) is JobState.DEAD
    job = get(store, c.id)
    assert job.last_error == "discarded: bad input" and close_to(job.finished_at, t0)  # type: ignore[arg-type]
    assert [(a.outcome, a.error) for a in job.attempts] == [(Outcome.DISCARDED, "discarded: bad input")]


def test_fail_with_a_delay_retries_after_exactly_that_delay(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=3, backoff_base=1.0)
    assert store.fail(W, c.id, c.attempt, outcome=Outcome.FAILED, error="x", delay=123.5, now=t0) is JobState.QUEUED
    job = get(store, c.id)
    assert close_to(job.run_at, t0 + sec(123.5)) and job.attempts_used == 1
    # a delay changes nothing for a job whose budget is spent
    c2 = start_job(store, t0, queue="q2", max_attempts=1)
    assert store.fail(W, c2.id, 1, outcome=Outcome.FAILED, error="x", delay=5, now=t0) is JobState.DEAD


def test_a_stale_snooze_changes_nothing(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0)
    before = get(store, c.id)
    with pytest.raises(StaleAttempt):
        store.fail(W2, c.id, c.attempt, outcome=Outcome.SNOOZED, error="snoozed", delay=1, now=t0)
    assert get(store, c.id) == before


# -- pause and resume ----------------------------------------------------------------------


def test_no_claim_takes_a_paused_queues_jobs_until_it_is_resumed(store: Store) -> None:
    t0 = store.db_now()
    mail = enqueue_one(store, t0, queue="emails")
    other = enqueue_one(store, t0, queue="reports")
    assert store.paused_queues() == []
    store.set_paused("emails", True)
    store.set_paused("emails", True)  # twice: still one paused queue
    assert store.paused_queues() == ["emails"]
    got = store.claim(W, ["emails", "reports"], 10, TTL, now=t0)
    assert [c.id for c in got] == [other]
    assert store.claim(W, ["emails"], 10, TTL, now=t0) == []
    _, more = store.complete_and_claim(W, [(other, 1, None)], ["emails"], 10, TTL, now=t0)
    assert more == []
    assert store.claim_ids(W, [mail], ["emails"], TTL, now=t0) == []
    assert store.due_unclaimed(["emails"], grace=0, limit=10, now=t0 + sec(60)) == []
    store.set_paused("emails", False)
    assert store.paused_queues() == []
    assert [c.id for c in store.claim(W, ["emails"], 10, TTL, now=t0)] == [mail]


def test_a_running_job_on_a_paused_queue_still_finishes(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, queue="emails")
    store.set_paused("emails", True)
    assert store.heartbeat(W, [(c.id, c.attempt)], TTL, now=t0)[c.id].value == "renewed"
    assert store.complete(W, [(c.id, c.attempt, None)], now=t0) == {c.id}
    assert get(store, c.id).state is JobState.SUCCEEDED


def test_pausing_a_queue_is_refused_for_a_bad_name(store: Store) -> None:
    with pytest.raises(ConfigError, match="queue"):
        store.set_paused("no spaces allowed", True)
    assert store.paused_queues() == []
