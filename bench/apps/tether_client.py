"""tether's benchmark client: schema set-up, enqueueing and the latency producer.

Run inside tether's bench venv: ``python tether_client.py COMMAND ...``; prints
one ``BENCH-RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from _benchkit import client_parser, emit, latency_loop
from tether_app import app


def setup(args: argparse.Namespace) -> None:
    applied = app.migrate()
    emit({"migrations": applied})


def enqueue(args: argparse.Namespace) -> None:
    task = app.get_task(args.task)
    extra = json.loads(args.args)
    n, batch, s0, warmup = args.n, args.batch, args.start, args.warmup
    # --warmup calls first (the connection, prepared statements, code paths): not timed
    if args.mode == "async":
        clock: list[float] = []

        async def go() -> None:
            for k in range(warmup):
                await task.enqueue_async(i=-1 - k, **extra)
            clock.extend((time.process_time(), time.perf_counter()))
            for k in range(n):
                await task.enqueue_async(i=s0 + k, **extra)
        asyncio.run(go())
        cpu0, t0 = clock
    elif args.mode in ("bulk", "sync"):
        for k in range(warmup):
            task.enqueue(i=-1 - k, **extra)
        cpu0, t0 = time.process_time(), time.perf_counter()
        if args.mode == "bulk":
            for start in range(0, n, batch):
                task.enqueue_many([{"i": s0 + k, **extra} for k in range(start, min(n, start + batch))])
        else:
            for k in range(n):
                task.enqueue(i=s0 + k, **extra)
    else:
        raise SystemExit(f"unknown mode {args.mode}")
    seconds = time.perf_counter() - t0
    emit({"mode": args.mode, "n": n, "batch": batch, "seconds": seconds, "cpu_s": time.process_time() - cpu0})


def latency(args: argparse.Namespace) -> None:
    task = app.get_task("latency")

    async def send(i: int, t: float) -> None:
        task.enqueue(i=i, t=t)  # the sync path, as an application would call it

    asyncio.run(latency_loop(args, send))


def _explain(sql: str, params: dict) -> tuple[str, float | None]:
    """EXPLAIN (ANALYZE, BUFFERS) of one of tether's own statements, rolled back."""
    import psycopg

    store = app.store
    with store.pool.connection() as conn:  # type: ignore[attr-defined]
        try:
            with conn.transaction():
                rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
                raise psycopg.Rollback()
        except psycopg.Rollback:
            pass
    text = "\n".join(r[0] for r in rows)
    ms = None
    for line in text.splitlines():
        if line.strip().startswith("Execution Time:"):
            ms = float(line.split(":")[1].split()[0])
    return text, ms


def _timed(fn, *a, **kw):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    r = fn(*a, **kw)
    return r, 1000 * (time.perf_counter() - t0)


def probe(args: argparse.Namespace) -> None:
    """Claim, complete and reap costs on the current table (history scenario).

    Uses the store seam (internal, like tether's own tests do) to time single
    operations, and EXPLAIN ANALYZE on the same SQL text the store sends."""
    from datetime import timedelta

    store = app.store
    worker = "bench-probe"
    app.get_task("noop").enqueue_many([{"i": k} for k in range(args.backlog)])
    out: dict = {"backlog": args.backlog}
    # the parameters PostgresStore.claim sends (store/postgres/steps.py, claim_steps)
    params = {"worker": worker, "queues": ["default"], "limit": args.claim_batch, "lease_ttl": 30.0, "now": None,
              "done": None}
    out["claim_plan"], out["claim_explain_ms"] = _explain(store.q["claim"], params)  # type: ignore[attr-defined]
    claim_ms, complete_ms = [], []
    for _ in range(args.claims):
        jobs, ms = _timed(store.claim, worker, ["default"], args.claim_batch, 30.0)
        claim_ms.append(ms)
        _, ms = _timed(store.complete, worker, [(j.id, j.attempt, None) for j in jobs])
        complete_ms.append(ms)
    out["claim_ms"], out["complete_ms"] = claim_ms, complete_ms
    reap_idle_ms = [_timed(store.reap, 1000)[1] for _ in range(args.reaps)]
    out["reap_idle_ms"] = reap_idle_ms
    out["reap_idle_plan"], out["reap_idle_explain_ms"] = _explain(
        store.q["reap"], {"limit": 1000, "now": None})  # type: ignore[attr-defined]
    # Lapsed leases: claim some, then reap them with the clock moved past their TTL.
    reap_ms, reaped = [], []
    for k in range(args.reap_rounds):
        store.claim(worker, ["default"], args.expired, 30.0)
        later = store.db_now() + timedelta(seconds=60)
        if k == 0:
            out["reap_plan"], out["reap_explain_ms"] = _explain(
                store.q["reap"], {"limit": 1000, "now": later})  # type: ignore[attr-defined]
        r, ms = _timed(store.reap, 1000, now=later)
        reap_ms.append(ms)
        reaped.append(len(r))
    out["reap_ms"], out["reaped"] = reap_ms, reaped
    emit(out)


def dump_sql(args: argparse.Namespace) -> None:
    """tether's own statements, macros filled (for the pgbench ceiling)."""
    q = app.store.q  # type: ignore[attr-defined]
    emit({name: q[name] for name in args.names})


def _pg_url() -> str:
    return app.dsn.url


def tx_enqueue(args: argparse.Namespace) -> None:
    """Transactions scenario, part 1: one job per transaction, enqueued on the
    caller's own connection (and committed by the caller) against tether's own
    single enqueue (autocommit on tether's pool), in the same process, the
    modes in turn per round; and the same with an application row beside the
    job (the caller's: one commit for both; tether's own: two)."""
    import psycopg

    task = app.get_task("noop")
    caller = psycopg.connect(_pg_url())
    apart = psycopg.connect(_pg_url(), autocommit=True)
    caller.execute("CREATE TABLE IF NOT EXISTS bench_orders (id bigint PRIMARY KEY)")
    caller.commit()
    ids = iter(range(10**9))

    def own(k: int) -> None:
        task.enqueue(i=k)

    def on_caller(k: int) -> None:
        task.using(connection=caller).enqueue(i=k)
        caller.commit()

    def own_plus_row(k: int) -> None:
        apart.execute("INSERT INTO bench_orders (id) VALUES (%s)", (next(ids),))
        task.enqueue(i=k)

    def caller_plus_row(k: int) -> None:
        caller.execute("INSERT INTO bench_orders (id) VALUES (%s)", (next(ids),))
        task.using(connection=caller).enqueue(i=k)
        caller.commit()

    def in_open_tx(k: int) -> None:  # the enqueue call alone; the caller commits every 100, untimed
        task.using(connection=caller).enqueue(i=k)

    modes = {"own": own, "caller": on_caller, "caller_enqueue_only": in_open_tx, "own_plus_row": own_plus_row,
             "caller_plus_row": caller_plus_row}
    for fn in modes.values():  # warm: connections, prepared statements
        for k in range(20):
            fn(-1 - k)
        caller.commit()
    seconds = dict.fromkeys(modes, 0.0)
    cpu = dict.fromkeys(modes, 0.0)
    per_round = max(100, args.n // args.rounds // 100 * 100)
    names = list(modes)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = modes[name]
            for block in range(0, per_round, 100):
                c0, t0 = time.process_time(), time.perf_counter()
                for k in range(block, block + 100):
                    fn(k)
                seconds[name] += time.perf_counter() - t0
                cpu[name] += time.process_time() - c0
                if name == "caller_enqueue_only":
                    caller.commit()
    n = per_round * args.rounds
    caller.close()
    apart.close()
    emit({"n": n, "rounds": args.rounds, "modes": {
        name: {"rate": n / seconds[name], "client_cpu_per_job_ms": 1000 * cpu[name] / n} for name in modes}})


def tx_complete(args: argparse.Namespace) -> None:
    """Transactions scenario, part 2: a worker (in this process) runs n no-op
    jobs completed the plain way (the reporter's batched complete), through an
    empty ctx.transaction() block, and through a block that writes one row;
    each run on an emptied jobs table, timed from the enqueue to the last
    success, the modes in turn per repetition."""
    import threading

    import psycopg

    admin = psycopg.connect(_pg_url(), autocommit=True)
    admin.execute("CREATE TABLE IF NOT EXISTS bench_effects (job_id bigint NOT NULL, attempt int NOT NULL)")
    schema = app.dsn.schema
    out: dict = {"n": args.n, "concurrency": args.concurrency, "runs": []}
    names = ["noop", "tx_noop", "tx_row"]
    for rep in range(args.reps):
        for name in names[rep % 3:] + names[:rep % 3]:
            admin.execute(f'TRUNCATE "{schema}".jobs, "{schema}".attempts, bench_effects')
            admin.execute(f'VACUUM ANALYZE "{schema}".jobs')
            w = app.worker(concurrency=args.concurrency)
            t = threading.Thread(target=lambda w=w: asyncio.run(w.run()), daemon=True)
            t.start()
            time.sleep(1.0)  # started and idle
            c0, t0 = time.process_time(), time.perf_counter()
            task = app.get_task(name)
            for start in range(0, args.n, 1000):
                task.enqueue_many([{"i": k} for k in range(start, min(args.n, start + 1000))])
            while True:
                (done,) = admin.execute(f'SELECT count(*) FROM "{schema}".jobs WHERE state = %s',
                                        ("succeeded",)).fetchone()  # type: ignore[misc]
                if done >= args.n:
                    break
                time.sleep(0.01)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            w.stop()
            t.join(30)
            (rows,) = admin.execute("SELECT count(*) FROM bench_effects").fetchone()  # type: ignore[misc]
            out["runs"].append({"mode": name, "rep": rep, "seconds": seconds, "rate": args.n / seconds,
                                "process_cpu_per_job_ms": 1000 * cpu / args.n, "effect_rows": rows})
    admin.close()
    emit(out)


def main() -> None:
    p, sub = client_parser()
    sub.choices["enqueue"].add_argument("--start", type=int, default=0, help="first job's i")
    sub.choices["enqueue"].add_argument("--warmup", type=int, default=0, help="calls before the clock starts")
    pr = sub.add_parser("probe")
    pr.add_argument("--backlog", type=int, default=2000)
    pr.add_argument("--claims", type=int, default=50)
    pr.add_argument("--claim-batch", type=int, default=10)
    pr.add_argument("--reaps", type=int, default=50)
    pr.add_argument("--expired", type=int, default=100)
    pr.add_argument("--reap-rounds", type=int, default=5)
    d = sub.add_parser("dump-sql")
    d.add_argument("names", nargs="+")
    te = sub.add_parser("tx-enqueue")
    te.add_argument("--n", type=int, default=2000)
    te.add_argument("--rounds", type=int, default=10)
    tc = sub.add_parser("tx-complete")
    tc.add_argument("--n", type=int, default=3000)
    tc.add_argument("--concurrency", type=int, default=10)
    tc.add_argument("--reps", type=int, default=1)
    a = p.parse_args()
    {"setup": setup, "enqueue": enqueue, "latency": latency, "probe": probe, "dump-sql": dump_sql,
     "tx-enqueue": tx_enqueue, "tx-complete": tx_complete}[a.cmd](a)
    app.close()


if __name__ == "__main__":
    main()
