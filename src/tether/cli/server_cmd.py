"""``tether server``: the HTTP API for remote workers and producers (the
``server`` extra). TLS belongs to a reverse proxy in front of it.

It also prunes the database it serves (``--retention``, the app's defaults
unless told otherwise): workers that reach the database through it run no
pruner, since their tokens may not prune and the credentials are the server's."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_SERVER_ROUND_CONNECTIONS, redact_url
from ..errors import ConfigError
from ..model import JobState
from ..store.worker_rows import DEFAULT_LIVE_WORKERS_PER_QUEUE, DEFAULT_WORKERS_PER_TOKEN
from ..worker.expiry import Expiry
from ..worker.pruner import (
    DEFAULT_PRUNE_INTERVAL,
    RETENTION_DEFAULTS,
    Pruner,
    describe_retention,
    parse_age,
    parse_retention,
    retention_from_text,
)
from ..worker.service import PeriodicService
from ..worker.unknown import DEFAULT_UNKNOWN_TASK_GRACE
from .common import PUBLISH_OPTION, BadUsage, CLIState, Seconds, opened, quiet_driver_logs
from .http_options import configure_logging, limit_options

__all__ = ["RETENTION_ENV", "RetentionParam", "server"]

TOKENS_ENV = "TETHER_SERVER_TOKENS"
#: the shortest --worker-retention: a worker's row outlives any server's cached binding of it
MIN_WORKER_RETENTION = 3600.0
RETENTION_ENV = "TETHER_SERVER_RETENTION"


if TYPE_CHECKING:
    from ..server.connections import Limits

    _RetentionType = click.ParamType[dict[JobState, float], Any]
else:  # click < 8.2 has no generic ParamType
    _RetentionType = click.ParamType


class RetentionParam(_RetentionType):
    """``--retention``: ``STATE=AGE[,STATE=AGE]`` or ``none``, as {state: seconds}."""

    name = "retention"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dict[JobState, float]:
        if isinstance(value, dict):
            return value
        try:
            return parse_retention(retention_from_text(str(value)))
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help=f"Lines of 'TOKEN SCOPE[,SCOPE]' (scopes: worker, producer, admin); else env {TOKENS_ENV} "
                   "with entries separated by newlines or ';'.")
@click.option("--max-body", type=click.IntRange(min=1024), default=8 * 1024 * 1024, show_default=True,
              help="Largest request body in bytes (larger ones get 413).")
@click.option("--max-payload", type=click.IntRange(min=1), default=DEFAULT_MAX_PAYLOAD_BYTES, show_default=True,
              help="Largest args, meta or result of one job, in bytes of JSON.")
@click.option("--round-connections", type=click.IntRange(min=1), default=DEFAULT_SERVER_ROUND_CONNECTIONS,
              show_default=True,
              help="PostgreSQL connections for the workers' rounds (claims and their reports), opened as "
                   "rounds overlap: each remote worker keeps up to three in flight.")
@click.option("--unsafe-client-clock", is_flag=True,
              help="UNSAFE, for conformance tests only: honour a client-supplied 'now', so any worker "
                   "token can move the clock that leases are judged by.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="info", show_default=True)
@click.option("--retention", type=RetentionParam(), envvar=RETENTION_ENV, metavar="STATE=AGE[,STATE=AGE]|none",
              default=",".join(f"{k}={v}" for k, v in RETENTION_DEFAULTS.items()), show_default=True,
              help="Prune the database's finished jobs older than this, by state (as Tether(retention=...): "
                   "states left out keep their default, STATE=none keeps one forever, 'none' prunes nothing); "
                   f"remote workers run no pruner (env {RETENTION_ENV}).")
@click.option("--prune-interval", type=Seconds(), default=DEFAULT_PRUNE_INTERVAL, show_default=True,
              help="Seconds between the pruner's ticks.")
@click.option("--min-bury-grace", type=Seconds(allow_zero=True), default=DEFAULT_UNKNOWN_TASK_GRACE,
              show_default=True,
              help="The shortest grace a worker token may bury jobs of unknown tasks with (its workers' "
                   "--unknown-task-grace); below it only an admin token may.")
@click.option("--max-workers-per-token", type=click.IntRange(min=0), default=DEFAULT_WORKERS_PER_TOKEN,
              show_default=True,
              help="Workers' rows one worker token may have (at the cap its workers stopped or silent for a "
                   "minute make room; 0: no cap).")
@click.option("--max-live-workers-per-queue", type=click.IntRange(min=0), default=DEFAULT_LIVE_WORKERS_PER_QUEUE,
              show_default=True, help="Live workers a worker token may add to a queue (0: no cap).")
@click.option("--worker-retention", metavar="AGE|none", default="7d", show_default=True,
              help="Delete the rows of workers stopped, or silent, for this long (the pruner's duty).")
@PUBLISH_OPTION
@limit_options
@click.pass_obj
def server(state: CLIState, host: str, port: int, token_file: Path | None, max_body: int, max_payload: int,
           round_connections: int, unsafe_client_clock: bool, log_level: str, retention: dict[JobState, float],
           prune_interval: float, min_bury_grace: float, max_workers_per_token: int,
           max_live_workers_per_queue: int, worker_retention: str, transport: str | None, limits: Limits) -> None:
    """Serve the database (--database) over HTTP to workers and producers that hold
    no database credentials: `tether worker --server http://HOST:PORT --token T`.
    It prunes the database too (--retention): its remote workers do not."""
    try:
        from ..server import WorkerPolicy, create_app, parse_tokens
        from ..server.run import serve
    except ImportError as exc:
        raise BadUsage(f"tether server needs the server extra: pip install 'tether[server]' ({exc})") from None
    if token_file is not None:
        try:
            text, where = token_file.read_text(), str(token_file)
        except OSError as exc:
            raise BadUsage(f"--token-file {token_file}: {exc.strerror or exc}") from None
    elif os.environ.get(TOKENS_ENV):
        text, where = os.environ[TOKENS_ENV], TOKENS_ENV
    else:
        raise BadUsage(f"no tokens: give --token-file or set {TOKENS_ENV} (every request needs a token)")
    tokens = parse_tokens(text, where)
    if state.database.lower().startswith(("http://", "https://")):
        raise ConfigError("tether server serves a database: point --database at sqlite:/// or postgresql://")
    configure_logging(log_level)
    with quiet_driver_logs(), opened(state) as app:
        app.store.check_schema()
    with opened(state, transport=transport) as app:
        store = app.store
        if unsafe_client_clock:
            logging.getLogger("tether.server").warning(
                "--unsafe-client-clock: requests may set the store's clock; never use this in production")
        logging.getLogger("tether.server").info("serving %s on http://%s:%d", redact_url(state.database), host, port)
        if app.transport.delivers:
            logging.getLogger("tether.server").info("publishing enqueued and retried jobs to %s", app.transport.name)
        logging.getLogger("tether.server").info("retention: %s%s", describe_retention(retention),
                                                f"; pruning every {prune_interval:g}s" if retention else "")
        worker_age = None if worker_retention.strip().lower() == "none" else parse_age(worker_retention,
                                                                                         "--worker-retention")
        if worker_age is not None and worker_age < MIN_WORKER_RETENTION:  # far above owners.CACHE_TTL
            raise BadUsage(f"--worker-retention must be at least {MIN_WORKER_RETENTION:g}s (or none), got "
                           f"{worker_retention!r}: a server trusts a worker's binding to its token for minutes")
        services: list[PeriodicService] = [Pruner(store, retention, interval=prune_interval, worker_age=worker_age)
                                           ] if retention or worker_age is not None else []
        # its workers reach the database through it: the server ends the expired jobs (worker/expiry.py)
        services.append(Expiry(store, f"tether-server:{socket.gethostname()}"))
        serve(create_app(store, tokens, client_clock=unsafe_client_clock, max_body=max_body,
                         max_payload_bytes=max_payload, transport=app.transport, services=services,
                         round_connections=round_connections,
                         worker_policy=WorkerPolicy(min_bury_grace=min_bury_grace,
                                                    per_token=max_workers_per_token or None,
                                                    live_per_queue=max_live_workers_per_queue or None)), host, port,
              log_level=log_level.lower(), limits=limits)
