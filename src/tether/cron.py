"""Cron expressions and the ticks a schedule owes: parsing (refused with a
``ConfigError`` that quotes the bad expression or time zone) and the due-tick
rule every backend applies to the database's ``now``.

Parsing and iteration are cronsim's (five fields; six with seconds first);
the ``@hourly``-style nicknames are mapped here, since cronsim has none.
Ticks are computed in the schedule's time zone, so a ``0 3 * * *`` in
Europe/Paris stays at 03:00 local across DST, and returned as UTC instants.
cronsim follows Debian cron on DST days: a local time that does not exist
(02:30 on the spring-forward day) fires at the first instant after the gap
(03:00), and one that exists twice (02:30 on the fall-back day) fires once,
at its first occurrence.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

# zoneinfo and cronsim are imported by what computes ticks: a worker of an app
# without schedules never loads them (issue 47: its start is its imports)

__all__ = ["MAX_CATCH_UP", "Cron", "due_ticks", "parse_cron"]

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: catch_up beyond this would be a storm by another name
MAX_CATCH_UP = 1000
#: at most this many on-time ticks in one round (a one-second schedule over a
#: grace of minutes); the rest are left for the next round, never dropped
MAX_ON_TIME = 1000


@dataclass(frozen=True, slots=True)
class Cron:
    """A validated cron expression in a named time zone."""

    expr: str  # as the user wrote it
    timezone: str
    fields: str  # what cronsim parses (a nickname expanded)

    @property
    def zone(self) -> ZoneInfo:
        return _zone(self.timezone)

    def after(self, instant: datetime) -> Iterator[datetime]:
        """Ticks strictly after ``instant``, as UTC datetimes, oldest first."""
        from cronsim import CronSim

        for tick in CronSim(self.fields, instant.astimezone(self.zone)):
            yield tick.astimezone(UTC)

    def before(self, instant: datetime) -> Iterator[datetime]:
        """Ticks strictly before ``instant``, as UTC datetimes, newest first."""
        from cronsim import CronSim

        for tick in CronSim(self.fields, instant.astimezone(self.zone), reverse=True):
            yield tick.astimezone(UTC)

    def next_after(self, instant: datetime) -> datetime | None:
        return next(self.after(instant), None)


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


@lru_cache(maxsize=1024)
def parse_cron(expr: str, timezone: str = "UTC") -> Cron:
    """A ``Cron``, or ConfigError quoting what is wrong with it."""
    from zoneinfo import ZoneInfoNotFoundError

    from cronsim import CronSim, CronSimError

    if not isinstance(expr, str) or not expr.strip():
        raise ConfigError(f"cron expression must be a non-empty string, got {expr!r}")
    if not isinstance(timezone, str) or not timezone:
        raise ConfigError(f"timezone must be an IANA time zone name such as 'Europe/Paris', got {timezone!r}")
    try:
        _zone(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory, a name too long
        raise ConfigError(f"unknown timezone {timezone!r}: use an IANA name such as 'Europe/Paris' or 'UTC'") from None
    text = " ".join(expr.split())
    fields = NICKNAMES.get(text.lower(), text)
    if fields.startswith("@"):
        raise ConfigError(f"bad cron expression {expr!r}: unknown nickname (known: {', '.join(NICKNAMES)})")
    try:
        CronSim(fields, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError, OverflowError) as exc:
        raise ConfigError(
            f"bad cron expression {expr!r}: {exc} (five fields 'minute hour day month weekday', "
            "six with seconds first, or @hourly/@daily/...)"
        ) from None
    return Cron(expr=expr, timezone=timezone, fields=fields)


def due_ticks(
    cron: Cron, *, after: datetime | None, since: datetime, now: datetime, catch_up: int, grace: float,
) -> list[datetime]:
    """The ticks a schedule owes at ``now`` (the database's clock), oldest first.

    Candidates are the ticks in ``(max(after, since), now]``: ``after`` is the
    last tick already decided (fired or skipped), ``since`` when the schedule's
    cron or time zone last changed (so a change takes effect at the next tick,
    without firing the new expression's past ones). Of those, every tick less
    than ``grace`` seconds old is on time and due; older ones were missed
    (every worker was down), and only the ``catch_up`` most recent of them are
    due: never a storm.
    """
    floor = since if after is None or after < since else after
    if floor >= now:
        return []
    window = max(floor, now - timedelta(seconds=grace))
    on_time: list[datetime] = []
    for tick in cron.after(window):
        if tick > now or len(on_time) >= MAX_ON_TIME:
            break
        on_time.append(tick)
    missed: list[datetime] = []
    if catch_up > 0 and window > floor:
        # Newest first from the window's start; a tick exactly at the start is
        # not in cron.after(window), so look from just after it.
        for tick in cron.before(window + timedelta(microseconds=1)):
            if tick <= floor or len(missed) >= catch_up:
                break
            missed.append(tick)
    return [*reversed(missed), *on_time]
