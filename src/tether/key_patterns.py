"""Limit-key patterns (issue 44): ``app.configure_limit("shop:*", ...)``.

A pattern is a job's ``limit_key`` with ``*`` standing for any run of
characters (none too); every other character is itself (``?``, ``%``, ``_``,
``[`` included). Each key a pattern matches gets the pattern's limits of its
own: "shop:*" with concurrency 3 lets shop:7 and shop:8 run three each.

A key matched by several patterns takes the most specific one's: the one
with the most characters that are not ``*``; then the one with fewer ``*``;
then the first in code-point order. So an exact pattern ("shop:7") beats
every glob that matches that key ("shop:*", "shop:7*" ties it on characters
and loses on stars). A key no pattern matches has no limit. The backends
match in SQL (PostgreSQL's LIKE, SQLite's GLOB, from ``like`` and ``glob``
here), both ranking by ``rank`` and then the pattern in code-point order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .config import check_limit_numbers
from .errors import ConfigError
from .model import KeyLimits
from .payload import MAX_KEY_BYTES, check_key, is_storable

__all__ = ["check_key_limits", "check_limit_key", "check_pattern", "glob", "key_limit_params", "key_of_args", "like",
           "rank"]


def check_pattern(pattern: object) -> str:
    """The pattern, or ConfigError saying what is wrong with it."""
    if not isinstance(pattern, str):
        raise ConfigError(f"a limit-key pattern must be a string such as 'shop:*', got {pattern!r}")
    if not pattern.strip():
        raise ConfigError(f"a limit-key pattern must not be empty or blank, got {pattern!r}")
    if not is_storable(pattern):
        raise ConfigError(f"a limit-key pattern must not hold a NUL or a lone surrogate, got {pattern!r}")
    if len(pattern.encode()) > MAX_KEY_BYTES:
        raise ConfigError(f"a limit-key pattern must be at most {MAX_KEY_BYTES} bytes of UTF-8")
    if any(ord(c) < 32 or ord(c) == 127 for c in pattern):
        raise ConfigError(f"a limit-key pattern must not hold control characters, got {pattern!r}")
    return pattern


def check_key_limits(limits: KeyLimits) -> KeyLimits:
    """A pattern's limits as ``app.configure_limit`` stores them, checked:
    whole numbers >= 1, a rate with both a count and a positive period in
    seconds. ConfigError naming the pattern otherwise. Both None: the
    pattern is removed."""
    p = check_pattern(limits.pattern)
    period = check_limit_numbers(f"limit {p!r}", limits.concurrency, limits.rate_limit, limits.rate_period)
    return KeyLimits(p, limits.concurrency, limits.rate_limit, period)


def rank(pattern: str) -> int:
    """The pattern's specificity, higher first: its characters that are not
    ``*``, then fewer stars (ties after that go to code-point order)."""
    stars = pattern.count("*")
    return (len(pattern) - stars) * 65536 - stars


def like(pattern: str) -> str:
    """The pattern as a LIKE pattern with PostgreSQL's default escape (backslash)."""
    return (pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")).replace("*", "%")


def glob(pattern: str) -> str:
    """The pattern as an SQLite GLOB (case-sensitive): ``?`` and ``[`` are
    bracketed to stand for themselves; ``*`` stays the wildcard."""
    return pattern.replace("[", "[[]").replace("?", "[?]")


def key_limit_params(limits: KeyLimits, matcher: Callable[[str], str]) -> dict[str, Any]:
    """A pattern's checked limits as the backends' set_key_limits parameters
    (``matcher``: ``like`` or ``glob``, the backend's own match)."""
    lim = check_key_limits(limits)
    return {"pattern": lim.pattern, "matcher": matcher(lim.pattern), "rank": rank(lim.pattern),
            "concurrency": lim.concurrency, "rate_limit": lim.rate_limit, "rate_period": lim.rate_period}


def check_limit_key(where: str, key: object) -> None:
    """A ``limit_key`` option: None, a key (``check_key``) or a callable of the job's args."""
    if not callable(key):
        check_key(where, "limit_key", key)


def key_of_args(where: str, key_of: Callable[..., Any], args: dict[str, Any]) -> str:
    """A job's limit key from its task's callable, called with the job's args
    on the producer at enqueue. Its exception, or a result that is no key, is
    a ConfigError: the caller enqueues nothing."""
    try:
        key = key_of(**args)
    except Exception as exc:
        raise ConfigError(f"{where}: its limit_key callable raised {type(exc).__name__}: {exc} "
                          "(nothing was enqueued)") from exc
    if not isinstance(key, str):
        raise ConfigError(f"{where}: its limit_key callable returned {key!r}, not a key string "
                          "(nothing was enqueued)")
    check_key(where, "limit_key (its callable's result)", key)
    return key
