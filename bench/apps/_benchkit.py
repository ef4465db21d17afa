"""Stdlib-only helpers shared by the per-system apps and clients.

These modules run inside each system's own virtualenv (Python 3.11 or 3.12),
so they import nothing but the standard library and the system under test.

- ``mark_first()``: a worker's handler calls it on every job; the first call in
  a process writes ``$BENCH_MARK_DIR/first-<pid>`` with the wall-clock time, so
  the driver can start its steady-state clock at the first handler, not at
  process spawn (interpreter start-up and imports are not queue throughput).
- ``record(...)``: append one line to ``$BENCH_RECORD`` (latency and recovery
  scenarios); O_APPEND writes of one short line are atomic across processes.
- ``emit(obj)``: the client's JSON answer, one line on stdout, prefixed so the
  driver can find it among the system's own log lines.
"""

from __future__ import annotations

import json
import os
import sys
import time

RESULT_PREFIX = "BENCH-RESULT "

_marked = False
_record_fd: int | None = None


def mark_first() -> None:
    global _marked
    if _marked:
        return
    _marked = True
    d = os.environ.get("BENCH_MARK_DIR")
    if d:
        path = os.path.join(d, f"first-{os.getpid()}")
        with open(path + ".tmp", "w") as f:
            f.write(repr(time.time()))
        os.replace(path + ".tmp", path)


def record(*fields: object) -> None:
    global _record_fd
    if _record_fd is None:
        _record_fd = os.open(os.environ["BENCH_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_record_fd, (" ".join(str(f) for f in fields) + "\n").encode())


def emit(obj: dict) -> None:
    sys.stdout.write(RESULT_PREFIX + json.dumps(obj) + "\n")
    sys.stdout.flush()


def dsn() -> str:
    return os.environ["BENCH_DSN"]


def wait_for_lines(path: str, count: int, timeout: float) -> bool:
    """Wait until ``path`` holds at least ``count`` lines (the latency producer
    waits for the handler of its previous sample, so the queue is idle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, "rb") as f:
                if f.read().count(b"\n") >= count:
                    return True
        except FileNotFoundError:
            pass
        time.sleep(0.0005)
    return False
