"""One ending (issue 48, item 2; DESIGN.md section 2).

Every statement that can move a job into a terminal state goes through one
shared piece per backend, which does what every ending must: the attempt's
audit row, the wake-up of the job's waiters, and (issue 42) the release of
the jobs that wait for it. On PostgreSQL that piece is queries.sql's
``_ending`` (with ``_attempt_ending`` for statements that end an attempt
otherwise than in success), on SQLite ``store/sqlite/ending.py``'s ``end``.

The static tests parse both queries.sql and fail if a statement that sets a
terminal state (today's, or one added later) bypasses the shared piece; the
behavioural ones run every ending path on every store and check its audit
row and, on PostgreSQL, the waiter's wake-up.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import pytest

from tether import JobState, Outcome, Tether
from tether.model import WorkerInfo
from tether.store import Store
from tether.store import sqlite as sqlite_backend
from tether.store.postgres.store import PostgresStore
from tether.store.sqlfile import included, parse_queries, split_queries
from tether.store.sqlite.ending import ENDINGS

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import TTL, W, get, new_job, sec
from .test_results import Heard, push_only
from .test_sqlfile import BACKENDS

TERMINAL = ("succeeded", "dead", "cancelled")
MACROS = BACKENDS  # each backend's macros, as its store fills them
#: the statements that end jobs today, so that the parser below is checked too
POSTGRES_ENDINGS = {"complete", "complete_and_claim", "complete_and_claim_known", "complete_and_claim_ids",
                    "fail", "release", "reap", "cancel", "bury_unknown", "cancel_many", "expire"}


# -- static: no ending bypasses the shared piece -------------------------------------------


def set_clauses(sql: str) -> Iterator[dict[str, str]]:
    """Each ``SET a = x, b = y`` of ``sql`` (comments stripped) as {column: expression}."""
    for m in re.finditer(r"\bSET\b", sql):
        depth, i, start, parts = 0, m.end(), m.end(), []
        while i < len(sql):
            c = sql[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth < 0:
                    break
            elif c == "," and depth == 0:
                parts.append(sql[start:i])
                start = i + 1
            elif depth == 0 and re.match(r"\b(WHERE|FROM|RETURNING)\b", sql[i:]) and not sql[i - 1].isalnum() \
                    and sql[i - 1] != "_":
                break
            i += 1
        parts.append(sql[start:i])
        yield {p.split("=", 1)[0].strip(): p.split("=", 1)[1] for p in parts if "=" in p}


def sets_terminal(sql: str) -> bool:
    """Whether a statement can set a job's state to a terminal one: an UPDATE
    whose SET gives state an expression naming one, or an INSERT that lists state."""
    for assigned in set_clauses(sql):
        if any(f"'{t}'" in assigned.get("state", "") for t in TERMINAL):
            return True
    return bool(re.search(r"INSERT INTO \S*jobs\s*\([^)]*\bstate\b", sql))


def ends_attempts(sql: str) -> bool:
    """Whether a statement ends attempts otherwise than in success: it takes the
    job from its worker (locked_by = NULL), which only fail, release and reap do."""
    return any(a.get("locked_by", "").strip() == "NULL" for a in set_clauses(sql))


def queries(package: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(raw sections, loaded queries)`` of a backend's queries.sql."""
    text = resources.files(package).joinpath("queries.sql").read_text(encoding="utf-8")
    return split_queries(text, "queries.sql"), parse_queries(text, "queries.sql", MACROS[package])


def test_the_parser_finds_terminal_states_only_where_they_are_set() -> None:
    assert sets_terminal("UPDATE jobs SET state = CASE WHEN x THEN 'dead' ELSE 'queued' END, a = 1 WHERE id = 1")
    assert sets_terminal("UPDATE jobs AS j SET result = f(j.a, 'x'), state = 'succeeded' FROM d WHERE j.id = d.id")
    assert sets_terminal("INSERT INTO s.jobs (queue, state) VALUES ('q', 'dead')")
    assert not sets_terminal("UPDATE jobs SET result = 1 WHERE id = 1 AND state = 'succeeded' RETURNING id")
    assert not sets_terminal("UPDATE jobs SET state = 'queued', finished_at = NULL WHERE state IN ('dead')")
    assert ends_attempts("UPDATE jobs SET state = 'queued', locked_by = NULL WHERE id = 1")
    assert not ends_attempts("UPDATE jobs SET state = 'succeeded' WHERE locked_by = NULL")


def test_every_postgres_statement_that_ends_a_job_goes_through_the_shared_ending() -> None:
    raw, loaded = queries("tether.store.postgres")
    endings = {name for name, sql in loaded.items() if sets_terminal(sql)}
    assert endings == POSTGRES_ENDINGS
    for name in endings:
        fragments = included(raw, name)
        assert "_ending" in fragments, f"{name} sets a terminal state without _ending"
        # its answer reads _ended, or woken (a CTE nobody reads) would never run
        assert "_ended" in fragments, f"{name} does not read FROM _ended: its woken would not run"
        if ends_attempts(loaded[name]):
            assert "_attempt_ending" in fragments, f"{name} ends attempts without _attempt_ending's audit row"
    for name, sql in loaded.items():  # nothing else writes attempts rows or wakes waiters on its own
        if name not in endings:
            assert 'INSERT INTO "tether".attempts' not in sql and "tether_done_tether" not in sql, name


def test_every_sqlite_statement_that_ends_a_job_runs_through_end() -> None:
    _, loaded = queries("tether.store.sqlite")
    assert {name for name, sql in loaded.items() if sets_terminal(sql)} == ENDINGS
    for name in ENDINGS:  # the nine columns end() reads lead the answer
        returning = loaded[name].rsplit("RETURNING", 1)[1]
        assert returning.count(",") >= 8, name
        # ... and the last says whether the job has dependents to release (issue 42)
        assert returning.rstrip().endswith("upstream_id = tether_jobs.id)"), name
    # ... and the store runs them through end(), never on their own
    source = Path(sqlite_backend.__file__).parent
    through_end: set[str] = set()
    for path in source.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        direct = set(re.findall(r"""(?:q\[|_all\(|_all_async\()\s*["'](\w+)["']""", text))
        assert not direct & ENDINGS, f"{path.name} runs {direct & ENDINGS} without end()"
        through_end |= set(re.findall(r"""\bend\(\w+, (?:self\.)?q, ["'](\w+)["']""", text))
        through_end |= set(re.findall(r"""\bend\(\w+, self\.q, (\w+)""", text)) & {"query"}
    assert ENDINGS - {"fail", "release"} <= through_end  # fail and release pass their name on (_finish)


# -- behaviour: every ending path writes its audit row -------------------------------------


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def _started(store: Store, **options: object) -> tuple[int, int]:
    (job_id,) = store.enqueue([new_job(**options)])  # type: ignore[arg-type]
    (c,) = store.claim(W, ["default"], 1, TTL)
    assert c.id == job_id
    return c.id, c.attempt


def _bury(store: Store) -> int:
    (job_id,) = store.enqueue([new_job("nobody_knows")], now=store.db_now() - sec(7200))
    assert [b.id for b in store.bury_unknown(["default"], grace=3600, limit=10)] == [job_id]
    return job_id


def _complete(store: Store) -> int:
    job_id, attempt = _started(store)
    assert store.complete(W, [(job_id, attempt, None)]) == {job_id}
    return job_id


def _complete_and_claim(store: Store) -> int:
    job_id, attempt = _started(store)
    assert store.complete_and_claim(W, [(job_id, attempt, None)], ["default"], 1, TTL)[0] == {job_id}
    return job_id


def _fail(store: Store) -> int:
    job_id, attempt = _started(store, max_attempts=1)
    assert store.fail(W, job_id, attempt, outcome=Outcome.FAILED, error="boom", traceback="tb") is JobState.DEAD
    return job_id


def _fail_cancelled(store: Store) -> int:
    job_id, attempt = _started(store)
    store.cancel(job_id)
    assert store.fail(W, job_id, attempt, outcome=Outcome.CANCELLED, error="cancelled") is JobState.CANCELLED
    return job_id


def _release_cancelled(store: Store) -> int:
    job_id, attempt = _started(store)
    store.cancel(job_id)
    assert store.release(W, job_id, attempt) is JobState.CANCELLED
    return job_id


def _reap(store: Store) -> int:
    job_id, _ = _started(store, max_attempts=1)
    [r] = store.reap(10, now=store.db_now() + sec(TTL + 1))
    assert (r.id, r.state) == (job_id, JobState.DEAD)
    return job_id


def _cancel_queued(store: Store) -> int:
    (job_id,) = store.enqueue([new_job()])
    assert store.cancel(job_id) is JobState.CANCELLED
    return job_id


#: every way a job ends: (its state, the outcome of its one finished attempt, or None: no attempt ran)
ENDING_PATHS: dict[str, tuple[Callable[[Store], int], JobState, Outcome | None]] = {
    "complete": (_complete, JobState.SUCCEEDED, Outcome.SUCCEEDED),
    "complete_and_claim": (_complete_and_claim, JobState.SUCCEEDED, Outcome.SUCCEEDED),
    "fail": (_fail, JobState.DEAD, Outcome.FAILED),
    "fail_cancelled": (_fail_cancelled, JobState.CANCELLED, Outcome.CANCELLED),
    "release_cancelled": (_release_cancelled, JobState.CANCELLED, Outcome.RELEASED),
    "reap": (_reap, JobState.DEAD, Outcome.LEASE_EXPIRED),
    "cancel_queued": (_cancel_queued, JobState.CANCELLED, None),
    "bury_unknown": (_bury, JobState.DEAD, None),
}


def _register(store: Store) -> None:
    t = store.db_now()
    store.register_worker(WorkerInfo(id=W, host="h", pid=1, proc_start=None, started_at=t, last_seen=t,
                                     queues=["default"], concurrency=1, tasks=["t"]))


@pytest.mark.parametrize("path", sorted(ENDING_PATHS))
def test_every_ending_path_leaves_its_audit(store: Store, path: str) -> None:
    _register(store)  # a worker that knows "t" (bury_unknown buries only the other task)
    end, state, outcome = ENDING_PATHS[path]
    job = get(store, end(store))
    assert job.state is state and job.finished_at is not None
    audit = [(a.attempt, a.outcome, a.worker) for a in job.attempts]
    assert audit == ([] if outcome is None else [(1, outcome, W)])


def test_a_transactional_success_leaves_its_audit(store: Store, backend: str) -> None:
    if backend.startswith("http-"):
        pytest.skip("no shared transaction over a tether server")
    job_id, attempt = _started(store)
    with store.transaction(W, job_id, attempt):
        pass
    job = get(store, job_id)
    assert (job.state, [(a.attempt, a.outcome, a.worker) for a in job.attempts]) == (
        JobState.SUCCEEDED, [(1, Outcome.SUCCEEDED, W)])


# -- behaviour: every ending path wakes its waiters (PostgreSQL's push) ----------------------


@pytest.fixture
def pg(backend: str, make_app: Callable[..., Tether]) -> Iterator[Tether]:
    if backend != "postgresql":
        pytest.skip("the finish notification is PostgreSQL's")
    yield make_app()


def _transactional(store: Store) -> int:
    job_id, attempt = _started(store)
    with store.transaction(W, job_id, attempt):
        pass
    return job_id


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("path", [*sorted(ENDING_PATHS), "transaction"])
def test_every_ending_path_wakes_a_waiter_of_its_job(pg: Tether, path: str) -> None:
    store = pg.store
    assert isinstance(store, PostgresStore)
    _register(store)
    end = _transactional if path == "transaction" else ENDING_PATHS[path][0]
    heard = Heard(store)
    try:
        # Someone waits for every job: the next id is the one the path ends
        # (each path enqueues its job first), and a waiter registers by id.
        for n in range(1, 10):
            store.watch_finished(n, 60)
        job_id = end(store)
        assert heard.ids() == [[job_id]]
    finally:
        heard.conn.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_waiter_on_a_buried_job_wakes_without_polling(pg: Tether, monkeypatch: pytest.MonkeyPatch) -> None:
    """bury_unknown sent no notification before the shared ending: its waiters
    saw the job dead only at their next poll."""
    store = pg.store
    push_only(pg, monkeypatch)
    (job_id,) = store.enqueue([new_job("nobody_knows")], now=store.db_now() - sec(7200))
    threading.Timer(0.3, lambda: store.bury_unknown(["default"], grace=3600, limit=10)).start()
    started = time.monotonic()
    with pytest.raises(Exception, match="unknown task") as failed:
        pg.wait(job_id, timeout=20)
    assert time.monotonic() - started < 2.0, failed.value
