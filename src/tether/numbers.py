"""Whole numbers that come from outside (a URL path or query string, a form
field, a cookie, a command-line argument), read one way everywhere.

``str.isdigit()`` followed by ``int()`` is not that way: ``isdigit`` is true
for "²" (which ``int`` then refuses with a ValueError nobody caught: a 500),
and ``int`` reads "٣" (ARABIC-INDIC DIGIT THREE) as 3, "1_000" as 1000 and
" 7 " as 7. Here a number is ASCII digits only, with at most one leading "-"
where negatives are allowed, at most ``MAX_DIGITS`` of them (so no caller
turns a megabyte of digits into an int), and within the range the caller
names; anything else raises ``BadNumber`` (a ``ValueError``) with a message
fit to show to whoever sent it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .errors import ConfigError

__all__ = ["INT64_MAX", "INT64_MIN", "MAX_DIGITS", "UNITS", "BadNumber", "parse_age", "parse_int", "parse_job_id"]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
#: digits enough for any 64-bit value; a longer string is refused before any conversion
MAX_DIGITS = 19

_UNSIGNED = re.compile(r"[0-9]+\Z")
_SIGNED = re.compile(r"-?[0-9]+\Z")


class BadNumber(ValueError):
    """A number from outside that is not ASCII digits within its range."""


def parse_int(text: str, what: str, *, lo: int = 0, hi: int = INT64_MAX) -> int:
    """``text`` as an int in ``lo..hi``: ASCII digits only (a "-" first when
    ``lo`` is negative), no spaces, signs, underscores or other scripts'
    digits. ``what`` names the value in the error."""
    pattern = _SIGNED if lo < 0 else _UNSIGNED
    if not isinstance(text, str) or not pattern.match(text) or len(text.lstrip("-")) > MAX_DIGITS:
        shown = repr(text[:40] + ("..." if len(text) > 40 else "")) if isinstance(text, str) else type(text).__name__
        sign = "an optional '-' then " if lo < 0 else ""
        raise BadNumber(f"{what} must be a whole number ({sign}ASCII digits 0-9), got {shown}")
    value = int(text)
    if not lo <= value <= hi:
        raise BadNumber(f"{what} must be between {lo} and {hi}, got {value}")
    return value


def parse_job_id(text: str, what: str = "job id", *, hi: int = INT64_MAX) -> int:
    """A job id: 1 to ``hi`` (a 64-bit column's largest by default)."""
    return parse_int(text, what, lo=1, hi=hi)


#: seconds in each unit a duration may name (parse_age)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")  # no unit: seconds, as a number is


def parse_age(value: object, what: str = "age") -> float:
    """Seconds from ``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"``, a number of
    seconds (``3600`` or ``"3600"``), or a ``timedelta``; ConfigError naming
    ``what`` otherwise."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _AGE.fullmatch(value.lower())):
        seconds = float(m.group(1)) * UNITS[m.group(2) or "s"]
    else:
        raise ConfigError(f"{what} must be a duration such as '7d', '12h', '30m', '90s' or '2w', a number of "
                          f"seconds, or a timedelta; got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{what} must be zero or more seconds, got {value!r}")
    return seconds
