"""Per-key limits on SQLite (issue 44): the claims' ``tether_key_take``.

A claim is one UPDATE whose walk over the queue's index meets its candidates
one by one; each with a limit key asks ``tether_key_take(:round, now, key)``
whether the claim may take it. The first time a statement asks about a key,
this function reads the key's limits and use (queries.sql: ``key_room``) on
the claim's own connection, so inside the claim's write transaction: SQLite's
one writer means nothing changes between that read and the claim's update,
so the key's room is exact: its best pattern's concurrency less its running
jobs, its rate less its starts in the window. The claim cannot see its own
updates, so each yes here takes one from the key's room: no claim takes more
of a key than its room. A yes for a row the claim then does not take (past
its LIMIT) leaves the room for the next claim.

One ``KeyRooms`` per connection (a connection serves one thread at a time);
``round`` is a number each claim's parameters carry (``next_round``), so a
new statement starts afresh. While no pattern exists (one query per
statement says so) every key passes without another.
"""

from __future__ import annotations

import itertools
import sqlite3
from typing import Any

__all__ = ["KeyRooms", "next_round", "register_key_rooms"]

_rounds = itertools.count(1)
#: a key without a limit: never counted down to 0
_UNLIMITED = 2**62


def next_round() -> int:
    """A claim statement's own round number (unique within the process)."""
    return next(_rounds)


class KeyRooms:
    """``tether_key_take`` for one connection."""

    def __init__(self, conn: sqlite3.Connection, q: dict[str, str]) -> None:
        self._conn = conn
        self._exist_sql, self._room_sql = q["key_limits_exist"], q["key_room"]
        self._round: Any = None
        self._any = False
        self._rooms: dict[str, int] = {}

    def take(self, round_: Any, now: float, key: str) -> int:
        if round_ != self._round:
            self._round, self._rooms = round_, {}
            self._any = bool(self._conn.execute(self._exist_sql).fetchone()[0])
        if not self._any:
            return 1
        room = self._rooms.get(key)
        if room is None:
            room = self._rooms[key] = self._room(key, now)
        if room <= 0:
            return 0
        self._rooms[key] = room - 1
        return 1

    def _room(self, key: str, now: float) -> int:
        row = self._conn.execute(self._room_sql, {"key": key, "now": now}).fetchone()
        if row is None:
            return _UNLIMITED
        concurrency, rate, running, started = row
        room = _UNLIMITED
        if concurrency is not None:
            room = min(room, concurrency - running)
        if rate is not None:
            room = min(room, rate - started)
        return int(room)


def register_key_rooms(conn: sqlite3.Connection, q: dict[str, str]) -> None:
    """Give a connection its ``tether_key_take`` (``q``: the store's queries)."""
    conn.create_function("tether_key_take", 3, KeyRooms(conn, q).take)
