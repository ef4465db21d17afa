"""Plain-text pieces every face shows the same way (the terminal and the
dashboard): times in local time, ages, the order of states, and queue limits;
and job data made safe to print on a terminal."""

from __future__ import annotations

import re
from datetime import datetime

from .model import JobState, KeyLimits, QueueLimits
from .naming import C0_CONTROLS, OTHER_CONTROLS

__all__ = ["STATE_ORDER", "fmt_age", "fmt_clock", "fmt_concurrency", "fmt_limits", "fmt_rate", "fmt_rel",
           "fmt_seconds", "fmt_time", "json_visible", "visible"]

#: the states in the order every listing shows them (JobState's own)
STATE_ORDER = list(JobState)


def fmt_time(dt: datetime | None) -> str:
    if dt is None:
        return "-"
    return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def fmt_clock(dt: datetime) -> str:
    """Hours and minutes, local time: 14:05."""
    return dt.astimezone().strftime("%H:%M")


def fmt_age(seconds: float) -> str:
    """3.2s, 4m05s, 2h03m, 3d04h."""
    s = abs(seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def fmt_rel(dt: datetime | None, now: datetime) -> str:
    if dt is None:
        return "-"
    delta = (dt - now).total_seconds()
    if abs(delta) < 0.05:  # rounds to 0.0s: neither "in" nor "ago" says it
        return "now"
    return f"in {fmt_age(delta)}" if delta > 0 else f"{fmt_age(delta)} ago"


def fmt_concurrency(limits: QueueLimits) -> str:
    """``concurrency 3/5 running`` (its jobs running / the limit); "" without one."""
    return "" if limits.concurrency is None else f"concurrency {limits.running}/{limits.concurrency} running"


def fmt_rate(limits: QueueLimits) -> str:
    """``rate 37/100 per 60s`` (started in the window / the limit); "" without one."""
    if limits.rate_limit is None or limits.rate_period is None:
        return ""
    return f"rate {limits.started}/{limits.rate_limit} per {fmt_seconds(limits.rate_period)}s"


def fmt_seconds(seconds: float) -> str:
    """A period as a plain number of seconds that reads back: 60, 90.5, 86400."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def fmt_limits(limits: QueueLimits) -> str:
    """A queue's limits and what counts against them now:
    ``concurrency 3/5 running, rate 37/100 per 60s``; ``no limits`` without any."""
    return ", ".join(part for part in (fmt_concurrency(limits), fmt_rate(limits)) if part) or "no limits"


def fmt_key_limits(limits: KeyLimits) -> str:
    """A key pattern's limits, each key's own, and its use now over the keys
    that take it: ``concurrency 3 per key, rate 10 per 1s per key; 2 keys in
    use, 4 running (busiest 2), 6 started in the window``."""
    parts = []
    if limits.concurrency is not None:
        parts.append(f"concurrency {limits.concurrency} per key")
    if limits.rate_limit is not None and limits.rate_period is not None:
        parts.append(f"rate {limits.rate_limit} per {fmt_seconds(limits.rate_period)}s per key")
    use = f"{limits.keys} key{'' if limits.keys == 1 else 's'} in use, {limits.running} running"
    if limits.running:
        use += f" (busiest {limits.busiest})"
    if limits.rate_limit is not None:
        use += f", {limits.started} started in the window"
    return f"{', '.join(parts) or 'no limits'}; {use}"


#: what steers a terminal or reorders what it shows (naming.C0_CONTROLS, OTHER_CONTROLS)
_CONTROL = re.compile(f"[{C0_CONTROLS}{OTHER_CONTROLS}]")
#: the same less C0, which JSON text escapes itself (and whose newlines indent it)
_JSON_CONTROL = re.compile(f"[{OTHER_CONTROLS}]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, lines: bool = False) -> str:
    """``text`` (job data: a task name, an error, a progress message) fit for a
    terminal: each control character shown as its escape (ESC as ``\\x1b``), so
    that no job can move the cursor, retitle the window or clear the screen.
    ``lines`` keeps newlines and tabs, for text shown over several lines."""
    def escape(m: re.Match[str]) -> str:
        return m[0] if lines and m[0] in "\n\t" else _escape(m[0])

    return _CONTROL.sub(escape, str(text))


def json_visible(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with the controls JSON
    leaves raw (DEL, C1, the bidi overrides) escaped as ``\\uXXXX``: still the same
    JSON, safe on a terminal. They can stand only inside strings, where the
    escape means the same character."""
    return _JSON_CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
