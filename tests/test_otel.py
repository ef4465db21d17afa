"""OpenTelemetry tracing on both backends, with a real worker and the real SDK
(spans collected by its InMemorySpanExporter): trace context travels in the
job's trace column from the enqueueing code to the attempt span, the handler's spans
are the attempt span's children, and every attempt gets one span."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tether import JobContext, JobState, Tether
from tether.model import NewJob
from tether.otel import META_KEY, instrument

from .conftest import TEST_TOKEN, served
from .test_worker import FAST, is_final, running, wait_job


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def finished(exporter: InMemorySpanExporter, name: str, count: int = 1, timeout: float = 10) -> list[ReadableSpan]:
    """The ended spans called ``name``, once there are ``count`` of them (an
    attempt's span ends just after its outcome is written)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [s for s in exporter.get_finished_spans() if s.name == name]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            names = [s.name for s in exporter.get_finished_spans()]
            raise AssertionError(f"{count} x {name!r} not ended in {timeout}s; ended: {names}")
        time.sleep(0.02)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_attempt_span_continues_the_producers_trace(make_app: Callable[..., Tether], spans: tuple[
        TracerProvider, InMemorySpanExporter], kind: str) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    app = make_app(**FAST)
    instrument(app, tracer_provider=provider)

    def work(ctx: JobContext, n: int) -> int:
        with tracer.start_as_current_span("inside handler"):
            return n * 2

    async def work_async(ctx: JobContext, n: int) -> int:
        await asyncio.sleep(0)
        return work(ctx, n)

    task = app.task(name="work", queue="q1")(work if kind == "sync" else work_async)
    with tracer.start_as_current_span("producer"):
        jid = task.enqueue(n=21)
    job = app.get_job(jid)
    assert job is not None and job.trace is not None and job.meta is None  # meta is the user's
    assert set(job.trace) >= {"traceparent"}

    with running(app) as w:
        assert wait_job(app, jid, is_final).state is JobState.SUCCEEDED
        (attempt,) = finished(exporter, "tether.job work")
    (producer,) = finished(exporter, "producer")
    (enqueue,) = finished(exporter, "tether.enqueue work")
    (inner,) = finished(exporter, "inside handler")
    assert producer.context is not None and attempt.context is not None and enqueue.context is not None
    trace_id = producer.context.trace_id
    # producer -> tether.enqueue (PRODUCER) -> tether.job (CONSUMER, in the worker) -> the handler's span
    assert enqueue.kind is SpanKind.PRODUCER and enqueue.parent is not None
    assert enqueue.parent.span_id == producer.context.span_id
    assert attempt.kind is SpanKind.CONSUMER and attempt.parent is not None
    assert attempt.parent.is_remote and attempt.parent.span_id == enqueue.context.span_id
    assert inner.parent is not None and inner.parent.span_id == attempt.context.span_id
    assert {s.context.trace_id for s in (enqueue, attempt, inner) if s.context} == {trace_id}
    attrs = attempt.attributes or {}
    assert (attrs["tether.job.id"], attrs["tether.job.attempt"], attrs["tether.task"], attrs["tether.queue"],
            attrs["tether.worker"], attrs["tether.outcome"], attrs["tether.job.state"]) == (
        jid, 1, "work", "q1", w.id, "succeeded", "succeeded")
    assert attempt.status.status_code is StatusCode.UNSET
    assert (enqueue.attributes or {})["tether.job.id"] == jid


def test_enqueue_async_runs_in_a_producer_span_the_job_carries(make_app: Callable[..., Tether], spans: tuple[
        TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    app = make_app(**FAST)
    instrument(app, tracer_provider=provider)
    task = app.task(name="work", queue="q1")(lambda ctx, n: n)

    async def produce() -> tuple[int, list[int]]:
        with tracer.start_as_current_span("producer"):
            return await task.enqueue_async(n=1), await task.enqueue_many_async([{"n": 2}, {"n": 3}])

    one, many = asyncio.run(produce())
    (producer,) = finished(exporter, "producer")
    single, batch = sorted(finished(exporter, "tether.enqueue work", 2), key=lambda s: s.start_time or 0)
    assert producer.context is not None and single.context is not None and batch.context is not None
    for span in (single, batch):
        assert span.kind is SpanKind.PRODUCER and span.parent is not None
        assert span.parent.span_id == producer.context.span_id
    assert (single.attributes or {})["tether.job.id"] == one
    assert (batch.attributes or {})["messaging.batch.message_count"] == 2
    for job_id, span in ((one, single), *((i, batch) for i in many)):
        job = app.get_job(job_id)
        assert job is not None and job.trace is not None and job.meta is None
        assert f"{span.context.span_id:016x}" in job.trace["traceparent"]  # type: ignore[union-attr]
    with running(app, queues=["q1"]):
        attempts = {(s.attributes or {})["tether.job.id"]: s for s in finished(exporter, "tether.job work", 3)}
    for job_id, span in ((one, single), *((i, batch) for i in many)):
        parent = attempts[job_id].parent
        assert parent is not None and parent.span_id == span.context.span_id


def test_failing_job_has_one_error_span_per_attempt(make_app: Callable[..., Tether], spans: tuple[
        TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    app = make_app(**FAST)
    instrument(app, tracer_provider=provider)

    @app.task(name="boom", max_attempts=2, retry_backoff=0)
    def boom(ctx: JobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt} broke")

    jid = boom.enqueue()  # no span of the producer's own: tether.enqueue starts the trace
    with running(app):
        assert wait_job(app, jid, is_final).state is JobState.DEAD
        attempts = finished(exporter, "tether.job boom", 2)
    (enqueue,) = finished(exporter, "tether.enqueue boom")
    assert enqueue.parent is None and enqueue.context is not None
    attempts.sort(key=lambda s: (s.attributes or {})["tether.job.attempt"])
    assert [((s.attributes or {})["tether.job.attempt"], (s.attributes or {})["tether.outcome"],
             (s.attributes or {})["tether.job.state"]) for s in attempts] == [(1, "failed", "queued"),
                                                                              (2, "failed", "dead")]
    for n, s in enumerate(attempts, 1):
        assert s.status.status_code is StatusCode.ERROR
        assert s.status.description == f"ValueError: attempt {n} broke"
        assert [e.name for e in s.events] == ["exception"]
        assert s.context is not None and s.context.trace_id == enqueue.context.trace_id
        assert s.parent is not None and s.parent.span_id == enqueue.context.span_id


def test_cancelled_and_released_attempts_end_their_spans(make_app: Callable[..., Tether], spans: tuple[
        TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    app = make_app(**FAST)
    instrument(app, tracer_provider=provider)
    started: set[int] = set()

    @app.task(name="waits")
    async def waits(ctx: JobContext) -> None:
        started.add(ctx.job_id)
        await asyncio.sleep(60)

    cancelled, released = waits.enqueue(), waits.enqueue()
    with running(app, shutdown_timeout=0):
        deadline = time.monotonic() + 10
        while len(started) < 2:
            assert time.monotonic() < deadline, "both handlers should have started"
            time.sleep(0.02)
        app.cancel(cancelled)
        assert wait_job(app, cancelled, is_final).state is JobState.CANCELLED
    # leaving ``running`` stops the worker without waiting: the other attempt is released
    assert wait_job(app, released, lambda j: j.state is JobState.QUEUED).state is JobState.QUEUED
    ended = {(s.attributes or {})["tether.job.id"]: s for s in finished(exporter, "tether.job waits", 2)}
    assert {jid: ((s.attributes or {})["tether.outcome"], (s.attributes or {})["tether.job.state"])
            for jid, s in ended.items()} == {cancelled: ("cancelled", "cancelled"), released: ("released", "queued")}
    assert {s.status.status_code for s in ended.values()} == {StatusCode.UNSET}


def test_tracing_off_injects_nothing(make_app: Callable[..., Tether], spans: tuple[
        TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    app = make_app(**FAST)

    @app.task(name="plain")
    def plain(ctx: JobContext) -> str:
        return "ok"

    with provider.get_tracer("test").start_as_current_span("producer"):
        jid = plain.enqueue()
    job = app.get_job(jid)
    assert job is not None and job.meta is None and job.trace is None
    with running(app):
        assert wait_job(app, jid, is_final).state is JobState.SUCCEEDED
    assert [s.name for s in exporter.get_finished_spans()] == ["producer"]


def test_a_traced_enqueue_keeps_meta_free_of_the_trace_and_bad_trace_meta_starts_a_new_trace(make_app: Callable[..., Tether], spans: tuple[
        TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    app = make_app(**FAST)
    tracing = instrument(app, tracer_provider=provider)

    @app.task(name="m")
    def m(ctx: JobContext) -> None:
        return None

    # meta written by someone else is kept as it was: the trace context goes to its own column
    (kept,) = tracing.enqueue([NewJob(task="m", args_json="{}", meta_json='{"owner": "ops"}')], app.store.enqueue)
    # meta whose trace entry is junk (any client of a tether server can write meta)
    (junk,) = app.store.enqueue([NewJob(task="m", args_json="{}", meta_json='{"trace": {"traceparent": 5}}')])
    job = app.get_job(kept)
    assert job is not None and job.meta is not None
    assert job.meta == {"owner": "ops"} and job.trace is not None and "traceparent" in job.trace
    with running(app):
        for jid in (kept, junk):
            assert wait_job(app, jid, is_final).state is JobState.SUCCEEDED
        attempts = finished(exporter, "tether.job m", 2)
    by_job = {(s.attributes or {})["tether.job.id"]: s for s in attempts}
    assert by_job[junk].parent is None
    assert by_job[kept].parent is not None


def test_trace_context_travels_through_a_tether_server(db_url: str, make_app: Callable[..., Tether], spans: tuple[
        TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    app = make_app(**FAST)  # the worker's app, on the database
    instrument(app, tracer_provider=provider)
    app.task(name="remote")(lambda ctx: None)
    with served(db_url) as url:
        producer = Tether(url, token=TEST_TOKEN)
        instrument(producer, tracer_provider=provider)
        producer.task(name="remote")(lambda ctx: None)
        try:
            jid = producer.enqueue("remote")
        finally:
            producer.close()
    with running(app):
        assert wait_job(app, jid, is_final).state is JobState.SUCCEEDED
        (attempt,) = finished(exporter, "tether.job remote")
    (enqueue,) = finished(exporter, "tether.enqueue remote")
    assert enqueue.context is not None and attempt.parent is not None
    assert (attempt.parent.trace_id, attempt.parent.span_id) == (enqueue.context.trace_id, enqueue.context.span_id)
    job = app.get_job(jid)  # the trace crossed the server as its own field, not in meta
    assert job is not None and job.meta is None and job.trace is not None


def test_a_job_an_older_producer_wrote_with_its_trace_in_meta_continues_that_trace(
        make_app: Callable[..., Tether], spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    # A producer of the release before the trace column (a rolling deploy) put
    # the carrier in meta under "trace" (META_KEY): a row just like it.
    provider, exporter = spans
    app = make_app(**FAST)
    instrument(app, tracer_provider=provider)
    app.task(name="old")(lambda ctx: None)
    trace_id, span_id = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
    carrier = {"traceparent": f"00-{trace_id:032x}-{span_id:016x}-01"}
    (jid,) = app.store.enqueue([NewJob(task="old", args_json="{}", meta_json=json.dumps({META_KEY: carrier}))])
    job = app.get_job(jid)
    assert job is not None and job.trace is None and job.meta == {META_KEY: carrier}
    with running(app):
        assert wait_job(app, jid, is_final).state is JobState.SUCCEEDED
        (attempt,) = finished(exporter, "tether.job old")
    assert attempt.parent is not None and attempt.parent.is_remote
    assert (attempt.parent.trace_id, attempt.parent.span_id) == (trace_id, span_id)


def test_the_trace_crosses_a_tether_server_as_its_own_field_both_ways(db_url: str) -> None:
    # enqueue request -> trace column -> a worker's claim answer, in records and in rows
    carrier = {"traceparent": f"00-{1:032x}-{2:016x}-01"}
    with served(db_url) as url:
        client = Tether(url, token=TEST_TOKEN)
        try:
            store = client.store
            ids = store.enqueue([NewJob(task="t", args_json="{}", queue="traced", meta_json='{"mine": 1}',
                                        trace_json=json.dumps(carrier)) for _ in range(2)])
            job = store.get_job(ids[0])
            assert job is not None and (job.meta, job.trace) == ({"mine": 1}, carrier)
            (one,) = store.claim("w1", ["traced"], 1, 30.0)
            (two,) = store.claim_ids("w1", [ids[1]], ["traced"], 30.0)
        finally:
            client.close()
    for claimed in (one, two):
        assert (claimed.meta, claimed.trace) == ({"mine": 1}, carrier)


@pytest.mark.parametrize("user_trace", ["abc-123", {"id": 7, "vendor": "acme"}, {"traceparent": "not-w3c"}])
def test_a_users_own_trace_key_in_meta_starts_a_new_trace(
        make_app: Callable[..., Tether], spans: tuple[TracerProvider, InMemorySpanExporter],
        user_trace: object) -> None:
    # meta is the user's (issue 43): on a job without a trace column (the
    # fallback's case), a "trace" key of theirs that is no W3C carrier is not
    # taken for an older producer's context: the attempt starts a new trace
    provider, exporter = spans
    app = make_app(**FAST)
    instrument(app, tracer_provider=provider)
    app.task(name="labelled")(lambda ctx: (ctx.meta or {}).get("trace"))
    (jid,) = app.store.enqueue([NewJob(task="labelled", args_json="{}",
                                       meta_json=json.dumps({META_KEY: user_trace}))])
    with running(app):
        job = wait_job(app, jid, is_final)
        (attempt,) = finished(exporter, "tether.job labelled")
    assert job.state is JobState.SUCCEEDED and job.result == user_trace
    assert attempt.parent is None  # a root span: no parent taken from the user's meta
