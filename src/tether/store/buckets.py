"""Time buckets for ``Store.throughput``, shared by every backend.

Buckets are aligned to the Unix epoch: a 60-second bucket starts on the
minute (UTC), so two calls a few seconds apart agree on every full bucket.
The window is the ``buckets`` consecutive buckets ending with the one ``now``
falls in. The SQL groups the attempts of the window by bucket index; the
buckets without any attempt are filled in here, with zeros.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import ConfigError
from ..model import Outcome, Throughput

__all__ = ["MAX_BUCKETS", "MAX_BUCKET_SECONDS", "Buckets", "Window", "check_sizes", "fill", "window"]

#: what ``Store.throughput`` returns: every bucket of the window, oldest first
Buckets = list[Throughput]
#: a day of minutes: the most buckets one call may ask for
MAX_BUCKETS = 1440
#: the widest bucket: a day
MAX_BUCKET_SECONDS = 86_400
#: the epoch seconds Python's datetime can hold (years 1 to 9999)
_FIRST = datetime(1, 1, 1, tzinfo=UTC).timestamp()
_LAST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


@dataclass(frozen=True, slots=True)
class Window:
    """``buckets`` buckets of ``seconds``, the first starting at epoch second ``start``."""

    start: int
    buckets: int
    seconds: int

    @property
    def end(self) -> int:
        """The epoch second the last bucket ends (exclusive)."""
        return self.start + self.buckets * self.seconds

    def at(self, epoch: int) -> datetime:
        return datetime.fromtimestamp(epoch, tz=UTC)


def check_sizes(buckets: int, bucket_seconds: int) -> None:
    if not 1 <= buckets <= MAX_BUCKETS:
        raise ConfigError(f"throughput: buckets must be 1 to {MAX_BUCKETS}, got {buckets}")
    if not 1 <= bucket_seconds <= MAX_BUCKET_SECONDS:
        raise ConfigError(f"throughput: bucket_seconds must be 1 to {MAX_BUCKET_SECONDS}, got {bucket_seconds}")


def window(now: datetime, buckets: int, bucket_seconds: int) -> Window:
    """The window ending with the bucket ``now`` falls in; ConfigError for
    sizes out of bounds or a window outside the years 1 to 9999."""
    check_sizes(buckets, bucket_seconds)
    last = math.floor(now.timestamp() / bucket_seconds) * bucket_seconds
    w = Window(last - (buckets - 1) * bucket_seconds, buckets, bucket_seconds)
    if w.start < _FIRST or w.end > _LAST:
        raise ConfigError(f"throughput: a window of {buckets} x {bucket_seconds} s ending at {now.isoformat()} "
                          "falls outside the years 1 to 9999")
    return w


def fill(w: Window, rows: Iterable[tuple[Any, Any, Any]]) -> Buckets:
    """Every bucket of ``w``, oldest first, from ``(bucket index, outcome, count)`` rows."""
    counts = [dict.fromkeys(Outcome, 0) for _ in range(w.buckets)]
    for index, outcome, n in rows:
        counts[int(index)][Outcome(outcome)] += int(n)
    return [Throughput(start=w.at(w.start + i * w.seconds), seconds=w.seconds, counts=c)
            for i, c in enumerate(counts)]
