"""Push channels: how a store wakes idle workers (enqueues) and waiters
(finished jobs). Optional: a store without one returns None, and the worker
and ``app.wait`` poll instead. A part of the store interface (``Store``
inherits ``PushChannels``), in a module of its own."""

from __future__ import annotations

import abc
from collections.abc import Callable

__all__ = ["Listener", "PushChannels"]


class Listener(abc.ABC):
    """A push channel that wakes claimers when jobs are enqueued (LISTEN/NOTIFY)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def healthy(self) -> bool:
        """False while the channel is down; the worker then relies on polling."""


class PushChannels:
    """The push hooks of ``Store``; the defaults say "none here"."""

    def listen_finished(self, on_finished: Callable[[str], None]) -> Listener | None:
        """Start a push channel calling ``on_finished(ids)`` when jobs finish
        (``ids``: comma-separated job ids, or ``"*"``: anything may have
        finished, look again); None if the backend has none (``app.wait`` polls)."""
        return None

    def watch_finished(self, job_id: int, seconds: float) -> int | None:
        """Have ``listen_finished`` announce this job, for ``seconds`` at most:
        a token for ``unwatch_finished``; None: no registration needed."""
        return None

    def unwatch_finished(self, token: int) -> None:
        pass

    def listen(self, on_enqueue: Callable[[str], None]) -> Listener | None:
        """Start a push channel calling ``on_enqueue(queue)``; None if the backend has none."""
        return None
