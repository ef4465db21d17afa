"""Failed authentication, throttled: per client address and across all of
them, with exponential back-off (the API server's bearer tokens, the
dashboard's login and its ``/metrics`` bearer token).

- An address may fail ``free`` times; each failure after that makes it wait
  ``base`` seconds, doubled per further failure, at most ``max_wait``. While
  it waits, its requests are answered 429 with ``Retry-After`` and the token
  it presents is not even looked at, so waiting out the back-off is the only
  way to make another guess. Its failures are forgotten ``forget`` seconds
  after its last one, or at once when it authenticates.
- Globally: more than ``global_free`` failures from all addresses within
  ``window`` seconds (many addresses guessing a few times each) make every
  address that fails wait the same way, by the global count. An address that
  has not failed is never held back: a successful login is not slowed, and a
  guesser cannot lock the others out.

Each failure is logged as one line: the face, the address, the count; never
the token that was presented. The table of addresses is bounded.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Throttle"]

log = logging.getLogger("tether.auth")

#: failures an address may make before it must wait
DEFAULT_FREE = 5
#: failures from all addresses within WINDOW before every failing address must wait
DEFAULT_GLOBAL_FREE = 100
#: seconds over which the global failures are counted
DEFAULT_WINDOW = 60.0
#: the first wait, in seconds; it doubles with each further failure
DEFAULT_BASE_WAIT = 1.0
#: the longest wait, in seconds
DEFAULT_MAX_WAIT = 300.0
#: seconds after its last failure that an address's failures are forgotten
DEFAULT_FORGET = 900.0
#: addresses tracked at most (the oldest are dropped first)
MAX_TRACKED = 10_000


@dataclass(slots=True)
class _Failures:
    count: int
    last: float
    until: float


class Throttle:
    def __init__(self, *, free: int = DEFAULT_FREE, global_free: int = DEFAULT_GLOBAL_FREE,
                 window: float = DEFAULT_WINDOW, base_wait: float = DEFAULT_BASE_WAIT,
                 max_wait: float = DEFAULT_MAX_WAIT, forget: float = DEFAULT_FORGET,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.free, self.global_free, self.window = free, global_free, window
        self.base_wait, self.max_wait, self.forget, self.clock = base_wait, max_wait, forget, clock
        self._by_address: dict[str, _Failures] = {}
        #: the times of the latest failures from anywhere (enough of them to reach max_wait)
        self._recent: deque[float] = deque(maxlen=global_free + 64)

    def retry_after(self, address: str) -> int | None:
        """Whole seconds ``address`` must still wait before it may try a token, or None."""
        entry = self._by_address.get(address)
        if entry is None:
            return None
        left = entry.until - self.clock()
        return math.ceil(left) if left > 0 else None

    def failed(self, address: str, face: str) -> None:
        """Record (and log) a failure from ``address`` on ``face``."""
        now = self.clock()
        entry = self._by_address.pop(address, None)  # re-inserted last: the table is oldest-first
        if entry is None or now - entry.last > self.forget:
            entry = _Failures(0, now, now)
        entry.count += 1
        entry.last = now
        self._recent.append(now)
        recent = sum(1 for t in self._recent if now - t <= self.window)
        wait = max(self._wait(entry.count - self.free), self._wait(recent - self.global_free))
        entry.until = now + wait
        self._by_address[address] = entry
        if len(self._by_address) > MAX_TRACKED:
            del self._by_address[next(iter(self._by_address))]
        log.warning("authentication failed on %s from %s (%d from it, %d from all in %gs)%s", face, address,
                    entry.count, recent, self.window, f"; it must wait {wait:g}s" if wait else "")

    def succeeded(self, address: str) -> None:
        if self._by_address:
            self._by_address.pop(address, None)

    def _wait(self, over: int) -> float:
        if over <= 0:
            return 0.0
        return min(self.max_wait, self.base_wait * 2.0 ** min(over - 1, 64))
