"""OpenTelemetry tracing (extra ``otel``): ``instrument(app)``.

Enqueue runs in a ``tether.enqueue <task>`` span (kind PRODUCER, a child of
whatever span is current in the producer) whose W3C trace context
(``traceparent``/``tracestate``, through the configured propagator) is stored
in each job's ``trace`` column (``NewJob.trace_json``; not its meta, which is
the user's). A job an older producer enqueued during a rolling deploy has it
in its meta under ``"trace"`` (``META_KEY``) instead, and is read from there
when its ``trace`` is empty. That fallback stays now that meta is the user's
(``.using(meta=...)``, issue 43): it applies only to a job with no trace
column, and only a W3C carrier there (a ``traceparent`` of the right shape)
becomes the parent; a user's own ``"trace"`` key of any other shape starts a
new trace, as a job without context does. Drop it once no producer older
than migration 0011 / 0009 can be running. A worker runs each attempt in a
``tether.job <task>`` span (kind CONSUMER) parented on that context: it starts
when the worker starts the handler, is the current span while the handler
runs (so the handler's own spans are its children, for ``async def`` and
``def`` handlers alike), and ends once the attempt's outcome is written
(succeeded, failed, timed_out, cancelled, released) or the worker learns it
lost the job (lost). Failures set status ERROR with the error text.

Without ``instrument(app)`` none of this runs: ``app.tracing`` is None and
every site in the enqueue path and the worker checks just that.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from ._version import __version__
from .model import ClaimedJob, JobId, NewJob, Outcome

if TYPE_CHECKING:
    from .app import Tether

__all__ = ["META_KEY", "Tracing", "instrument", "uninstrument"]

#: the key in a job's meta where producers before migration 0011 (PostgreSQL)
#: / 0009 (SQLite) kept the trace context: read, never written
META_KEY = "trace"
#: outcomes whose span status is ERROR
_ERRORS = frozenset({Outcome.FAILED.value, Outcome.TIMED_OUT.value, "lost"})


def instrument(app: Tether, *, tracer_provider: TracerProvider | None = None) -> Tracing:
    """Trace ``app``'s enqueues and its workers' attempts. ``tracer_provider``
    defaults to the global one (``opentelemetry.trace.set_tracer_provider``).
    Call it where the app is defined, so producers and workers both get it."""
    app.tracing = Tracing(trace.get_tracer("tether", __version__, tracer_provider=tracer_provider))
    return app.tracing


def uninstrument(app: Tether) -> None:
    app.tracing = None


class Tracing:
    """OpenTelemetry's implementation of ``tether.tracing.Tracer``."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    # -- producer ------------------------------------------------------------------
    def enqueue(self, jobs: list[NewJob], write: Callable[[list[NewJob]], list[JobId]]) -> list[JobId]:
        """Run ``write`` (the store's enqueue) in a producer span whose context
        each job carries in its trace."""
        with self._producer(jobs) as (span, traced):
            return _sent(span, write(traced))

    async def enqueue_async(self, jobs: list[NewJob],
                            write: Callable[[list[NewJob]], Awaitable[list[JobId]]]) -> list[JobId]:
        """``enqueue`` for a coroutine: awaits ``write`` in the producer span."""
        with self._producer(jobs) as (span, traced):
            return _sent(span, await write(traced))

    @contextmanager
    def _producer(self, jobs: list[NewJob]) -> Iterator[tuple[Span, list[NewJob]]]:
        """The current producer span, and the jobs carrying its context."""
        first = jobs[0] if jobs else None
        name = f"tether.enqueue {first.task}" if first is not None else "tether.enqueue"
        with self.tracer.start_as_current_span(name, kind=SpanKind.PRODUCER) as span:
            if first is not None and span.is_recording():
                span.set_attributes({"messaging.system": "tether", "messaging.operation.type": "send",
                                     "messaging.destination.name": first.queue, "tether.task": first.task,
                                     "tether.queue": first.queue, "messaging.batch.message_count": len(jobs)})
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            if carrier:
                trace_json = json.dumps(carrier, separators=(",", ":"))
                jobs = [replace(j, trace_json=trace_json) for j in jobs]
            yield span, jobs

    # -- worker --------------------------------------------------------------------
    def start_attempt(self, job: ClaimedJob, worker: str) -> Span:
        """The attempt's span, parented on the context the producer stored."""
        return self.tracer.start_span(
            f"tether.job {job.task}", context=_extract(job), kind=SpanKind.CONSUMER,
            attributes={"messaging.system": "tether", "messaging.operation.type": "process",
                        "messaging.destination.name": job.queue, "messaging.message.id": str(job.id),
                        "tether.job.id": job.id, "tether.job.attempt": job.attempt, "tether.task": job.task,
                        "tether.queue": job.queue, "tether.worker": worker},
        )

    @staticmethod
    def end_attempt(span: Span, outcome: str, error: str | None = None, state: str | None = None) -> None:
        span.set_attribute("tether.outcome", outcome)
        if state is not None:
            span.set_attribute("tether.job.state", state)
        if outcome in _ERRORS:
            span.set_status(Status(StatusCode.ERROR, error or outcome))
        span.end()

    @staticmethod
    async def call_async(span: Span, fn: Callable[..., Coroutine[Any, Any, Any]], ctx: object,
                         args: dict[str, Any]) -> Any:
        """Await the handler with its attempt span current (in the task's own
        context, so nothing leaks to the loop)."""
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return await fn(ctx, **args)
        except Exception as exc:
            span.record_exception(exc)
            raise
        finally:
            otel_context.detach(token)

    @staticmethod
    def call_sync(span: Span, fn: Callable[..., Any], ctx: object, args: dict[str, Any]) -> Any:
        """Call the handler (on its own thread) with its attempt span current."""
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return fn(ctx, **args)
        except Exception as exc:
            span.record_exception(exc)
            raise
        finally:
            otel_context.detach(token)


def _sent(span: Span, ids: list[JobId]) -> list[JobId]:
    if len(ids) == 1 and span.is_recording():
        span.set_attribute("tether.job.id", ids[0])
    return ids


def _extract(job: ClaimedJob) -> otel_context.Context:
    """The producer's context from the job's trace, or from its meta for a job
    an older producer wrote; an empty one (a new trace) when it has none or it
    is malformed (either may come from any client of a server). Never the
    worker's own current context."""
    carrier: Any = job.trace
    if carrier is None and isinstance(job.meta, dict):
        carrier = job.meta.get(META_KEY)
    if not isinstance(carrier, dict):
        return otel_context.Context()
    clean = {k: v for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str)}
    return propagate.extract(clean, context=otel_context.Context())
