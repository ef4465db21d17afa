"""What ``tether worker`` runs, shared with the faces that start a worker the
same way with an app found otherwise (``manage.py tether_worker`` in
``tether.contrib.django``): the worker's options, as one click decorator,
and ``run_worker``, which runs a worker of an app with them."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from ..app import Tether
from ..config import redact_url
from ..logs import configure_worker_logging
from ..worker.unknown import DEFAULT_UNKNOWN_TASK_GRACE
from .common import BadUsage, Seconds, Size, configure_app, require_database

__all__ = ["run_worker", "worker_options"]


F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS: list[Callable[[F], F]] = [
    click.option("--concurrency", "-c", type=click.IntRange(min=1), default=10, show_default=True,
                 help="Jobs run at once by this worker."),
    click.option("--queues", "-q", multiple=True, metavar="Q1,Q2",
                 help="Queues to work (comma-separated or repeated); default: every queue the app's tasks use."),
    click.option("--shutdown-timeout", type=Seconds(allow_zero=True), default=30.0, show_default=True,
                 help="On SIGTERM/SIGINT, seconds to let running jobs finish before releasing them."),
    click.option("--lease-ttl", type=Seconds(), help="Override the app's lease TTL (seconds)."),
    click.option("--heartbeat-interval", type=Seconds(), help="Override the app's heartbeat interval (seconds)."),
    click.option("--reaper-interval", type=Seconds(), help="Override the app's reaper interval (seconds)."),
    click.option("--poll-interval", type=Seconds(), help="Idle poll interval (default: the backend's)."),
    click.option("--prefetch/--no-prefetch", default=True, show_default=True, envvar="TETHER_PREFETCH",
                 help="While handlers finish within 25 ms on average, claim ahead (up to eight times the concurrency "
                      "a claim, at most 200, less for slower handlers) so the next claim runs while this batch "
                      "does (env TETHER_PREFETCH)."),
    click.option("--burst", is_flag=True,
                 help="Run until no job is due and none is running, then exit 0 (CI jobs, cron-style batches); "
                      "jobs due later (delay, run_at, a retry's backoff) are left for later."),
    click.option("--unknown-task-grace", type=Seconds(allow_zero=True), default=DEFAULT_UNKNOWN_TASK_GRACE,
                 show_default=True,
                 help="End dead the jobs of a task no worker serving their queue has known for this long "
                      "(at least 60; 0: never, they wait, shown by `tether status`)."),
    click.option("--isolation", type=click.Choice(["thread", "process"]), default="thread", show_default=True,
                 help="Where def handlers run: on the worker's threads, or each in a child process that is killed "
                      "when its attempt ends (timeout, cancel, lost lease), so no handler outlives its attempt. "
                      "A task's @app.task(isolation='process') asks for it alone."),
    click.option("--max-tasks-per-child", type=click.IntRange(min=1), metavar="N",
                 help="With process isolation: replace a child after it ran N jobs."),
    click.option("--max-memory-per-child", type=Size(), metavar="SIZE",
                 help="With process isolation: replace a child after a job during which its resident memory "
                      "passed SIZE (read while the job runs and at its end; e.g. 500MB, 2GB; units of 1024)."),
    click.option("--transport", metavar="notify|poll|nats://HOST:PORT", envvar="TETHER_TRANSPORT",
                 help="How job ids reach workers: the database (notify, the default; poll) or NATS JetStream, "
                      "e.g. nats://127.0.0.1:4222?prefix=myapp (env TETHER_TRANSPORT)."),
    click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
                 default="info", show_default=True),
    click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
                 help="json: one object per line with job_id, attempt, task, queue and worker fields."),
    click.option("--metrics-port", type=click.IntRange(min=0, max=65535),
                 help="Serve Prometheus metrics on this port (needs the 'metrics' extra)."),
    click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port."),
    click.option("--metrics-token", envvar="TETHER_METRICS_TOKEN",
                 help="Bearer token scrapers must send (env TETHER_METRICS_TOKEN)."),
    click.option("--metrics-no-auth", is_flag=True, help="Serve metrics without a token."),
    click.option("--server", metavar="URL",
                 help="Work through a `tether server` (http://host:port) instead of the database."),
    click.option("--token", envvar="TETHER_TOKEN", metavar="TOKEN",
                 help="The server's bearer token, scope worker (env TETHER_TOKEN)."),
]


def worker_options(f: F) -> F:
    """Every option of ``tether worker`` but ``--app``: the command gets them
    as keyword arguments, to hand to ``run_worker``."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def run_worker(
    app: Tether, label: str, *, database: str | None, concurrency: int, queues: tuple[str, ...],
    shutdown_timeout: float, lease_ttl: float | None, heartbeat_interval: float | None,
    reaper_interval: float | None, poll_interval: float | None, prefetch: bool, burst: bool,
    unknown_task_grace: float, isolation: str, max_tasks_per_child: int | None, max_memory_per_child: int | None,
    transport: str | None, log_level: str, log_format: str,
    metrics_port: int | None, metrics_host: str, metrics_token: str | None, metrics_no_auth: bool,
    server: str | None, token: str | None, configure_logging: Callable[[str, str], None] = configure_worker_logging,
    on_started: Callable[[str, int | None], None] | None = None,
) -> None:
    """Run a worker of ``app`` (``label`` names it in the log) with
    ``worker_options``' values until it stops; ``database``: point the app
    there first (None: where it points); ``configure_logging(log_level,
    log_format)``: the worker's log; ``on_started(worker_id, metrics_port)``:
    called once the worker serves (``--processes``' children say so to their
    supervisor). Closes the app."""
    qs = [q.strip() for item in queues for q in item.split(",") if q.strip()] or None
    if server is not None and not server.lower().startswith(("http://", "https://")):
        raise BadUsage(f"--server {redact_url(server)!r} is not an http:// or https:// URL")
    url = server if server is not None else database
    if token:
        app.token = token
    try:
        configure_app(app, url=url, lease_ttl=lease_ttl,
                      heartbeat_interval=heartbeat_interval, reaper_interval=reaper_interval,
                      transport=transport)
        require_database(app)
        app.store.check_schema()  # fail here, in one line, rather than inside the event loop
        configure_logging(log_level, log_format)
        logging.getLogger("tether").info("app %s: tasks %s", label, ", ".join(sorted(app.tasks)) or "none")
        w = app.worker(concurrency=concurrency, queues=qs, shutdown_timeout=shutdown_timeout,
                       poll_interval=poll_interval, prefetch=prefetch, burst=burst,
                       unknown_task_grace=unknown_task_grace or None, isolation=isolation,
                       max_tasks_per_child=max_tasks_per_child, max_memory_per_child=max_memory_per_child)
        w.schema_checked = True  # above: its start need not check again
        with contextlib.ExitStack() as stack:
            served_on: int | None = None
            if metrics_port is not None:
                from ..metrics import Metrics, serve_metrics

                metrics = Metrics().attach(app).watch_store(app.store).watch_worker(w)
                metrics_server = serve_metrics(metrics, port=metrics_port, host=metrics_host, token=metrics_token,
                                       no_auth=metrics_no_auth)
                stack.callback(metrics_server.close)
                served_on = metrics_server.port
            if on_started is not None:
                w.on_started = lambda: on_started(w.id, served_on)
            asyncio.run(_run_settled(w.run(install_signal_handlers=True)))
    finally:
        app.close()


#: seconds after the start before the worker settles its collector (below):
#: its full collection of everything start-up imported took 15-50 ms, which
#: stood between the spawn and the first claim (issue 47); a --burst worker
#: that is done sooner never pays it
SETTLE_GC_AFTER = 1.0


async def _run_settled(run: Coroutine[Any, Any, None]) -> None:
    handle = asyncio.get_running_loop().call_later(SETTLE_GC_AFTER, _settle_gc)
    try:
        await run
    finally:
        handle.cancel()


def _settle_gc() -> None:
    """This process is now a worker: what start-up built (modules, the app, the
    pool) lives as long as it does. Freeze it, so full collections stop walking
    it, and collect the young generation a tenth as often: a job's objects die
    by reference counting, yet their allocations kept triggering collections
    (about 7% of a no-op worker's time at concurrency 100, mostly full ones)."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, 7000), middle, old)


