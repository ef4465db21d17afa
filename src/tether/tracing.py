"""The hooks tracing plugs into: what ``app.tracing`` must offer.

``tether.otel`` implements them with OpenTelemetry; the app and the worker
runtime call them through these protocols and never import ``otel``, so the
imports go one way (``otel`` -> runtime -> app -> this module). Without
``tether.otel.instrument(app)``, ``app.tracing`` is None and every call site
checks just that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from .model import ClaimedJob, JobId, NewJob

__all__ = ["AttemptTracer", "EnqueueTracer", "Tracer"]


class EnqueueTracer(Protocol):
    """The producer's side: a span around writing new jobs."""

    def enqueue(self, jobs: list[NewJob], write: Callable[[list[NewJob]], list[JobId]]) -> list[JobId]: ...

    async def enqueue_async(self, jobs: list[NewJob],
                            write: Callable[[list[NewJob]], Awaitable[list[JobId]]]) -> list[JobId]: ...


class AttemptTracer(Protocol):
    """The worker's side: one span per attempt, current while its handler runs,
    ended once the attempt's outcome is known."""

    def start_attempt(self, job: ClaimedJob, worker: str) -> Any: ...

    def end_attempt(self, span: Any, outcome: str, error: str | None = None, state: str | None = None) -> None: ...

    def call_async(self, span: Any, fn: Callable[..., Coroutine[Any, Any, Any]], ctx: object,
                   args: dict[str, Any]) -> Coroutine[Any, Any, Any]: ...

    def call_sync(self, span: Any, fn: Callable[..., Any], ctx: object, args: dict[str, Any]) -> Any: ...


class Tracer(EnqueueTracer, AttemptTracer, Protocol):
    """Both sides: the type of ``Tether.tracing``."""
