"""Who a worker is, and whether a predecessor on this host is really gone."""

from __future__ import annotations

import os
import secrets
import socket

__all__ = ["host_name", "make_worker_id", "process_is", "process_start_time"]


def host_name() -> str:
    return socket.gethostname()


def make_worker_id(host: str | None = None, pid: int | None = None) -> str:
    """``hostname-pid-random``: the host names the machine, the pid the process,
    and the random part tells apart two processes that reused one pid."""
    return f"{host or host_name()}-{pid or os.getpid()}-{secrets.token_hex(4)}"


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall: starttime
    except (IndexError, ValueError):
        return None


def process_is(pid: int, proc_start: int | None) -> bool:
    """True if ``pid`` is alive *and* is the same process (same start time) that
    registered; a reused pid belongs to someone else, so its owner is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    if proc_start is None:
        return True  # no start time to compare: assume alive (never touch a live sibling)
    now_start = process_start_time(pid)
    return now_start is None or now_start == proc_start
