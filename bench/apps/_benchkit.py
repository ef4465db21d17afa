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
- ``client_parser()`` and ``latency_loop()``: the command line and the latency
  sampling every client shares; each client supplies only how its system
  enqueues.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

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


def client_parser(*, setup_concurrency: bool = False) -> tuple[argparse.ArgumentParser, Any]:
    """The command line every system's client shares: ``setup``, ``enqueue``
    and ``latency``. Returns the parser and its subparsers, so a client can add
    commands of its own."""
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    if setup_concurrency:
        s.add_argument("--concurrency", type=int, default=10)
    e = sub.add_parser("enqueue")
    e.add_argument("--mode", choices=["bulk", "sync", "async"], required=True)
    e.add_argument("--n", type=int, required=True)
    e.add_argument("--batch", type=int, default=1000)
    e.add_argument("--task", default="noop")
    e.add_argument("--args", default="{}")
    la = sub.add_parser("latency")
    la.add_argument("--samples", type=int, default=100)
    la.add_argument("--gap", type=float, default=0.1)
    la.add_argument("--timeout", type=float, default=15.0)
    return p, sub


async def latency_loop(args: argparse.Namespace, send: Callable[[int, float], Awaitable[object]]) -> None:
    """Enqueue one ``latency`` job at a time on an idle queue and emit when each
    was sent; the handlers record when they started. ``send(i, t)`` enqueues
    job ``i`` with its send time ``t`` the system's own way. Sample -1 warms the
    connection and the worker and is not counted."""
    path = os.environ["BENCH_RECORD"]
    await send(-1, time.time())
    wait_for_lines(path, 1, 30)
    sent = []
    for i in range(args.samples):
        time.sleep(args.gap * (0.5 + random.random()))
        t_before = time.time()
        await send(i, t_before)
        t_after = time.time()
        sent.append((i, t_before, t_after))
        if not wait_for_lines(path, i + 2, args.timeout):
            break
    emit({"sent": sent})
