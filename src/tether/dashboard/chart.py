"""The overview's throughput chart: ``Store.throughput`` buckets turned into
the numbers an inline SVG bar chart and its text summary need (the template
draws them; no script, so the strict CSP holds).

Each bar stacks the attempts that succeeded under those that failed; failed
counts every attempt that ended badly (failed, timed out, or recovered after
its worker's lease lapsed). Cancelled and released attempts are in the
summary, not the bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..model import Attempt, Outcome, Throughput

__all__ = ["BAR_GAP", "BAR_WIDTH", "FAILED", "HEIGHT", "Bar", "Chart", "Span", "chart", "timeline"]

#: the outcomes a bar's failed part counts (Outcome.failure)
FAILED = tuple(o for o in Outcome if o.failure)
#: drawing units of the SVG's viewBox (it scales to the page's width)
BAR_WIDTH, BAR_GAP, HEIGHT = 8, 2, 100


@dataclass(frozen=True, slots=True)
class Bar:
    start: datetime
    succeeded: int
    failed: int
    x: int
    ok_y: float  # the succeeded part, from the baseline up
    ok_h: float
    bad_y: float  # the failed part, on top of it
    bad_h: float


@dataclass(frozen=True, slots=True)
class Chart:
    bars: list[Bar]
    bar_width: int
    width: int
    height: int
    peak: int  # the tallest bar's attempts
    seconds: int  # one bar's span
    last: Bar | None  # the newest complete bucket: "now"
    totals: dict[Outcome, int]  # over the whole window
    failed_total: int


def _bad(t: Throughput) -> int:
    return sum(t.counts[o] for o in FAILED)


def chart(buckets: Sequence[Throughput]) -> Chart:
    peak = max((t.counts[Outcome.SUCCEEDED] + _bad(t) for t in buckets), default=0)
    scale = HEIGHT / max(peak, 1)
    bars = []
    for i, t in enumerate(buckets):
        ok, bad = t.counts[Outcome.SUCCEEDED], _bad(t)
        ok_h, bad_h = round(ok * scale, 2), round(bad * scale, 2)
        bars.append(Bar(start=t.start, succeeded=ok, failed=bad, x=i * (BAR_WIDTH + BAR_GAP),
                        ok_y=round(HEIGHT - ok_h, 2), ok_h=ok_h, bad_y=round(HEIGHT - ok_h - bad_h, 2), bad_h=bad_h))
    totals = {o: sum(t.counts[o] for t in buckets) for o in Outcome}
    return Chart(bars=bars, bar_width=BAR_WIDTH, width=len(bars) * (BAR_WIDTH + BAR_GAP) - BAR_GAP, height=HEIGHT, peak=peak,
                 seconds=buckets[0].seconds if buckets else 60,
                 last=bars[-2] if len(bars) >= 2 else None,  # the last bar is the minute still running
                 totals=totals, failed_total=sum(totals[o] for o in FAILED))


#: the attempts timeline's drawing units: its width, and each attempt's row
TIMELINE_WIDTH, ROW = 600, 14


@dataclass(frozen=True, slots=True)
class Span:
    """One attempt on a job page's timeline (issue 43): from its claim to its
    end (or now, while it runs), on one time axis for all the attempts shown."""

    attempt: int
    outcome: str  # its outcome, or "running"
    x: float
    y: int
    width: float
    seconds: float


def timeline(attempts: Sequence[Attempt], now: datetime) -> list[Span]:
    if not attempts:
        return []
    start = min(a.claimed_at for a in attempts)
    end = max((a.finished_at or now) for a in attempts)
    scale = TIMELINE_WIDTH / max((end - start).total_seconds(), 1e-3)
    out = []
    for row, a in enumerate(attempts):
        took = max(((a.finished_at or now) - a.claimed_at).total_seconds(), 0.0)
        out.append(Span(attempt=a.attempt, outcome=str(a.outcome or "running"), y=row * ROW,
                        x=round((a.claimed_at - start).total_seconds() * scale, 2),
                        width=max(round(took * scale, 2), 2.0), seconds=took))
    return out
