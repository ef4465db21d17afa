"""The I6 check for a chaos run: every tick of a schedule fired at most once,
and at least once while a healthy worker existed (within one reaper interval).

Pure: the driver hands in what the database holds (each decided tick and the
job it made, from ``schedule_ticks`` and ``jobs``), the ticks the cron owed
over the run, and the wall-clock windows in which at least one worker was
healthy (running, not stopped, not cut off, the database up). Times are epoch
seconds; database times are the database's clock, on the driver's machine.

``tether chaos`` calls it through ``collect.schedule_invariant``: its
workers' app declares a one-second schedule, so every worker runs a scheduler.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ..cron import parse_cron
from .checker import Invariant

__all__ = ["TITLE", "TickRow", "check_schedule", "expected_ticks"]

TITLE = ("schedules: every tick fired at most once, and at least once while a healthy worker existed "
         "(within one reaper interval)")


@dataclass(frozen=True, slots=True)
class TickRow:
    """A tick the database decided: the job it made (None: skipped, overlap=False)."""

    tick: float
    job_id: int | None
    created_at: float | None  # the job's created_at: when the tick fired


def expected_ticks(cron: str, timezone: str, start: float, end: float) -> list[float]:
    """The ticks of ``cron`` in ``(start, end]``."""
    out: list[float] = []
    for tick in parse_cron(cron, timezone).after(datetime.fromtimestamp(start, UTC)):
        if tick.timestamp() > end:
            break
        out.append(tick.timestamp())
    return out


def _covered(t0: float, t1: float, healthy: Sequence[tuple[float, float]]) -> bool:
    """Whether at least one worker was healthy throughout [t0, t1] (windows may overlap)."""
    at = t0
    for start, end in sorted(healthy):
        if start > at:
            return False
        at = max(at, end)
        if at >= t1:
            return True
    return at >= t1


def check_schedule(
    schedule: str, expected: Iterable[float], decided: Iterable[TickRow], *,
    healthy: Sequence[tuple[float, float]], bound: float, slack: float = 0.5,
) -> Invariant:
    """I6 for one schedule. A tick is owed when some worker was healthy from
    the tick until ``bound`` (the reaper interval) after it: it must have made
    a job (or been skipped) no later than ``bound + slack`` after the tick.
    Any tick with two jobs, owed or not, is a violation."""
    inv = Invariant("I6", TITLE)
    rows = list(decided)
    jobs = Counter(r.tick for r in rows if r.job_id is not None)
    for tick, n in sorted(jobs.items()):
        inv.checked += 1
        if n > 1:
            inv.violations.append(f"{schedule}: tick {_iso(tick)} fired {n} times")
    by_tick = {r.tick: r for r in rows}
    for tick in expected:
        if not _covered(tick, tick + bound, healthy):
            continue
        inv.checked += 1
        row = by_tick.get(tick)
        if row is None:
            inv.violations.append(f"{schedule}: tick {_iso(tick)} missed while a healthy worker existed")
        elif row.job_id is not None and row.created_at is not None and row.created_at - tick > bound + slack:
            inv.violations.append(f"{schedule}: tick {_iso(tick)} fired {row.created_at - tick:.2f} s late "
                                  f"(bound {bound:g} s)")
    return inv


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()
