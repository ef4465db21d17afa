"""A job's attempts as a small chart (issue 43): one row per attempt, a bar
from its claim to its end (or to now, for the one still running) on a time
axis shared by all of them, coloured by outcome. Numbers only: the template
draws them as an inline SVG (no script, so the strict CSP holds) and writes
every text (worker, error) through autoescaping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..model import Attempt

__all__ = ["LABEL_WIDTH", "ROW_HEIGHT", "WIDTH", "Lane", "Timeline", "timeline"]

#: drawing units of the SVG's viewBox (it scales to the page's width)
WIDTH, LABEL_WIDTH, ROW_HEIGHT = 600, 90, 18
#: the narrowest bar drawn (an attempt of a millisecond stays visible)
MIN_BAR = 2.0


@dataclass(frozen=True, slots=True)
class Lane:
    attempt: Attempt
    outcome: str  # the outcome's name, or "running"
    y: int
    x: float
    w: float
    seconds: float  # how long it ran (so far)


@dataclass(frozen=True, slots=True)
class Timeline:
    lanes: list[Lane]
    width: int
    height: int
    label_width: int
    row_height: int
    start: datetime | None
    end: datetime | None
    seconds: float  # the axis' span


def timeline(attempts: Sequence[Attempt], now: datetime) -> Timeline:
    """The chart of ``attempts`` (oldest first, as ``get_job`` gives them)."""
    if not attempts:
        return Timeline(lanes=[], width=WIDTH, height=0, label_width=LABEL_WIDTH, row_height=ROW_HEIGHT,
                        start=None, end=None, seconds=0.0)
    ends = [a.finished_at or max(now, a.claimed_at) for a in attempts]
    start, end = min(a.claimed_at for a in attempts), max(ends)
    span = max((end - start).total_seconds(), 0.001)
    scale = (WIDTH - LABEL_WIDTH) / span
    lanes = []
    for i, (a, stop) in enumerate(zip(attempts, ends, strict=True)):
        seconds = max((stop - a.claimed_at).total_seconds(), 0.0)
        x = min(LABEL_WIDTH + (a.claimed_at - start).total_seconds() * scale, WIDTH - MIN_BAR)
        w = max(min(seconds * scale, WIDTH - x), MIN_BAR)
        lanes.append(Lane(attempt=a, outcome=str(a.outcome) if a.outcome is not None else "running", y=i * ROW_HEIGHT,
                          x=round(x, 2), w=round(w, 2), seconds=seconds))
    return Timeline(lanes=lanes, width=WIDTH, height=len(lanes) * ROW_HEIGHT, label_width=LABEL_WIDTH,
                    row_height=ROW_HEIGHT, start=start, end=end, seconds=span)
