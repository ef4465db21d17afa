"""What the finish notification costs on PostgreSQL (issue 20, app.wait).

Every statement that writes attempt rows fires ``attempts_notify_finished``,
which sends one NOTIFY with the finished ids. This measures a worker's hot
path with and without it, in one run, alternating: ``threads`` clients each
loop ``complete_and_claim`` rounds of ``batch`` jobs (the statement a worker
with small claims sends) over a pre-filled backlog, for ``seconds`` per phase;
the trigger is disabled for the "off" phases (ALTER TABLE ... DISABLE
TRIGGER). Reported: jobs/s per phase, the median of each, and the median
round trip of complete_and_claim with and without.

    PYTHONPATH=src python bench/scenarios/finish_notify.py --seconds 3 --rounds 3
"""

from __future__ import annotations

import argparse
import secrets
import statistics

import psycopg
from store_rounds import rounds

from tether.model import NewJob
from tether.store import open_store
from tether.store.postgres.store import PostgresStore


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=200_000)
    a = p.parse_args()
    schema = f"bench_notify_{secrets.token_hex(4)}"
    store = open_store(f"{a.url}?schema={schema}")
    assert isinstance(store, PostgresStore)
    store.migrate()
    try:
        for _ in range(0, a.jobs, 10_000):
            store.enqueue([NewJob(task="t", args_json="{}", queue="bench") for _ in range(10_000)])
        with psycopg.connect(a.url, autocommit=True) as admin:
            admin.execute(f'VACUUM ANALYZE "{schema}".jobs')
            on: list[float] = []
            off: list[float] = []
            lat: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(a.rounds):
                for enabled, into in ((True, on), (False, off)):
                    verb = "ENABLE" if enabled else "DISABLE"
                    admin.execute(f'ALTER TABLE "{schema}".attempts {verb} TRIGGER attempts_notify_finished')
                    rate = rounds(store, a.threads, a.batch, a.seconds, lat[enabled])
                    into.append(rate)
                    print(f"notify {'on ' if enabled else 'off'}: {rate:8.0f} jobs/s", flush=True)
        print(f"median: on {statistics.median(on):.0f} jobs/s, off {statistics.median(off):.0f} jobs/s "
              f"({statistics.median(on) / statistics.median(off):.2f}x); median round: "
              f"on {statistics.median(lat[True]) * 1e3:.2f} ms, off {statistics.median(lat[False]) * 1e3:.2f} ms "
              f"({len(lat[True])} and {len(lat[False])} rounds)")
    finally:
        store.destroy()
        store.close()


if __name__ == "__main__":
    main()
