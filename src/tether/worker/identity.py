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


def _stat_fields(pid: int) -> list[bytes] | None:
    """``/proc/PID/stat``'s fields from the third on (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return data[data.rfind(b")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None."""
    fields = _stat_fields(pid)
    try:
        return None if fields is None else int(fields[19])  # field 22 overall: starttime
    except (IndexError, ValueError):
        return None


def _is_zombie(pid: int) -> bool:
    """Exited but not yet reaped by its parent (state Z, or X while being
    reaped): it still answers ``kill(pid, 0)`` and keeps its start time, but
    runs nothing. A worker SIGKILLed under a parent that reaps late (or never:
    a container whose PID 1 does not reap) is one."""
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] in (b"Z", b"X")


def process_is(pid: int, proc_start: int | None) -> bool:
    """True if ``pid`` is alive *and* is the same process (same start time) that
    registered; a reused pid belongs to someone else, so its owner is gone, and
    a zombie has exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    if _is_zombie(pid):
        return False
    if proc_start is None:
        return True  # no start time to compare: assume alive (never touch a live sibling)
    now_start = process_start_time(pid)
    return now_start is None or now_start == proc_start
