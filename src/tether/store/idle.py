"""Whether an idle connection's peer has ended it, checked before each reuse.

A connection a pool keeps between calls can die while it waits: a server
restart, a network reset, a pooler's idle timeout. Written into, it fails, or
the request is lost with no way to tell whether it arrived. An idle
connection is owed nothing, so one whose socket reads as ready holds an EOF,
a reset or the server's goodbye: the HTTP clients (``http/``) drop it, and
the PostgreSQL pools (``postgres/outage.py``) read what came and drop it if
the server ended it. One ``poll`` per reuse, no round trip.
"""

from __future__ import annotations

import select
from typing import Protocol

__all__ = ["ready_to_read"]


class _FileLike(Protocol):
    def fileno(self) -> int: ...


def ready_to_read(f: _FileLike | int) -> bool:
    """True when ``f`` has something to read now (or cannot be polled: closed,
    or past ``select``'s descriptor limit where ``poll`` does not exist)."""
    try:
        if _poll is not None:
            p = _poll()
            p.register(f, _READABLE)
            return bool(p.poll(0))
        return bool(select.select([f], [], [], 0)[0])
    except (OSError, ValueError):
        return True


# chosen once: every pooled connection's reuse asks (every single enqueue)
_poll = getattr(select, "poll", None)
_READABLE = select.POLLIN | select.POLLERR | select.POLLHUP if _poll is not None else 0
