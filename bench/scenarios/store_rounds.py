"""The client loop that the store-level scenarios share (retention.py,
finish_notify.py): ``threads`` clients each run a worker's usual statement,
``complete_and_claim`` of ``batch`` jobs, until ``seconds`` pass or the
backlog on queue ``bench`` is drained."""

from __future__ import annotations

import threading
import time

from tether.store.postgres.store import PostgresStore


def rounds(store: PostgresStore, threads: int, batch: int, seconds: float, took: list[float]) -> float:
    """Jobs/s over the phase; each round's latency (seconds) appended to ``took``."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        worker = f"bench:{n}"
        held = store.claim(worker, ["bench"], batch, 60.0)
        while time.monotonic() < stop and held:
            sent = time.perf_counter()
            accepted, held = store.complete_and_claim(worker, [(j.id, j.attempt, None) for j in held],
                                                      ["bench"], batch, 60.0)
            took.append(time.perf_counter() - sent)
            done[n] += len(accepted)
        if held:
            store.complete(worker, [(j.id, j.attempt, None) for j in held])

    ts = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    started = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done) / (time.monotonic() - started)
