"""huey's benchmark app: ``SqliteHuey`` on the file in ``BENCH_DSN``
(``sqlite:///PATH``), and a plain ``def`` no-op task, as huey's docs use it.

Workers: ``huey_consumer huey_app.huey -k thread|process -w N``. Each worker
counts the jobs it ran and writes the count to ``$BENCH_MARK_DIR/done-<pid>``
when the consumer shuts it down gracefully (SIGINT): the driver's check that
every job ran.
"""

from __future__ import annotations

import os
import threading

from _benchkit import dsn, mark_first
from huey import SqliteHuey

huey = SqliteHuey("bench", filename=dsn().removeprefix("sqlite:///"))

_done = 0
_lock = threading.Lock()


@huey.task(name="noop")
def noop(i: int = 0) -> None:
    global _done
    mark_first()
    with _lock:  # thread workers share the process's count
        _done += 1


@huey.on_shutdown()
def _write_count() -> None:
    d = os.environ.get("BENCH_MARK_DIR")
    if d:
        # one count per process: its thread workers each write the same total
        with _lock, open(os.path.join(d, f"done-{os.getpid()}"), "w") as f:
            f.write(str(_done))
