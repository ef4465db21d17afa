"""A/B: where should the rule every job ending runs live on PostgreSQL?

    PYTHONPATH=src python bench/ending_ab.py [rounds] [batch]

Issue 48, item 2 (DESIGN.md section 2): every statement that ends a job must
pass through one shared piece (today: the waiters' wake-up; soon: issue 42's
release of dependents). Four variants, each on its own schema, timed interleaved:

- old:  the queries before the shared ending (OLD_REF): the successes' own
        `woken` CTE;
- cte:  this tree's queries: the ending's work is CTEs of the ending statement
        itself (_ending), which a test proves every ending includes;
- stmt: a statement-level AFTER UPDATE trigger on jobs with transition tables
        (old and new rows), the queries without _ending's CTEs;
- row:  a row-level AFTER UPDATE OF state trigger, WHEN the new state is
        terminal, the queries without _ending's CTEs.

Each trigger does what the CTE does (one probe of the empty waiters table,
then, were anyone waiting, the notification). PostgreSQL refuses a column
list (UPDATE OF state) on a trigger with transition tables, so `stmt` fires,
and captures its transition rows, on every UPDATE of jobs: claims and
heartbeats too. Measured per variant, interleaved round by round, medians:

- round:     complete_and_claim of `batch` successes and a claim of `batch`;
- complete:  one complete of one job (claimed just before, untimed);
- heartbeat: one heartbeat of `batch` held jobs.

Each is timed twice: wall clock in this process, and the CPU the variant's
own PostgreSQL backends spent (their /proc/PID/schedstat, nanoseconds), which
other sessions on a shared machine disturb much less than the wall clock.
Short on purpose (a shared two-core machine). Numbers go in the commit.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import subprocess
import sys
import time

import psycopg

from tether.model import NewJob
from tether.store import open_store
from tether.store.postgres.store import NOW, PostgresStore
from tether.store.sqlfile import parse_queries

BASE = "postgresql://postgres@127.0.0.1:5432/test?schema="
#: the queries before the shared ending (variant "old"): the commit this work started from
OLD_REF = "084b501"
W, TTL = "bench-worker", 60.0
TERMINAL = "('succeeded', 'dead', 'cancelled')"


def _stmt_trigger(s: str, channel: str) -> str:
    return f"""
CREATE FUNCTION {s}.job_ended() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {s}.waiters) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify({channel}, string_agg(f.id::text, ','))
    FROM (SELECT n.id, (row_number() OVER ()) / 400 AS chunk
          FROM new_jobs AS n JOIN old_jobs AS o ON o.id = n.id
          WHERE n.state IN {TERMINAL} AND o.state NOT IN {TERMINAL}
            AND EXISTS (SELECT 1 FROM {s}.waiters AS w WHERE w.job_id = n.id AND w.expires_at > now())) AS f
    GROUP BY f.chunk;
    RETURN NULL;
END $fn$;
CREATE TRIGGER jobs_ended AFTER UPDATE ON {s}.jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.job_ended();
"""


def _row_trigger(s: str, channel: str) -> str:
    return f"""
CREATE FUNCTION {s}.job_ended() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM {s}.waiters AS w WHERE w.job_id = NEW.id AND w.expires_at > now()) THEN
        PERFORM pg_notify({channel}, NEW.id::text);
    END IF;
    RETURN NULL;
END $fn$;
CREATE TRIGGER jobs_ended AFTER UPDATE OF state ON {s}.jobs
    FOR EACH ROW WHEN (NEW.state IN {TERMINAL} AND OLD.state NOT IN {TERMINAL})
    EXECUTE FUNCTION {s}.job_ended();
"""


#: the ending's CTE in the loaded queries, which the trigger variants replace
#: (only successes are timed here: they write no attempts row either way)
_WOKEN = re.compile(r"woken AS \(\nSELECT pg_notify.*?GROUP BY f\.chunk\n\)", re.DOTALL)


def _old_queries(store: PostgresStore, ref: str) -> dict[str, str]:
    """The queries of ``ref`` (git), for the same schema."""
    text = subprocess.run(["git", "show", f"{ref}:src/tether/store/postgres/queries.sql"], check=True,
                          capture_output=True, text=True).stdout
    macros = {"schema": f'"{store.schema}"', "now": NOW, "channel": "'" + store.channel + "'",
              "done_channel": "'" + store.done_channel + "'"}
    return parse_queries(text, "queries.sql", macros)


def _store(variant: str, jobs: int) -> PostgresStore:
    store = open_store(BASE + f"bench_ending_{variant}")
    assert isinstance(store, PostgresStore)
    with contextlib.suppress(Exception):  # left by an interrupted run, or not there
        store.destroy()
    store.migrate()
    if variant == "old":
        store.q = _old_queries(store, OLD_REF)
    elif variant != "cte":
        schema = f'"bench_ending_{variant}"'
        channel = "'" + store.done_channel + "'"
        sql = (_stmt_trigger if variant == "stmt" else _row_trigger)(schema, channel)
        with store.pool.connection() as conn:
            conn.execute(sql.encode(), prepare=False)
        for name, text in list(store.q.items()):
            if "woken AS (" in text:
                store.q[name], n = _WOKEN.subn("woken AS (SELECT 1)", text)
                assert n == 1, name
    for start in range(0, jobs, 5000):
        store.enqueue([NewJob(task="t", args_json=json.dumps({"n": i}))
                       for i in range(start, min(jobs, start + 5000))])
    return store


def _backends(schema: str) -> list[int]:
    """The pids of the backends whose last statement named the schema (ours)."""
    with psycopg.connect(BASE.split("?")[0], autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE query LIKE %s",
                            (f'%"{schema}"%',)).fetchall()
    return [r[0] for r in rows]


def _cpu(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    variants = ["cte", "old", "stmt", "row"]
    need = batch * (rounds + 2) + rounds + 10
    stores = {v: _store(v, need) for v in variants}
    held = {v: stores[v].claim(W, ["default"], batch, TTL) for v in variants}
    kinds = ("round", "complete", "heartbeat")
    times: dict[tuple[str, str], list[float]] = {(v, k): [] for v in variants for k in kinds}
    cpu: dict[tuple[str, str], list[float]] = {(v, k): [] for v in variants for k in kinds}
    for v in variants:  # one untimed round each: every connection opened and named
        store = stores[v]
        store.heartbeat(W, [(j.id, j.attempt) for j in held[v]], TTL)
        _, held[v] = store.complete_and_claim(W, [(j.id, j.attempt, None) for j in held[v]], ["default"], batch, TTL)
        (one,) = store.claim(W, ["default"], 1, TTL)
        store.complete(W, [(one.id, one.attempt, None)])
    pids = {v: _backends(f"bench_ending_{v}") for v in variants}
    for v in variants:  # the heartbeat's connection, if it is another
        stores[v].heartbeat(W, [(j.id, j.attempt) for j in held[v]], TTL)
        pids[v] = sorted(set(pids[v]) | set(_backends(f"bench_ending_{v}")))
    try:
        for r in range(rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]  # interleaved, each first in turn
            for v in order:
                store = stores[v]
                c0, t0 = _cpu(pids[v]), time.perf_counter()
                store.heartbeat(W, [(j.id, j.attempt) for j in held[v]], TTL)
                c1, t1 = _cpu(pids[v]), time.perf_counter()
                _, held[v] = store.complete_and_claim(W, [(j.id, j.attempt, None) for j in held[v]],
                                                       ["default"], batch, TTL)
                c2, t2 = _cpu(pids[v]), time.perf_counter()
                (one,) = store.claim(W, ["default"], 1, TTL)
                c3, t3 = _cpu(pids[v]), time.perf_counter()
                store.complete(W, [(one.id, one.attempt, None)])
                c4, t4 = _cpu(pids[v]), time.perf_counter()
                for k, dt, dc in (("heartbeat", t1 - t0, c1 - c0), ("round", t2 - t1, c2 - c1),
                                  ("complete", t4 - t3, c4 - c3)):
                    times[v, k].append(dt)
                    cpu[v, k].append(dc)
        print(f"rounds={rounds} batch={batch} backends={pids} (ms, median [p25-p75])")
        for label, data in (("wall", times), ("backend cpu", cpu)):
            print(label)
            for k in kinds:
                base = statistics.median(data["cte", k])
                for v in variants:
                    xs = sorted(data[v, k])
                    med = statistics.median(xs)
                    q = statistics.quantiles(xs, n=4)
                    print(f"  {k:9} {v:4} {med * 1e3:7.3f} [{q[0] * 1e3:.3f}-{q[2] * 1e3:.3f}]"
                          f"  {100 * (med / base - 1) if base else 0:+5.1f}% vs cte")
    finally:
        for s in stores.values():
            s.destroy()
            s.close()


if __name__ == "__main__":
    main()
