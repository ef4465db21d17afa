"""Queue control: pausing and resuming a queue, and its global limits, a
mixin of ``Tether`` (app.py stays small). Each is stored in the database, so
it holds for every worker on every machine from its next claim on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .config import check_limits, validate_queue
from .errors import ConfigError
from .key_patterns import check_key_limits
from .model import KeyLimits, Limits, QueueLimits
from .numbers import parse_age

if TYPE_CHECKING:
    from .store import Store

__all__ = ["QueueControl"]


class QueueControl:
    """The queue methods of ``Tether``."""

    if TYPE_CHECKING:
        @property
        def store(self) -> Store: ...

    def pause(self, queue: str) -> None:
        """Pause a queue: from their next claim round on, no worker claims its
        jobs (stored in the database, so for every worker); running jobs finish."""
        self.store.set_paused(validate_queue(queue), True)

    def resume(self, queue: str) -> None:
        """Resume a paused queue (idle workers on PostgreSQL are woken at once)."""
        self.store.set_paused(validate_queue(queue), False)

    def configure_queue(self, queue: str, *, concurrency: int | None = None,
                        rate: tuple[int, float | str] | None = None) -> QueueLimits:
        """Set a queue's global limits, enforced inside the claim statement for
        every worker on every machine: at most ``concurrency`` of its jobs
        running at once, at most ``rate[0]`` started in any ``rate[1]`` seconds
        (a number, or a duration such as ``"1m"``). Each call sets both: one
        left out (None) is lifted. Stored in the database, read from the next
        claim on; returns the limits as stored, with what counts against them."""
        count, period = _rate(rate, f"queue {queue!r}")
        self.store.set_limits(check_limits(QueueLimits(queue, concurrency, count, period)))
        return next((q for q in self.store.queue_limits() if q.queue == queue), QueueLimits(queue))

    def queue_limits(self) -> list[QueueLimits]:
        """Every queue with a limit (``configure_queue``), with its running jobs
        and its starts within the rate window now."""
        return self.store.queue_limits()

    def configure_limit(self, pattern: str, *, concurrency: int | None = None,
                        rate: tuple[int, float | str] | None = None) -> KeyLimits:
        """Set per-key limits for every limit key ``pattern`` matches (``*``:
        any characters), each key its own: at most ``concurrency`` jobs of one
        key running at once, at most ``rate[0]`` of one key started in any
        ``rate[1]`` seconds (a number, or a duration such as ``"1s"``).
        Enforced inside the claim statement for every worker. A key takes the
        limits of the most specific pattern it matches (key_patterns.py); a
        key no pattern matches has none. Each call sets both: one left out is
        lifted, and both left out remove the pattern. Returns the pattern's
        limits as stored, with what counts against them now."""
        count, period = _rate(rate, f"limit {pattern!r}")
        self.store.set_key_limits(check_key_limits(KeyLimits(pattern, concurrency, count, period)))
        return next((k for k in self.store.key_limits() if k.pattern == pattern), KeyLimits(pattern))

    def limits(self) -> Limits:
        """The queues' limits (``configure_queue``) and the key patterns'
        (``configure_limit``), each with what counts against it now."""
        return Limits(queues=self.store.queue_limits(), keys=self.store.key_limits())


def _rate(rate: object, where: str) -> tuple[int | None, float | None]:
    """A ``rate=`` argument as (count, seconds); ConfigError naming ``where``
    unless None or (count, period). The count is checked by the caller."""
    if rate is None:
        return None, None
    if isinstance(rate, tuple) and len(rate) == 2:
        return rate[0], parse_age(rate[1], f"{where}: the rate's period")
    raise ConfigError(f"{where}: rate must be (count, period), e.g. (100, 60) or (100, '1m'); got {rate!r}")
