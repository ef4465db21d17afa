"""How the PostgreSQL store connects: what every connection is given, and the
pools it keeps.

A store keeps four sets of connections: a pool for most statements, a small
one for a worker's rounds (claim, complete, complete_and_claim), and the same
two per event loop for async calls. The two kinds differ in one session
setting, sent as a startup option: the main ones plan every statement for its
arguments, the round ones plan theirs once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from ...config import DatabaseURL
from ...errors import InvalidDSN
from .loop_connections import LoopConnections

__all__ = [
    "ASYNC_CONNECTIONS",
    "CONN_DEFAULTS",
    "POOL_TIMEOUT",
    "RECONNECT_TIMEOUT",
    "ROUND_CONNECTIONS",
    "Connections",
    "literal",
    "net_defaults",
    "open_connections",
    "quote",
    "redact",
]

# Connection settings; any of these in the URL wins. A worker cut off by a
# network partition must find out in seconds, not after the kernel's two-hour
# keepalive default: probe idle connections and give up on unacknowledged writes.
CONN_DEFAULTS = {
    # Plan every execution for its own arguments: the arrays tether passes vary
    # from 1 to thousands of elements, and a generic plan chosen for one size
    # turned the heartbeat quadratic at 5,000 held jobs (8.6 s a beat). The
    # exceptions (GENERIC_PLANS in store.py) run on connections of their own.
    "options": "-c plan_cache_mode=force_custom_plan",
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
_GENERIC_OPTIONS = "-c plan_cache_mode=force_generic_plan"

#: how long a caller waits for a free pooled connection before the call fails
POOL_TIMEOUT = 10.0
#: psycopg_pool retries a failed connection with a delay that doubles until
#: reconnect_timeout (300 s by default): after a server restart or a partition a
#: worker could then sit out tens of seconds with the server already back, and
#: its reaper with it (found by `tether chaos`: leases recovered 35 s late).
#: Giving up early makes the next request start a fresh attempt, 1 s apart.
RECONNECT_TIMEOUT = 2.0
#: connections per event loop for async calls (``enqueue_async``): each is
#: busy only for one statement's round trip, and a loop is one thread
ASYNC_CONNECTIONS = 4
#: connections for a worker's rounds (GENERIC_PLANS), per event loop and in the
#: sync pool: a worker has at most a claim ahead and a report in flight
ROUND_CONNECTIONS = 2
Pool = ConnectionPool[psycopg.Connection[TupleRow]]


def net_defaults(url: str) -> dict[str, Any]:
    """CONN_DEFAULTS that the URL does not set."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    return {k: v for k, v in CONN_DEFAULTS.items() if k not in given}


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def quote(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class Connections:
    """A store's connections (see the module's docstring)."""

    pool: Pool
    round_pool: Pool
    async_connections: LoopConnections
    round_async: LoopConnections


def open_connections(dsn: DatabaseURL, *, pool_size: int) -> Connections:
    """The store's pools, opened, after one direct connection that fails fast
    and says why (refused, unknown database, bad password) where a pool
    would only time out."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn.url)
    except psycopg.ProgrammingError as exc:
        raise InvalidDSN(f"malformed PostgreSQL URL: {exc}") from None
    net = net_defaults(dsn.url)
    kwargs = {"autocommit": True, "prepare_threshold": 0, **net}
    rounds = {**kwargs, "options": _GENERIC_OPTIONS} if "options" in kwargs else kwargs
    try:
        psycopg.connect(dsn.url, connect_timeout=5, **{k: v for k, v in net.items() if k != "connect_timeout"}).close()
    except psycopg.Error as exc:
        raise InvalidDSN(f"cannot connect to PostgreSQL at {redact(dsn.url)}: {str(exc).strip()}") from None
    pool: Pool = ConnectionPool(
        dsn.url, min_size=1, max_size=pool_size, timeout=POOL_TIMEOUT, reconnect_timeout=RECONNECT_TIMEOUT,
        kwargs=kwargs, open=False, name=f"tether-{dsn.schema}",
    )
    # connected on first use (only workers claim)
    round_pool: Pool = ConnectionPool(
        dsn.url, min_size=0, max_size=ROUND_CONNECTIONS, timeout=POOL_TIMEOUT,
        reconnect_timeout=RECONNECT_TIMEOUT, kwargs=rounds, open=False, name=f"tether-{dsn.schema}-rounds",
    )
    try:
        pool.open(wait=True, timeout=10)
        round_pool.open()
    except Exception as exc:
        pool.close()
        round_pool.close()
        raise InvalidDSN(f"cannot connect to PostgreSQL at {redact(dsn.url)}: {exc}") from None
    return Connections(
        pool=pool,
        round_pool=round_pool,
        # for async calls, each event loop's own; round_async as round_pool
        async_connections=LoopConnections(dsn.url, size=ASYNC_CONNECTIONS, **kwargs),
        round_async=LoopConnections(dsn.url, size=ROUND_CONNECTIONS, **rounds),
    )

