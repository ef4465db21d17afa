"""Prometheus metrics move as real jobs run, on both backends; the endpoint
wants its token."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from tether import ConfigError, JobContext, Tether
from tether.metrics import Metrics, serve_metrics
from tether.worker.heartbeat import Heartbeater
from tether.worker.inflight import InFlight
from tether.worker.reaper import Reaper

from .conftest import take_from
from .test_worker import FAST, is_final, running, wait_job


def value(m: Metrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_counters_histograms_and_depth_follow_the_jobs(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    m = Metrics(depth_cache=0).attach(app).watch_store(app.store)

    @app.task(name="ok", queue="q1")
    def ok(ctx: JobContext) -> None:
        pass

    @app.task(name="bad", queue="q1", max_attempts=2, retry_backoff=0)
    def bad(ctx: JobContext) -> None:
        raise RuntimeError("no")

    ids = [ok.enqueue(), ok.enqueue(), bad.enqueue()]
    assert value(m, "tether_queue_depth", queue="q1", state="queued") == 3
    assert value(m, "tether_jobs_total", outcome="succeeded", task="ok") == 0
    with running(app):
        for jid in ids:
            wait_job(app, jid, is_final)
        wait_job(app, ids[-1], lambda j: value(m, "tether_jobs_total", outcome="dead", task="bad") == 1)
    assert value(m, "tether_jobs_total", outcome="succeeded", task="ok") == 2
    assert value(m, "tether_jobs_total", outcome="failed", task="bad") == 2
    assert value(m, "tether_jobs_total", outcome="retried", task="bad") == 1
    assert value(m, "tether_jobs_total", outcome="dead", task="bad") == 1
    assert value(m, "tether_job_run_seconds_count", task="ok") == 2
    assert value(m, "tether_job_run_seconds_count", task="bad") == 2
    assert value(m, "tether_job_queue_wait_seconds_count", queue="q1") == 4
    assert value(m, "tether_queue_depth", queue="q1", state="queued") == 0
    assert value(m, "tether_queue_depth", queue="q1", state="succeeded") == 2
    assert value(m, "tether_queue_depth", queue="q1", state="dead") == 1


def test_recoveries_losses_heartbeat_failures_and_in_flight(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    m = Metrics().attach(app)
    started = threading.Event()

    @app.task(name="hold", max_attempts=1)
    def hold(ctx: JobContext) -> None:
        started.set()
        ctx.wait_cancelled(30)

    jid = hold.enqueue()
    with running(app) as w:
        m.watch_worker(w)
        assert started.wait(10)
        assert value(m, "tether_jobs_in_flight") == 1
        # another worker's reaper takes the job back
        take_from(app.store, w.id, jid, reap=Reaper(app.store, events=app.events).run_once)
        wait_job(app, jid, lambda j: value(m, "tether_ownership_losses_total") == 1)
        wait_job(app, jid, lambda j: value(m, "tether_jobs_in_flight") == 0)
    assert value(m, "tether_leases_recovered_total") == 1
    assert value(m, "tether_jobs_total", outcome="dead", task="") == 1  # the reaper does not know the task

    hb = Heartbeater(app.store, "w-x", InFlight(), interval=0.3, lease_ttl=1.5,
                     on_lost=lambda r, why: None, on_cancel_requested=lambda r: None, events=app.events)
    app.store.destroy()
    hb.run_once()
    assert value(m, "tether_heartbeat_failures_total") == 1


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def test_endpoint_requires_the_token(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    m = Metrics(depth_cache=0).attach(app).watch_store(app.store)
    @app.task(name="t")
    def t(ctx: JobContext) -> None:
        pass

    t.enqueue()
    with pytest.raises(ConfigError, match="needs a token"):
        serve_metrics(m, port=0, token=None)
    with pytest.raises(ConfigError, match="at least 8 characters"):  # as the dashboard's token
        serve_metrics(m, port=0, token="short")
    server = serve_metrics(m, port=0, token="s3cret-metrics")
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{server.port}: Address already"):
            serve_metrics(m, port=server.port, token="s3cret-metrics")  # before: a bare OSError, no port named
        assert _get(url)[0] == 401
        assert _get(url, "wrong")[0] == 401
        status, body = _get(url, "s3cret-metrics")
        assert status == 200
        assert 'tether_queue_depth{queue="default",state="queued"} 1.0' in body
        assert "# HELP tether_jobs_total Attempt and job endings" in body
    finally:
        server.close()
    open_server = serve_metrics(m, port=0, token=None, no_auth=True)
    try:
        assert _get(f"http://127.0.0.1:{open_server.port}/metrics")[0] == 200
    finally:
        open_server.close()
