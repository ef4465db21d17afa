"""Prometheus metrics (the optional ``metrics`` extra: prometheus-client).

``Metrics`` subscribes to an app's lifecycle events, so its counters and
histograms move as the app's workers run jobs; queue depth is read from the
database on scrape (one grouped count, cached for ``depth_cache`` seconds so
that several scrapers cost one query), and with it ``tether_unknown_task_jobs``:
due jobs whose task no live worker knows. ``serve_metrics`` serves a registry over
HTTP behind a bearer token; the dashboard serves the same at ``/metrics``.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .errors import AccessDenied, ConfigError
from .events import Event
from .model import JobState, Stats

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "tether's metrics need prometheus-client: pip install 'tether[metrics]'"
    ) from exc

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from .app import Tether
    from .store import Store
    from .worker.runtime import Worker

__all__ = ["Metrics", "MetricsServer", "serve_metrics", "serve_registry"]

log = logging.getLogger("tether.metrics")

#: job events counted in tether_jobs_total, by the outcome label they get
_OUTCOMES = {"job.failed": "failed",
             **{s.event: s.event.removeprefix("job.") for s in JobState if s.event is not None}}
_ATTEMPT_ENDS = frozenset({"job.succeeded", "job.failed", "job.cancelled"})
#: seconds; jobs from milliseconds to an hour
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class Metrics:
    """tether's metrics in one registry (a fresh one unless given)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, depth_cache: float = 5.0) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.jobs = Counter("tether_jobs", "Attempt and job endings by outcome (succeeded, failed, retried, dead, "
                            "cancelled) and task; the reaper's endings have an empty task", ["outcome", "task"],
                            registry=r)
        self.run_time = Histogram("tether_job_run_seconds", "How long attempts ran on this process's workers",
                                  ["task"], buckets=_BUCKETS, registry=r)
        self.queue_wait = Histogram("tether_job_queue_wait_seconds", "From a job being due to its claim",
                                    ["queue"], buckets=_BUCKETS, registry=r)
        self.recovered = Counter("tether_leases_recovered", "Jobs the reaper took back from lapsed leases",
                                 registry=r)
        self.heartbeat_failures = Counter("tether_heartbeat_failures", "Heartbeat statements that failed",
                                          registry=r)
        self.lost = Counter("tether_ownership_losses", "Attempts a worker learned it no longer owned", registry=r)
        self.in_flight = Gauge("tether_jobs_in_flight", "Jobs held by this process's workers", registry=r)
        self._workers: list[Worker] = []
        self.in_flight.set_function(lambda: sum(len(w.inflight) for w in self._workers))
        self._depth = _DepthCollector(depth_cache)
        r.register(self._depth)

    def attach(self, app: Tether) -> Metrics:
        """Count the events of this app (its workers, enqueues and cancels)."""
        app.on("*")(self.observe)
        return self

    def watch_store(self, store: Store) -> Metrics:
        """Report ``tether_queue_depth`` by queue and state from this database."""
        self._depth.store = store
        return self

    def watch_worker(self, worker: Worker) -> Metrics:
        """Count this worker's held jobs in ``tether_jobs_in_flight``."""
        self._workers.append(worker)
        return self

    def observe(self, event: Event) -> None:
        outcome = _OUTCOMES.get(event.name)
        if outcome is not None:
            self.jobs.labels(outcome=outcome, task=event.task or "").inc()
            # An attempt's end comes once: as succeeded, failed or (on request) cancelled;
            # retried and dead follow a failure and are not timed again.
            if event.duration is not None and event.name in _ATTEMPT_ENDS and event.task:
                self.run_time.labels(task=event.task).observe(event.duration)
        elif event.name == "job.started" and event.queue_wait is not None and event.queue:
            self.queue_wait.labels(queue=event.queue).observe(max(0.0, event.queue_wait))
        elif event.name == "job.recovered":
            self.recovered.inc()
        elif event.name == "job.lost":
            self.lost.inc()
        elif event.name == "worker.heartbeat_error":
            self.heartbeat_failures.inc()


class _DepthCollector(Collector):
    def __init__(self, cache_for: float) -> None:
        self.store: Store | None = None
        self.cache_for = cache_for
        self._cached: tuple[float, Stats] | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.store is None:
            return
        family = GaugeMetricFamily("tether_queue_depth", "Jobs in the database by queue and state",
                                   labels=["queue", "state"])
        try:
            stats = self._stats(self.store)
        except AccessDenied as exc:  # a remote worker's token (scope worker) may not read stats: say so once
            log.warning("tether_queue_depth and tether_unknown_task_jobs are left out: %s (a producer or admin "
                        "token reads them, as does a metrics endpoint on the database itself)", exc)
            self.store = None
            return
        except Exception as exc:
            log.warning("queue depth: reading the database failed: %s", exc)
            return
        counts = stats.counts
        queues = sorted({q for q, _ in counts})
        for queue in queues:
            for state in JobState:
                family.add_metric([queue, str(state)], counts.get((queue, str(state)), 0))
        yield family
        # Jobs a worker leaves for one that knows their task (Store.unknown_tasks):
        # one series per task waiting; none when every due job has a live worker.
        unknown = GaugeMetricFamily(
            "tether_unknown_task_jobs", "Due queued jobs whose task no live worker knows, by queue and task",
            labels=["queue", "task"])
        for u in stats.unknown:
            unknown.add_metric([u.queue, u.task], u.jobs)
        yield unknown

    def _stats(self, store: Store) -> Stats:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.cache_for:
                self._cached = (now, store.stats())
            return self._cached[1]


# -- serving ----------------------------------------------------------------------------------
def require_token(app: WSGIApplication, token: str | None) -> WSGIApplication:
    """Refuse (401) a request without ``Authorization: Bearer <token>``; no
    token means no check (the caller asked for that explicitly)."""
    if token is None:
        return app
    expected = f"Bearer {token}".encode()

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode()
        if not hmac.compare_digest(given, expected):
            start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                ("WWW-Authenticate", 'Bearer realm="tether"')])
            return [b"unauthorized: send Authorization: Bearer <token>\n"]
        return app(environ, start_response)

    return guarded


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics: " + format, *args)


class MetricsServer:
    """A running metrics endpoint; ``close()`` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


#: the shortest --metrics-token taken (the dashboard's --token and the server's tokens need 16)
MIN_TOKEN_LENGTH = 8


def serve_metrics(metrics: Metrics, *, port: int, host: str = "127.0.0.1", token: str | None,
                  no_auth: bool = False) -> MetricsServer:
    """Serve ``/metrics`` (any path) on a daemon thread. A token is required
    unless ``no_auth`` says otherwise; port 0 picks a free one."""
    return serve_registry(metrics.registry, port=port, host=host, token=token, no_auth=no_auth)


def serve_registry(registry: CollectorRegistry, *, port: int, host: str = "127.0.0.1", token: str | None,
                   no_auth: bool = False) -> MetricsServer:
    """``serve_metrics`` for any registry (``--processes``' supervisor serves its children's)."""
    if token is None and not no_auth:
        raise ConfigError("the metrics endpoint needs a token (--metrics-token or TETHER_METRICS_TOKEN), "
                          "or --metrics-no-auth to serve it without one")
    if token is not None and len(token.strip()) < MIN_TOKEN_LENGTH:
        # as the dashboard's: a bearer token a guess should not find
        raise ConfigError(f"the metrics token must be at least {MIN_TOKEN_LENGTH} characters")
    wsgi: Callable[..., Any] = require_token(make_wsgi_app(registry), token)
    try:
        server = make_server(host, port, wsgi, handler_class=_QuietHandler)
    except OSError as exc:  # in use, or an address this machine does not have: say which
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    thread = threading.Thread(target=server.serve_forever, name="tether-metrics", daemon=True)
    thread.start()
    log.info("metrics on http://%s:%d/metrics%s", host, server.server_address[1],
             "" if token else " (no authentication)")
    return MetricsServer(server, thread)
