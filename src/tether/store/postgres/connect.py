"""How the PostgreSQL store connects: what every connection is given, the
pools it keeps, and what changes behind a transaction pooler.

A store keeps four sets of connections: a pool for most statements, a small
one for a worker's rounds (claim, complete, complete_and_claim), and the same
two per event loop for async calls. Directly on the server, the two kinds
differ in one session setting, sent as a startup option: the main ones plan
every statement for its arguments, the round ones plan theirs once.

Behind PgBouncer in transaction pooling mode (``?pgbouncer=transaction``) a
client's connection is not a server session: each transaction may run on
another server connection, so nothing may rely on session state. The store
then sends no startup options (PgBouncer refuses them), prepares no
statements on the server (a statement prepared on one server connection is
unknown on the next; every statement goes as an unnamed one, planned for its
arguments as force_custom_plan would), and does not LISTEN through the
pooler (see ``PostgresStore.listen``). Advisory locks are taken only per
transaction (``migrate``), which transaction pooling keeps whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from ...config import DatabaseURL, redact_text, redact_url
from ...errors import DatabaseUnavailable, InvalidDSN
from .loop_connections import LoopConnections
from .outage import TetherPool
from .timezones import ADAPTERS, utc_times

__all__ = [
    "ASYNC_CONNECTIONS",
    "CONN_DEFAULTS",
    "JIT_PROBE",
    "POOLED_POLL_INTERVAL",
    "POOL_TIMEOUT",
    "RECONNECT_TIMEOUT",
    "ROUND_CONNECTIONS",
    "Connections",
    "check_listen_url",
    "literal",
    "net_defaults",
    "open_connections",
    "pooled",
    "quote",
    "warn_if_jit",
]

log = logging.getLogger("tether.store.postgres")

#: PostgreSQL compiles a statement with LLVM (JIT) whenever the planner's
#: estimate passes jit_above_cost (100,000 by default), on every execution, a
#: generic plan's too: nothing of it is kept. A claim's estimate grows with the
#: queued backlog (a LIMIT that is no constant is taken for a tenth of the
#: rows): a worker's round, planned generically, passed it near a million
#: queued jobs of one task and then spent 30-50 ms compiling a statement that
#: runs in 1-2 ms; past jit_optimize_above_cost and jit_inline_above_cost
#: (500,000, near five million) 500-600 ms. One worker x 10 ran 7,000-7,500
#: jobs in 20 s against 1.5 million queued jobs with JIT on, 165,000-258,000
#: with it off (510 against 174,000-266,000 at 11.6 million). tether's
#: statements are short: JIT only ever costs them.
_NO_JIT = "-c jit=off"

# Connection settings; any of these in the URL wins (startup options combine:
# see net_defaults). A worker cut off by a network partition must find out in
# seconds, not after the kernel's two-hour keepalive default: probe idle
# connections and give up on unacknowledged writes.
CONN_DEFAULTS = {
    # Plan every execution for its own arguments: the arrays tether passes vary
    # from 1 to thousands of elements, and a generic plan chosen for one size
    # turned the heartbeat quadratic at 5,000 held jobs (8.6 s a beat). The
    # exceptions (GENERIC_PLANS in store.py) run on connections of their own.
    # Not sent through a transaction pooler (see SESSION_SETTINGS).
    # And no JIT (_NO_JIT).
    "options": f"-c plan_cache_mode=force_custom_plan {_NO_JIT}",
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
#: the defaults that set up a server session: none goes through a transaction pooler
SESSION_SETTINGS = frozenset({"options"})
_GENERIC_OPTIONS = f"-c plan_cache_mode=force_generic_plan {_NO_JIT}"

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
#: how often an idle worker claims behind a transaction pooler with no
#: ``listen_url``: polling is its only wake-up, so it sets an idle worker's
#: latency. An empty claim is one index probe of the partial claim index.
POOLED_POLL_INTERVAL = 0.5

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


def pooled(dsn: DatabaseURL) -> bool:
    """Whether the URL asks for no session state (``pgbouncer=transaction``)."""
    return dsn.options.get("pgbouncer") == "transaction"


def net_defaults(url: str, *, session: bool = True, options: str = CONN_DEFAULTS["options"]) -> dict[str, Any]:
    """CONN_DEFAULTS that the URL does not set; without the session settings
    unless ``session``. The URL's own startup options (``options=``) go after
    tether's ``options``: theirs win a setting both name, and tether's stand
    for the rest (a URL's ``-c statement_timeout=5s`` dropped tether's
    ``plan_cache_mode`` and ``jit=off`` with the rest of its options)."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    out = {k: v for k, v in CONN_DEFAULTS.items() if k not in given and k not in SESSION_SETTINGS}
    if session:
        theirs = given.get("options")
        out["options"] = f"{options} {theirs}" if theirs else options
    return out


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
    and says why (refused, unknown database, bad password, a pooler that
    refuses startup options) where a pool would only time out."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn.url)
    except psycopg.ProgrammingError as exc:
        raise InvalidDSN(f"malformed PostgreSQL URL: {redact_text(str(exc).strip(), dsn.url)}") from None
    session = not pooled(dsn)
    net = net_defaults(dsn.url, session=session)
    # Server-side prepared statements from the first execution on a session of
    # our own; none through a pooler (None: never prepare).
    kwargs = {"autocommit": True, "prepare_threshold": 0 if session else None, "context": ADAPTERS, **net}
    # The rounds read claimed jobs only, due by then (run_at <= now): no time
    # past year 9999, so they keep psycopg's own loaders (ADAPTERS' cost about
    # 0.9 us a timestamp, two or three to a claimed job).
    rounds = {k: v for k, v in kwargs.items() if k != "context"}
    if session:
        rounds["options"] = net_defaults(dsn.url, options=_GENERIC_OPTIONS)["options"]
    try:
        # (the URL's own connect_timeout, if it sets one: a bad one, connect_timeout=abc, is refused
        # here rather than by the pool, after its 10 s, as an outage)
        psycopg.connect(dsn.url, **net).close()
    except psycopg.Error as exc:
        reason = _hint(redact_text(str(exc).strip(), dsn.url))
        raise _refused(reason)(f"cannot connect to PostgreSQL at {redact_url(dsn.url)}: {reason}") from None
    pool: Pool = TetherPool(
        dsn.url, min_size=1, max_size=pool_size, timeout=POOL_TIMEOUT, reconnect_timeout=RECONNECT_TIMEOUT,
        kwargs=kwargs, open=False, name=f"tether-{dsn.schema}", configure=utc_times,
    )
    # connected on first use (only workers claim)
    round_pool: Pool = TetherPool(
        dsn.url, min_size=0, max_size=ROUND_CONNECTIONS, timeout=POOL_TIMEOUT,
        reconnect_timeout=RECONNECT_TIMEOUT, kwargs=rounds, open=False, name=f"tether-{dsn.schema}-rounds",
        configure=utc_times,
    )
    try:
        pool.open(wait=True, timeout=10)
        round_pool.open()
    except Exception as exc:
        pool.close()
        round_pool.close()
        reason = redact_text(str(exc), dsn.url)
        raise _refused(reason)(f"cannot connect to PostgreSQL at {redact_url(dsn.url)}: {reason}") from None
    return Connections(
        pool=pool,
        round_pool=round_pool,
        # for async calls, each event loop's own; round_async as round_pool
        async_connections=LoopConnections(dsn.url, size=ASYNC_CONNECTIONS, **kwargs),
        round_async=LoopConnections(dsn.url, size=ROUND_CONNECTIONS, **rounds),
    )


#: what tells two connections' databases apart: two databases of one server
#: differ in name, two servers (or one restarted) in their start time
_SAME_DATABASE = "SELECT current_database(), pg_postmaster_start_time()"


def check_listen_url(listen_url: str, pool: Pool) -> None:
    """A ``listen_url`` given beside a pooled URL: find a mistake in it when
    the worker starts, not as a listener's warnings, every second, while
    workers fall back on polling. InvalidDSN when it does not connect
    (through a transaction pooler itself, say, which refuses its startup
    options) or reaches another database than ``pool``'s, whose
    notifications would never come (both went unnoticed: a new user's
    walkthrough)."""
    shown = redact_url(listen_url)
    try:
        with psycopg.connect(listen_url, **net_defaults(listen_url)) as conn:
            there = conn.execute(_SAME_DATABASE).fetchone()
    except psycopg.Error as exc:
        raise InvalidDSN(f"cannot connect to listen_url {shown}: "
                         f"{redact_text(str(exc).strip(), listen_url)}") from None
    with pool.connection() as conn:
        here = conn.execute(_SAME_DATABASE).fetchone()
    if there != here:
        raise InvalidDSN(f"listen_url {shown} reaches another database ({there[0] if there else '?'}) than the "
                         f"database URL does ({here[0] if here else '?'}): LISTEN there would never hear this "
                         "database's enqueues. Point it at the same database, directly (not through the pooler)")


#: what PostgreSQL (libpq) says when it was reached and refused this URL: the
#: URL must change; anything else (refused, timed out, unroutable) is an outage
_REFUSALS = ("authentication failed", "does not exist", "pg_hba.conf", "could not translate host name",
             "unsupported startup parameter", "invalid", "permission denied", "SSL", "ssl", "bad value")


def _refused(message: str) -> type[InvalidDSN]:
    """InvalidDSN when the URL is what is wrong; DatabaseUnavailable (also a
    ConnectionError) when the server did not answer."""
    return InvalidDSN if any(r in message for r in _REFUSALS) else DatabaseUnavailable


def _hint(message: str) -> str:
    """The server's (or pooler's) refusal, with what to do when it is a pooler
    refusing the startup options."""
    if "unsupported startup parameter" in message:
        return message + (" (a PgBouncer or another pooler in transaction mode? add pgbouncer=transaction "
                          "to the URL: tether then sends no startup options)")
    return message


#: the URLs whose sessions were found with JIT on and said so (once a process)
_JIT_WARNED: set[str] = set()


#: what ``warn_if_jit`` needs, as columns a statement can read beside its own
#: (the schema check reads them with the migrations: one round trip)
JIT_PROBE = "current_setting('jit') = 'on' AND pg_jit_available(), current_user"


def warn_if_jit(conn: psycopg.Connection[Any], dsn: DatabaseURL, probed: tuple[Any, Any] | None = None) -> None:
    """Log once a process, at WARNING, if JIT is on for the store's sessions
    (see _NO_JIT): through a transaction pooler tether cannot turn it off,
    and a URL's own ``options=`` may turn it back on. ``probed``: the
    ``JIT_PROBE`` columns already read on ``conn`` (else they are read here)."""
    if dsn.url in _JIT_WARNED:
        return
    # (jit = on compiles nothing where the server cannot load its JIT provider)
    row = probed if probed is not None else conn.execute(f"SELECT {JIT_PROBE}").fetchone()
    assert row is not None
    jit, user = row
    if not jit:
        return
    _JIT_WARNED.add(dsn.url)
    why = ("through a transaction pooler tether sends no session settings" if pooled(dsn)
           else "the URL's own options= turn it on")
    log.warning("PostgreSQL JIT is on for tether's sessions at %s (%s): a worker's claims against a backlog of "
                "about a million queued jobs or more then spend 30-600 ms compiling, every round. Turn it off "
                "for tether's role: ALTER ROLE %s SET jit = off", redact_url(dsn.url), why, quote(user))
