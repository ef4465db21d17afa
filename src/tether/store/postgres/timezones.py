"""A job's times in UTC on every connection, whatever its session's TimeZone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

__all__ = ["utc_times"]

#: session time zones in which psycopg already reads a timestamptz as UTC
_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Zulu", "Etc/Zulu", "GMT", "Etc/GMT"})


class _UTCText(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        return super().load(data).astimezone(UTC)


class _UTCBinary(TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        return super().load(data).astimezone(UTC)


def utc_times(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Read a job's times in UTC on ``conn`` whatever its session's TimeZone:
    psycopg gives a timestamptz in the session's zone, which is the server's
    default (a distribution's initdb takes the machine's), a role's or
    database's setting, or the client's PGTZ, which libpq sends after, and so
    over, a ``-c TimeZone`` startup option; a transaction pooler passes no
    option at all. The zone is read once per connection, so a session already
    in UTC (the usual case) keeps psycopg's own C loaders, at no cost."""
    if conn.info.parameter_status("TimeZone") not in _UTC_ZONES:
        conn.adapters.register_loader("timestamptz", _UTCText)
        conn.adapters.register_loader("timestamptz", _UTCBinary)
