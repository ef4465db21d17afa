"""How the store's PostgreSQL connections read a job's times: in UTC, whatever
the session's TimeZone, and a time past Python's year 9999 as ``datetime.max``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.adapt import AdaptersMap, Buffer
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

from ..rows import DATETIME_MAX, DATETIME_MIN

__all__ = ["ADAPTERS", "utc_times"]


def _past_python(exc: psycopg.DataError) -> datetime:
    """The datetime a timestamptz outside Python's years 1 to 9999 reads as
    (psycopg's loaders refuse it: "timestamp too large"), or ``exc`` again."""
    if "too large" in str(exc):
        return DATETIME_MAX
    if "too small" in str(exc):
        return DATETIME_MIN
    raise exc


class _Clamped:
    """A run_at past year 9999 (PostgreSQL holds up to 294276) was written by
    a ``delay`` of 1e12 seconds before delays were bounded (config.MAX_DELAY):
    read as ``DATETIME_MAX``, rather than fail every listing of its row, as
    SQLite's epoch_to_dt does. Mixed into psycopg's text and binary loaders."""

    def load(self, data: Buffer) -> datetime:
        try:
            return super().load(data)  # type: ignore[misc, no-any-return]
        except psycopg.DataError as exc:
            return _past_python(exc)


class _Timestamptz(_Clamped, TimestamptzLoader):
    pass


class _TimestamptzBinary(_Clamped, TimestamptzBinaryLoader):
    pass


#: psycopg's adapters, with the clamped timestamptz loaders: the store's own
#: connections, except the worker's rounds (connect.py), are opened with them
#: (``context=``); the caller's own connections (``connection=``) keep theirs
ADAPTERS = AdaptersMap(psycopg.adapters)
ADAPTERS.register_loader("timestamptz", _Timestamptz)
ADAPTERS.register_loader("timestamptz", _TimestamptzBinary)


#: session time zones in which psycopg already reads a timestamptz as UTC
_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Zulu", "Etc/Zulu", "GMT", "Etc/GMT"})


class _InUTC:
    """A loader's datetime in UTC (mixed in above a clamped loader)."""

    def load(self, data: Buffer) -> datetime:
        return super().load(data).astimezone(UTC)  # type: ignore[misc, no-any-return]


class _UTCText(_InUTC, _Timestamptz):
    pass


class _UTCBinary(_InUTC, _TimestamptzBinary):
    pass


def utc_times(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Read a job's times in UTC on ``conn`` whatever its session's TimeZone:
    psycopg gives a timestamptz in the session's zone, which is the server's
    default (a distribution's initdb takes the machine's), a role's or
    database's setting, or the client's PGTZ, which libpq sends after, and so
    over, a ``-c TimeZone`` startup option; a transaction pooler passes no
    option at all. The zone is read once per connection, so a session already
    in UTC (the usual case) keeps the loaders it has, at no cost."""
    if conn.info.parameter_status("TimeZone") not in _UTC_ZONES:
        conn.adapters.register_loader("timestamptz", _UTCText)
        conn.adapters.register_loader("timestamptz", _UTCBinary)
