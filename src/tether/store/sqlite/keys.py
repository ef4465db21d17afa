"""Per-key limits on SQLite (issue 44): the claims' ``tether_key_take``.

A claim is one UPDATE whose walk over the queue's index meets its candidates
one by one; each with a limit key asks ``tether_key_take(:round, now, key,
state)`` whether the claim may take it. ``state`` is the ``tether_key_state``
view (migration 0014), read once per statement inside the claim's write
transaction: the patterns, every key's running jobs and recorded starts.
SQLite's one writer means nothing changes between that read and the claim's
update, so each key's room is exact: the best pattern's concurrency less the
key's running jobs, its rate less the key's starts in the window. The claim
cannot see its own updates, so each yes here takes one from the key's room:
no claim takes more of a key than its room. A yes for a row the claim then
does not take (past its LIMIT) leaves the room for the next claim.

One ``KeyRooms`` per connection (a connection serves one thread at a time);
``round`` is a number each claim's parameters carry (``next_round``), so a
new statement starts from a fresh reading of the view.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from typing import Any

from ...key_patterns import best, regex

__all__ = ["KeyRooms", "next_round", "register_key_rooms"]

_rounds = itertools.count(1)


def next_round() -> int:
    """A claim statement's own round number (unique within the process)."""
    return next(_rounds)


class KeyRooms:
    """``tether_key_take`` for one connection."""

    def __init__(self) -> None:
        self._round: Any = None
        self._rooms: dict[str, int] = {}
        self._patterns: list[tuple[int, str, re.Pattern[str]]] = []
        self._limits: dict[str, tuple[int | None, int | None, float | None]] = {}
        self._running: dict[str, int] = {}
        self._starts: dict[str, list[float]] = {}
        self._now = 0.0

    def take(self, round_: Any, now: float, key: str, state: str | None) -> int:
        if state is None:  # no pattern exists
            return 1
        if round_ != self._round:
            self._load(round_, now, state)
        room = self._rooms.get(key)
        if room is None:
            room = self._rooms[key] = self._room(key)
        if room <= 0:
            return 0
        self._rooms[key] = room - 1
        return 1

    def _load(self, round_: Any, now: float, state: str) -> None:
        data = json.loads(state)
        self._round, self._now, self._rooms = round_, float(now), {}
        rows = sorted(data["limits"], key=lambda r: (-r[1], r[0]))
        self._patterns = [(r[1], r[0], regex(r[0])) for r in rows]
        self._limits = {r[0]: (r[2], r[3], r[4]) for r in rows}
        self._running = data["running"] or {}
        self._starts = data["starts"] or {}

    def _room(self, key: str) -> int:
        pattern = best(key, self._patterns)
        if pattern is None:
            return 2**62  # no limit
        concurrency, rate, period = self._limits[pattern]
        room = 2**62
        if concurrency is not None:
            room = min(room, concurrency - self._running.get(key, 0))
        if rate is not None and period is not None:
            since = self._now - period
            room = min(room, rate - sum(1 for t in self._starts.get(key, ()) if t > since))
        return room


def register_key_rooms(conn: sqlite3.Connection) -> None:
    """Give a connection its ``tether_key_take``."""
    conn.create_function("tether_key_take", 4, KeyRooms().take)
