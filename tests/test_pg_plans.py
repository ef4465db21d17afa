"""Which plans PostgreSQL uses for a worker's rounds: claims of any size, and
complete_and_claim of at most GENERIC_MAX jobs each way, run prepared with
generic plans on the store's round connections, planned once; larger rounds
with successes, and every other statement, are planned for their arguments on
the main pool."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tether.store import open_store
from tether.store.postgres.store import GENERIC_MAX, PostgresStore

from .test_conformance import TTL, W, new_job


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


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_small_rounds_run_generic_plans_and_large_ones_custom(pg: PostgresStore) -> None:
    pg.enqueue([new_job(args={"n": n}) for n in range(200)])
    jobs = pg.claim(W, ["default"], 5, TTL)
    for _ in range(8):  # small: 5 successes carried, 5 claimed
        _, jobs = pg.complete_and_claim(W, [(j.id, j.attempt, None) for j in jobs], ["default"], 5, TTL)
    big = pg.claim(W, ["default"], GENERIC_MAX + 1, TTL)
    _, big = pg.complete_and_claim(W, [(j.id, j.attempt, None) for j in big], ["default"], GENERIC_MAX + 1, TTL)
    assert len(big) == GENERIC_MAX + 1

    small = _count(_plans(pg.round_pool), pg.q["complete_and_claim"])
    assert small == (8, 0)  # planned once, executed eight times
    assert _count(_plans(pg.round_pool), pg.q["claim"]) == (2, 0)  # a claim of any size: generic
    large = _count(_plans(pg.pool), pg.q["complete_and_claim"])
    assert large == (0, 1)
    assert _count(_plans(pg.pool), pg.q["claim"]) == (0, 0)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_workers_async_rounds_take_the_same_plans_on_the_loops_own_connections(pg: PostgresStore) -> None:
    """What a worker's event loop awaits: small rounds prepared on the round
    connections (generic plans, planned once), a large one on the others."""
    pg.enqueue([new_job(args={"n": n}) for n in range(200)])

    async def rounds() -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
        jobs = await pg.claim_async(W, ["default"], 5, TTL)
        for _ in range(8):
            _, jobs = await pg.complete_and_claim_async(W, [(j.id, j.attempt, None) for j in jobs], ["default"], 5,
                                                        TTL)
        big = await pg.claim_async(W, ["default"], GENERIC_MAX + 1, TTL)
        _, big = await pg.complete_and_claim_async(W, [(j.id, j.attempt, None) for j in big], ["default"],
                                                   GENERIC_MAX + 1, TTL)
        assert len(big) == GENERIC_MAX + 1
        plans = []
        for conns in (pg.round_async, pg.async_connections):
            async with conns.connection() as conn:
                cur = await conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
                plans.append({text: (generic, custom) for text, generic, custom in await cur.fetchall()})
        return plans[0], plans[1]

    small, large = asyncio.run(rounds())
    assert _count(small, pg.q["complete_and_claim"]) == (8, 0)
    assert _count(small, pg.q["claim"]) == (2, 0)  # a claim of any size: generic
    assert _count(large, pg.q["complete_and_claim"]) == (0, 1)
    assert _count(large, pg.q["claim"]) == (0, 0)
