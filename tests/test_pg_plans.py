"""Which plans PostgreSQL uses for a worker's rounds: claim, complete and
complete_and_claim, and a delivering transport's claim_ids and
complete_and_claim_ids, whatever their size, run prepared with generic plans
on the store's round connections, planned once; every other statement is
planned for its arguments on the main pool."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest

from tether.store import open_store
from tether.store.postgres.store import PostgresStore

from .test_conformance import TTL, W, new_job

#: a large round: a claim of the size a worker at concurrency 75 makes while
#: prefetching, with as many successes
BIG = 150


@pytest.fixture
def pg(backend: str, db_url: str) -> Iterator[PostgresStore]:
    store = open_store(db_url)
    assert isinstance(store, PostgresStore)
    store.migrate()
    yield store
    store.close()


def _plans(pool: object) -> dict[str, tuple[int, int]]:
    """(generic, custom) executions per prepared statement on one of the pool's connections."""
    with pool.connection() as conn:  # type: ignore[attr-defined]
        rows = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    return {text: (generic, custom) for text, generic, custom in rows}


def _count(plans: dict[str, tuple[int, int]], query: str) -> tuple[int, int]:
    """The statement's counts, found by its opening tag (the driver has
    replaced the named parameters further on)."""
    head = query.splitlines()[0]
    assert head.startswith("/* tether:")
    return next((v for text, v in plans.items() if text.strip().startswith(head)), (0, 0))


def _backlog(pg: PostgresStore) -> None:
    """Enough jobs for eight small rounds (5 successes carried, 5 claimed),
    then a large claim and a large round."""
    pg.enqueue([new_job(args={"n": n}) for n in range(2 * BIG + 60)])


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_rounds_of_any_size_run_generic_plans_on_the_round_connections(pg: PostgresStore) -> None:
    _backlog(pg)
    jobs = pg.claim(W, ["default"], 5, TTL)
    for _ in range(8):
        _, jobs = pg.complete_and_claim(W, [(j.id, j.attempt, None) for j in jobs], ["default"], 5, TTL)
    big = pg.claim(W, ["default"], BIG, TTL)
    _, big = pg.complete_and_claim(W, [(j.id, j.attempt, None) for j in big], ["default"], BIG, TTL)
    assert len(big) == BIG
    assert pg.complete(W, [(j.id, j.attempt, None) for j in big]) == {j.id for j in big}

    rounds = _plans(pg.round_pool)
    assert _count(rounds, pg.q["complete_and_claim"]) == (9, 0)  # planned once, executed nine times
    assert _count(rounds, pg.q["claim"]) == (2, 0)
    assert _count(rounds, pg.q["complete"]) == (1, 0)
    main = _plans(pg.pool)
    assert all(_count(main, pg.q[name]) == (0, 0) for name in ("claim", "complete", "complete_and_claim"))


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_workers_async_rounds_take_the_same_plans_on_the_loops_own_connections(pg: PostgresStore) -> None:
    """What a worker's event loop awaits: the same statements, prepared on
    the loop's round connections (generic plans, planned once)."""
    _backlog(pg)

    async def rounds() -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
        jobs = await pg.claim_async(W, ["default"], 5, TTL)
        for _ in range(8):
            _, jobs = await pg.complete_and_claim_async(W, [(j.id, j.attempt, None) for j in jobs], ["default"], 5,
                                                        TTL)
        big = await pg.claim_async(W, ["default"], BIG, TTL)
        _, big = await pg.complete_and_claim_async(W, [(j.id, j.attempt, None) for j in big], ["default"], BIG, TTL)
        assert len(big) == BIG
        assert await pg.complete_async(W, [(j.id, j.attempt, None) for j in big]) == {j.id for j in big}
        plans = []
        for conns in (pg.round_async, pg.async_connections):
            async with conns.connection() as conn:
                cur = await conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
                plans.append({text: (generic, custom) for text, generic, custom in await cur.fetchall()})
        return plans[0], plans[1]

    rounds_, other = asyncio.run(rounds())
    assert _count(rounds_, pg.q["complete_and_claim"]) == (9, 0)
    assert _count(rounds_, pg.q["claim"]) == (2, 0)
    assert _count(rounds_, pg.q["complete"]) == (1, 0)
    assert all(_count(other, pg.q[name]) == (0, 0) for name in ("claim", "complete", "complete_and_claim"))


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_rounds_of_delivered_ids_run_generic_plans_on_the_round_connections(pg: PostgresStore) -> None:
    """A NATS worker's rounds, sync and async: planned once, like a database
    claim's. Planned for their arguments on the main pool, as they were,
    PostgreSQL spent 0.02-0.03 ms more CPU per job on them than on
    complete_and_claim (planning, each round)."""
    ids = pg.enqueue([new_job(args={"n": n}) for n in range(2 * BIG + 60)])
    jobs = pg.claim_ids(W, ids[:5], ["default"], TTL)
    at = 5
    for size in (5, 5, 5, 5, 5, 5, 5, 5, BIG):  # nine rounds, the last a large one
        _, jobs = pg.complete_and_claim_ids(W, [(j.id, j.attempt, None) for j in jobs], ids[at:at + size],
                                            ["default"], TTL)
        assert len(jobs) == size
        at += size
    rounds = _plans(pg.round_pool)
    assert _count(rounds, pg.q["complete_and_claim_ids"]) == (9, 0)
    assert _count(rounds, pg.q["claim_ids"]) == (1, 0)
    assert all(_count(_plans(pg.pool), pg.q[name]) == (0, 0) for name in ("claim_ids", "complete_and_claim_ids"))

    async def rounds_async() -> dict[str, tuple[int, int]]:
        got = await pg.claim_ids_async(W, ids[at:at + 5], ["default"], TTL)
        for n in range(6):
            start = at + 5 + 5 * n
            _, got = await pg.complete_and_claim_ids_async(W, [(j.id, j.attempt, None) for j in got],
                                                           ids[start:start + 5], ["default"], TTL)
            assert len(got) == 5
        async with pg.round_async.connection() as conn:
            cur = await conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
            return {text: (generic, custom) for text, generic, custom in await cur.fetchall()}

    loop_rounds = asyncio.run(rounds_async())
    assert _count(loop_rounds, pg.q["complete_and_claim_ids"]) == (6, 0)
    assert _count(loop_rounds, pg.q["claim_ids"]) == (1, 0)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("query", ["claim_known", "complete_and_claim_known"])
def test_a_claim_naming_tasks_never_reads_the_jobs_of_other_tasks_ahead(pg: PostgresStore, query: str) -> None:
    """With tasks, the claim walks jobs_claim_task_idx by (queue, task):
    a backlog of another task's jobs at the head of the queue is never read.
    Asked of a generic plan made on a table without statistics, where
    PostgreSQL once preferred jobs_claim_idx with the task as a filter."""
    pg.enqueue([new_job(task="other", priority=5) for _ in range(500)])
    pg.enqueue([new_job(task="mine") for _ in range(20)])
    params = {"worker": W, "queues": ["default"], "tasks": ["mine"], "limit": 10, "lease_ttl": TTL, "now": None,
              "ids": [], "done": "{}"}
    with psycopg.connect(pg.dsn.url, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("BEGIN")  # EXPLAIN ANALYZE runs the statement: roll it back
        plan = "\n".join(r[0] for r in conn.execute(("EXPLAIN (ANALYZE) " + pg.q[query]).encode(), params,
                                                    prepare=True))
        conn.execute("ROLLBACK")
    walk = plan.split("Index Scan using jobs_claim_task_idx", 1)
    assert len(walk) == 2 and "jobs_claim_idx" not in plan, plan
    # the walk hands over the 10 rows it was asked for, and reads no others
    assert "rows=10 loops=1)" in walk[1].splitlines()[0], plan
    assert "Rows Removed" not in "\n".join(walk[1].splitlines()[:4]), plan


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("query", ["claim_ids", "complete_and_claim_ids"])
def test_a_claim_of_delivered_ids_finds_them_by_primary_key_whatever_the_backlog(pg: PostgresStore,
                                                                                 query: str) -> None:
    """A delivering transport's claim names its jobs by id: the primary key
    finds them. Asked of a generic plan made on a table without statistics
    (a fresh schema, a bulk enqueue before autovacuum's ANALYZE): PostgreSQL
    chose jobs_claim_idx there, whose predicate state = 'queued' matched,
    and filtered every queued job for the few delivered ones. Claims run with
    generic plans made once per connection, so a NATS worker that started on
    such a table read its whole backlog on every round (60,000 queued jobs:
    41 ms a claim instead of 1, about 700 jobs/s)."""
    ids = pg.enqueue([new_job(args={"n": n}) for n in range(2000)])
    running = pg.claim(W, ["default"], 5, TTL)
    delivered = ids[1000:1040]
    params = {"worker": W, "queues": ["default"], "tasks": ["t"], "lease_ttl": TTL, "now": None,
              "delivered": "{" + ",".join(map(str, delivered)) + "}",
              "ids": [j.id for j in running],
              "done": "{" + ",".join(f'"{j.id}": [{j.attempt}]' for j in running) + "}"}
    if query == "claim_ids":
        params["done"] = None
    with psycopg.connect(pg.dsn.url, autocommit=True) as conn:
        assert conn.execute("SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables "
                            "WHERE relid = %s::regclass", (f"{pg.schema}.jobs",)).fetchone() == (None, None)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("BEGIN")  # EXPLAIN ANALYZE runs the statement: roll it back
        plan = "\n".join(r[0] for r in conn.execute(("EXPLAIN (ANALYZE) " + pg.q[query]).encode(), params,
                                                    prepare=True))
        conn.execute("ROLLBACK")
    assert "jobs_claim_idx" not in plan and "jobs_claim_task_idx" not in plan, plan
    assert "jobs_pkey" in plan, plan
    # no scan read the backlog (the 40 the claim's own rate-limit CTE passes over are its claimed rows)
    removed = [int(line.rsplit(":", 1)[1]) for line in plan.splitlines() if "Rows Removed by Filter" in line]
    assert all(n <= len(delivered) for n in removed), plan


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_claim_passes_a_held_keys_backlog_without_calling_key_free_for_each_job(pg: PostgresStore) -> None:
    """A claim's walk reads each queued job of a key that a running job holds.
    It passes them over on one probe of the running-key index each, not a
    key_free call each (an advisory lock and a query: 666 ms a claim behind
    100,000 such jobs, bench/claim_backlog.py). Counted by PostgreSQL's own
    function statistics for the claim's transaction."""
    held = 300
    pg.enqueue([new_job(exclusive_key="k") for _ in range(held)])
    keyless = pg.enqueue([new_job() for _ in range(10)])
    (first,) = pg.claim(W, ["default"], 1, TTL, tasks=["t"])  # the key's first job runs: the rest wait
    params = {"worker": W, "queues": ["default"], "limit": 10, "lease_ttl": TTL, "now": None, "done": None,
              "tasks": ["t"]}
    with pg.pool.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL track_functions = 'pl'")
        claimed = [row[0] for row in conn.execute(pg.q["claim_known"], params).fetchall()]
        row = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
                           "WHERE funcname = 'key_free'").fetchone()
    assert sorted(claimed) == keyless
    assert row is not None and row[0] == 0, f"key_free called {row} times for {held - 1} jobs of a held key"
    assert first.id not in claimed


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_claim_over_a_long_backlog_is_not_compiled_by_jit(pg: PostgresStore) -> None:
    """PostgreSQL JIT-compiles a statement whose estimate passes jit_above_cost
    (100,000 by default), on every execution. A claim's estimate grows with
    the queued backlog: at 100,000 queued jobs, a claim of 10 spent about 30
    ms of every execution compiling (600 ms at 1.6 million), for a statement
    that runs in 1-2 ms. The store's sessions (its pool and its round
    connections) run with JIT off; through a transaction pooler they cannot
    (README, PgBouncer)."""
    with pg.pool.connection() as conn:
        conn.execute(f'INSERT INTO "{pg.schema}".jobs (queue, task, args, run_at, max_attempts, created_at) '
                     "SELECT 'default', 'noop', jsonb_build_object('i', g), now(), 3, now() "
                     "FROM generate_series(1, 120000) AS g")
        conn.execute(f'ANALYZE "{pg.schema}".jobs')
    params = {"worker": W, "queues": ["default"], "limit": 10, "lease_ttl": TTL, "now": None, "done": None}
    for pool in (pg.pool, pg.round_pool):
        with pool.connection() as conn:
            assert conn.execute("SHOW jit").fetchone() == ("off",)
            with conn.transaction(force_rollback=True):
                [(plan,)] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pg.q["claim"], params).fetchall()
        [top] = plan
        assert top["Plan"]["Total Cost"] > 100_000, "the backlog no longer takes the claim past jit_above_cost"
        assert "JIT" not in top, top["JIT"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_urls_own_startup_options_go_after_tethers(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A URL's ``options=-c statement_timeout=...`` replaced tether's startup
    options whole: its sessions lost ``jit=off`` and the plan settings of its
    pools, unsaid. Now the URL's go after tether's: they win a setting both
    name (and JIT turned back on is named at the check of the schema)."""
    import logging
    from urllib.parse import quote as urlquote

    from tether.store.postgres import connect

    store = open_store(db_url + "&options=" + urlquote("-c statement_timeout=5000"))
    assert isinstance(store, PostgresStore)
    try:
        store.migrate()
        for pool, plans in ((store.pool, "force_custom_plan"), (store.round_pool, "force_generic_plan")):
            with pool.connection() as conn:
                shown = [conn.execute(f"SHOW {name}").fetchone() for name in ("statement_timeout", "jit",
                                                                                  "plan_cache_mode")]
            assert shown == [("5s",), ("off",), (plans,)]
    finally:
        store.close()
    jit_on = open_store(db_url + "&options=" + urlquote("-c jit=on"))
    assert isinstance(jit_on, PostgresStore)
    try:
        connect._JIT_WARNED.discard(jit_on.dsn.url)
        with caplog.at_level(logging.WARNING, logger="tether.store.postgres"):
            jit_on.check_schema()
        [line] = [r.getMessage() for r in caplog.records if "JIT" in r.getMessage()]
        assert "the URL's own options= turn it on" in line
    finally:
        jit_on.close()
