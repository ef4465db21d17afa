"""Plain-text pieces every face shows the same way (the terminal and the
dashboard): times in local time, ages, and the order of states."""

from __future__ import annotations

from datetime import datetime

from .model import JobState

__all__ = ["STATE_ORDER", "fmt_age", "fmt_clock", "fmt_rel", "fmt_time"]

STATE_ORDER = [JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED]


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
    return f"in {fmt_age(delta)}" if delta > 0.05 else f"{fmt_age(delta)} ago"
