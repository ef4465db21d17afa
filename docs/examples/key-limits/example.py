"""Per-key limits: the example of docs/how-to/limits.md ("Per-key limits"),
run by tests/test_key_limits_app.py (test_the_docs_example) on SQLite and
PostgreSQL.

    TETHER_DATABASE_URL=sqlite:///example.db python example.py
"""

from __future__ import annotations

import os
import threading
import time

from tether import ConfigError, JobContext, Tether

app = Tether(os.environ.get("TETHER_DATABASE_URL", "sqlite:///example.db"))
lock = threading.Lock()
running: dict[str, int] = {}
peak: dict[str, int] = {}


# --8<-- [start:task]
@app.task(limit_key=lambda shop, **_: f"shop:{shop}")   # keyed from the job's arguments
def call_shop_api(ctx: JobContext, shop: int, order: int) -> None:
    key = f"shop:{shop}"
    with lock:
        running[key] = running.get(key, 0) + 1
        peak[key] = max(peak.get(key, 0), running[key])
    time.sleep(0.05)                                     # the API call
    with lock:
        running[key] -= 1
# --8<-- [end:task]


def main() -> None:
    app.migrate()

    # --8<-- [start:limits]
    app.configure_limit("shop:*", concurrency=2, rate=(10, "1s"))  # each shop its own: 2 at once, 10 a second
    app.configure_limit("shop:1", concurrency=1)                   # the most specific pattern wins

    for order in range(6):
        call_shop_api.enqueue(shop=1, order=order)
        call_shop_api.enqueue(shop=2, order=order)
    call_shop_api.using(limit_key="shop:2").enqueue(shop=2, order=6)  # or a key given per call

    app.run_worker(burst=True, concurrency=8)
    assert peak["shop:1"] <= 1 and peak["shop:2"] <= 2, peak  # never more, whatever the worker's concurrency
    # --8<-- [end:limits]

    # --8<-- [start:show]
    for k in app.limits().keys:
        print(k.pattern, k.concurrency, k.rate_limit, k.rate_period, "starts in the window:", k.started)
    # --8<-- [end:show]

    # --8<-- [start:bad]
    for bad in ({"concurrency": 0}, {"rate": (10, "soon")}):
        try:
            app.configure_limit("shop:*", **bad)      # type: ignore[arg-type]
        except ConfigError as exc:
            print("refused:", exc)                    # and nothing was written
    assert app.limits().keys[0].concurrency == 2
    # --8<-- [end:bad]
    print("key limits: done")


if __name__ == "__main__":
    main()
