"""The conformance suite for what a hostile worker could make grow (issue 41),
on every backend (the ``store`` fixture as in test_conformance.py):
identities that display as themselves (item 8); failures' text kept short, a
job's snoozes bounded and ``get_job``'s history the newest attempts (item 5);
workers' rows paged, counted and pruned (item 3). Nothing sleeps: clocks are
moved with ``now=``."""

from __future__ import annotations

import pytest

from tether import model
from tether.errors import ConfigError
from tether.model import MAX_ATTEMPTS_SHOWN, JobState, Outcome, WorkerInfo
from tether.payload import STORED_ERROR_CHARS, STORED_SNOOZE_CHARS, STORED_TRACEBACK_CHARS
from tether.store import Store

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import W, claim_one, get, sec, start_job


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def worker(wid: str, host: str = "host-a", queues: list[str] | None = None) -> WorkerInfo:
    return WorkerInfo(id=wid, host=host, pid=1, proc_start=None, started_at=None, last_seen=None,  # type: ignore[arg-type]
                      queues=queues or ["default"], concurrency=1)


LOOKALIKES = {
    "zero-width space": "worker\u200b-1",
    "zero-width joiner": "worker\u200d-1",
    "bidi override": "worker-\u202e1-",
    "bidi isolate": "worker-\u20661",
    "terminal escape": "worker-\x1b[2J1",
    "C1 CSI": "worker-\x9b1",
    "newline": "worker-\n1",
    "line separator": "worker-\u20281",
    "soft hyphen": "wor\u00adker-1",
    "BOM": "\ufeffworker-1",
    "full-width letter": "\uff57orker-1",
    "no-break space": "worker\u00a01",
    "Cyrillic o among Latin": "w\u043erker-1",
    "Greek omicron among Latin": "w\u03bfrker-1",
    "private use": "worker-\ue0001",
    "leading space": " worker-1",
    "empty": "",
    "too long": "w" * 201,
}


@pytest.mark.parametrize("wid", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_a_worker_id_that_would_display_as_another_is_refused(store: Store, wid: str) -> None:
    with pytest.raises(ConfigError):
        store.register_worker(worker(wid))
    assert store.list_workers() == []


@pytest.mark.parametrize("host", ["host\u200b-a", "host-\u202ea", "h\u043est", "host\x1b]0;x\x07", "\uff48ost"])
def test_a_worker_host_that_would_display_as_another_is_refused(store: Store, host: str) -> None:
    with pytest.raises(ConfigError):
        store.register_worker(worker("worker-1", host))
    assert store.list_workers() == []


def test_ordinary_identities_register(store: Store) -> None:
    for wid, host in [("web-1.example.com:4242:a1b2c3", "web-1.example.com"), ("работник-1", "хост"),
                      ("déjà vu 7", "hôte"), ("工作者-3", "主机")]:
        store.register_worker(worker(wid, host))
    assert len(store.list_workers()) == 4


# -- item 5: what one job may weigh -----------------------------------------------------


def test_a_failures_error_and_traceback_are_kept_cut(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=3)
    store.fail(W, c.id, 1, outcome=Outcome.FAILED, error="E" * 99_000, traceback="T" * 900_000, now=t0)
    (a,) = get(store, c.id).attempts
    assert a.error is not None and a.traceback is not None
    assert len(a.error) <= STORED_ERROR_CHARS and len(a.traceback) <= STORED_TRACEBACK_CHARS
    assert "characters cut" in a.error and a.error.startswith("EEE") and a.error.endswith("EEE")
    assert get(store, c.id).last_error == a.error
    c = claim_one(store, t0 + sec(3600))
    store.fail(W, c.id, c.attempt, outcome=Outcome.SNOOZED, error="S" * 99_000, traceback="T" * 9_000,
               now=t0 + sec(3600), delay=0)
    snoozed = get(store, c.id).attempts[-1]
    assert snoozed.outcome is Outcome.SNOOZED and snoozed.traceback is None
    assert snoozed.error is not None and len(snoozed.error) <= STORED_SNOOZE_CHARS


def test_get_job_returns_the_newest_attempts_and_counts_the_rest(store: Store) -> None:
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=2)
    n = MAX_ATTEMPTS_SHOWN + 7
    for i in range(n - 1):
        store.fail(W, c.id, c.attempt, outcome=Outcome.SNOOZED, error=f"snooze {i}", now=t0 + sec(i), delay=0)
        c = claim_one(store, t0 + sec(i))
    job = get(store, c.id)
    assert job.attempt == n and job.state is JobState.RUNNING
    assert len(job.attempts) == MAX_ATTEMPTS_SHOWN and job.older_attempts == n - MAX_ATTEMPTS_SHOWN
    assert [a.attempt for a in job.attempts] == list(range(n - MAX_ATTEMPTS_SHOWN + 1, n + 1))  # oldest first
    assert job.attempts[-1].outcome is None  # the running one, last
    few = get(store, start_job(store, t0, queue="other").id)
    assert (len(few.attempts), few.older_attempts) == (1, 0)


def test_snoozes_past_the_cap_spend_the_budget(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker token snoozed one job 300 times: max_attempts=2 meant nothing.
    Past MAX_HANDBACKS hand-backs (3 here) a snooze counts as a failure."""
    monkeypatch.setattr(model, "MAX_HANDBACKS", 3)
    t0 = store.db_now()
    c = start_job(store, t0, max_attempts=2)
    states = []
    for i in range(10):
        states.append(store.fail(W, c.id, c.attempt, outcome=Outcome.SNOOZED, error="again", now=t0 + sec(i),
                                 delay=0))
        if states[-1] is not JobState.QUEUED:
            break
        c = claim_one(store, t0 + sec(i))
    # three free snoozes (released 3), then attempts 4 and 5 spend the budget of 2
    assert states == [JobState.QUEUED] * 4 + [JobState.DEAD], states
    job = get(store, c.id)
    assert (job.attempt, job.released, job.state) == (5, 3, JobState.DEAD)


# -- item 3: workers' rows --------------------------------------------------------------


def test_workers_are_read_a_page_at_a_time(store: Store) -> None:
    t0 = store.db_now()
    for i in range(7):
        store.register_worker(worker(f"w-{i}"))
        store.heartbeat(f"w-{i}", [], 30, now=t0 + sec(i))
    store.stop_worker("w-6", now=t0 + sec(10))
    first = store.workers_page(limit=3)
    assert [w.id for w in first] == ["w-5", "w-4", "w-3"]  # not stopped first, the most recently seen first
    assert [w.id for w in store.workers_page(limit=3, offset=3)] == ["w-2", "w-1", "w-0"]
    assert [w.id for w in store.workers_page(limit=3, offset=6)] == ["w-6"]
    assert [w.id for w in store.workers_page(limit=10, live_only=True)][-1] == "w-0"
    stats = store.stats()
    assert stats.workers_total == 6 and len(stats.workers) == 6


@pytest.fixture
def local(store: Store, backend: str) -> Store:
    """Counting and pruning workers' rows are the database's own (a tether server's, for its caps)."""
    if backend.startswith("http-"):
        with pytest.raises(ConfigError):
            store.count_workers()
        with pytest.raises(ConfigError):
            store.prune_workers(1.0, 10)
        pytest.skip("a tether server counts and prunes its own workers' rows")
    return store


def test_count_workers_by_owner_queue_and_liveness(local: Store) -> None:
    t0 = local.db_now()
    local.register_worker(worker("a-1", queues=["mail"]), owner="token-a")
    local.register_worker(worker("a-2", queues=["mail", "pdf"]), owner="token-a")
    local.register_worker(worker("b-1", queues=["pdf"]), owner="token-b")
    local.stop_worker("a-1")
    assert local.count_workers() == 3
    assert local.count_workers(owner="token-a") == 2 and local.count_workers(owner="token-c") == 0
    assert local.count_workers(queue="pdf") == 2 and local.count_workers(queue="mail", live_only=True) == 1
    assert local.count_workers(live_only=True, now=t0 + sec(3600)) == 0  # silent an hour: not live


def test_prune_workers_deletes_rows_stopped_or_silent_past_the_age(local: Store) -> None:
    for wid in ("stopped", "silent", "live"):
        local.register_worker(worker(wid), owner="token-a")
    local.register_worker(worker("other"), owner="token-b")
    t0 = local.db_now()  # after the registrations: each was last seen before it
    local.stop_worker("stopped", now=t0 + sec(10))
    local.heartbeat("live", [], 30, now=t0 + sec(2 * 86400))
    day = 86400.0
    assert local.prune_workers(day, 100, now=t0 + sec(day - 60)) == []  # nothing a day old yet
    gone = local.prune_workers(day, 100, now=t0 + sec(day + 60))
    assert sorted(gone) == ["other", "silent", "stopped"]
    assert [w.id for w in local.list_workers()] == ["live"]
    local.register_worker(worker("x"), owner="token-b")
    assert local.prune_workers(0, 100, owner="token-a", now=t0 + sec(3 * day)) == ["live"]  # one owner's only
    assert [w.id for w in local.list_workers()] == ["x"]
