"""Settings, their defaults, and the checks that refuse bad ones at start-up.

Defaults are the values of ADR-0007 (heartbeat 10 s against a 30 s lease, reaper
every 10 s): three missed beats before a false recovery, and a dead worker's
jobs claimable again within ``lease_ttl + reaper_interval``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .errors import ConfigError, InvalidDSN
from .model import QueueLimits

__all__ = [
    "DEFAULT_BACKOFF_BASE",
    "DEFAULT_DATABASE_URL",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_LEASE_TTL",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_QUEUE",
    "DEFAULT_REAPER_INTERVAL",
    "DEFAULT_SERVER_ROUND_CONNECTIONS",
    "MAX_DELAY",
    "DatabaseURL",
    "Timers",
    "check_when",
    "parse_database_url",
    "parse_rate",
    "redact_text",
    "redact_url",
    "validate_identifier",
    "validate_queue",
]

DEFAULT_DATABASE_URL = "sqlite:///tether.db"
DEFAULT_LEASE_TTL = 30.0
DEFAULT_HEARTBEAT_INTERVAL = 10.0
DEFAULT_REAPER_INTERVAL = 10.0
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_BASE = 2.0  # seconds; doubled per failure, capped at an hour, jittered
DEFAULT_QUEUE = "default"
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
DEFAULT_REAP_LIMIT = 1000  # rows per reaper tick, oldest lease first
#: a tether server's database connections for every remote worker's rounds
#: (claims and their reports), opened as rounds overlap. A worker keeps up to
#: three in flight (two when this was measured), so this serves 5 to 8 at once
#: without a wait. A worker's own default
#: (2) made every remote worker's round queue for the same two: with a
#: database 10 ms away, 8 remote workers x 10 ran 1,774-2,064 jobs/s, 0.4x as
#: many local ones; with 16, 6,786-8,003 (bench/scenarios/remote.py
#: --db-delay-ms 5 --workers 8 --concurrency 10).
DEFAULT_SERVER_ROUND_CONNECTIONS = 16

# What one client may make `tether server` and `tether dashboard` hold
# (tether.server.connections enforces them; here so the CLI reads them
# without the extras).
#: the largest request line plus headers, in bytes
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
#: the most header lines in one request
DEFAULT_MAX_HEADERS = 100
#: seconds a request may take to arrive whole (line, headers and body)
DEFAULT_REQUEST_TIMEOUT = 30.0
#: open connections at most; under the process's file limit (ulimit -n 1024) with room for the database's
DEFAULT_MAX_CONNECTIONS = 768
#: open connections from one client address at most (behind a reverse proxy, all are the proxy's)
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 256

#: the longest a job may wait: ``delay``, ``run_at`` (either way of now),
#: ``tether.Retry(delay=...)`` and a callable ``retry_backoff``'s answer. 100
#: years: far past any real use, far inside what both databases and Python's
#: datetime hold (a delay of 1e12 s, year 33715, broke every listing).
MAX_DELAY = 100 * 365.25 * 86400

# A beat must land at least twice per TTL, so one lost beat never costs a lease.
MIN_BEATS_PER_TTL = 2

#: what a sqlite:/// URL's query may set (store/sqlite/store.py reads them)
SQLITE_OPTIONS = frozenset({"synchronous"})

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_QUEUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,62}")


def validate_identifier(name: str, what: str = "schema") -> str:
    """A SQL identifier we will quote into statements: letters, digits, underscore."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ConfigError(
            f"{what} name {name!r} is not a plain identifier: use letters, digits and "
            "underscores, starting with a letter or underscore, at most 63 characters"
        )
    return name


def validate_queue(name: str) -> str:
    if not isinstance(name, str) or not _QUEUE.fullmatch(name):
        raise ConfigError(
            f"queue name {name!r} is not a plain identifier: use letters, digits, "
            "'_', '-' and '.', at most 63 characters"
        )
    return name


def _positive_seconds(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


@dataclass(frozen=True, slots=True)
class Timers:
    """The three clocks of the lease model, in seconds."""

    lease_ttl: float = DEFAULT_LEASE_TTL
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    reaper_interval: float = DEFAULT_REAPER_INTERVAL

    def __post_init__(self) -> None:
        for name in ("lease_ttl", "heartbeat_interval", "reaper_interval"):
            value = getattr(self, name)
            if not _positive_seconds(value):
                raise ConfigError(f"{name} must be a positive, finite number of seconds, got {value!r}")
        if self.heartbeat_interval * MIN_BEATS_PER_TTL > self.lease_ttl:
            raise ConfigError(
                f"heartbeat_interval ({self.heartbeat_interval:g}s) must be at most half of "
                f"lease_ttl ({self.lease_ttl:g}s) so that one missed beat never loses a "
                f"lease: lower heartbeat_interval to at most {self.lease_ttl / MIN_BEATS_PER_TTL:g}s or raise "
                f"lease_ttl to at least {self.heartbeat_interval * MIN_BEATS_PER_TTL:g}s"
            )

    def check_job_ttl(self, lease_ttl: float | None, where: str) -> None:
        """A per-task or per-job TTL must still leave room for two beats."""
        if lease_ttl is None:
            return
        if not _positive_seconds(lease_ttl):
            raise ConfigError(f"{where}: lease_ttl must be a positive, finite number of seconds, got {lease_ttl!r}")
        if self.heartbeat_interval * MIN_BEATS_PER_TTL > lease_ttl:
            raise ConfigError(
                f"{where}: lease_ttl {lease_ttl:g}s is shorter than two heartbeats "
                f"({self.heartbeat_interval:g}s each); raise it to at least "
                f"{self.heartbeat_interval * MIN_BEATS_PER_TTL:g}s or lower heartbeat_interval"
            )

    @property
    def recovery_bound(self) -> float:
        """I5: a dead worker's job is claimable again within this many seconds."""
        return self.lease_ttl + self.reaper_interval


def check_when(where: str, delay: object, run_at: datetime | None) -> None:
    """ConfigError unless ``delay`` is seconds from 0 to ``MAX_DELAY`` and
    ``run_at`` (None passes) is timezone-aware and within ``MAX_DELAY`` of now
    (this machine's clock: the bound is a century wide)."""
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= MAX_DELAY:
        raise ConfigError(f"{where}: delay must be from 0 to {MAX_DELAY:.0f} seconds (100 years), got {delay!r}")
    if run_at is None:
        return
    if delay:
        raise ConfigError(f"{where}: give either delay or run_at, not both")
    if run_at.tzinfo is None:
        raise ConfigError(f"{where}: run_at must be timezone-aware (e.g. datetime.now(timezone.utc))")
    now = datetime.now(UTC)
    if not now - timedelta(seconds=MAX_DELAY) <= run_at <= now + timedelta(seconds=MAX_DELAY):
        raise ConfigError(f"{where}: run_at must be within 100 years of now, got {run_at.isoformat()}")


@dataclass(frozen=True, slots=True)
class DatabaseURL:
    backend: str  # "sqlite", "postgresql" or "http" (a tether server)
    url: str  # what the driver gets (for sqlite: the file path; for http: the base URL)
    schema: str  # postgresql schema holding tether's tables
    options: dict[str, str]

    def __repr__(self) -> str:  # no password in a log line or a traceback (listen_url may carry one too)
        options = {k: redact_url(v) for k, v in self.options.items()}
        return (f"DatabaseURL(backend={self.backend!r}, url={redact_url(self.url)!r}, schema={self.schema!r}, "
                f"options={options!r})")


def parse_database_url(url: str | None) -> DatabaseURL:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``postgresql://...``.

    A ``schema=`` query parameter picks the PostgreSQL schema (default ``tether``).
    """
    if url is None:
        url = os.environ.get("TETHER_DATABASE_URL") or DEFAULT_DATABASE_URL
    if not isinstance(url, str) or not url.strip():
        raise InvalidDSN("database URL is empty: use sqlite:///path.db or postgresql://host/db")
    url = url.strip()
    shown = redact_url(url)  # what messages quote: no password
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidDSN(f"malformed database URL {shown!r}: {exc}") from None
    scheme = parts.scheme.lower()
    options = parse_qs(parts.query, keep_blank_values=True)
    twice = sorted(k for k, v in options.items() if len(v) > 1)
    if twice:  # ?schema=a&schema=b: which one was meant? (the last one used to win, silently)
        raise InvalidDSN(f"database URL {shown!r} gives {', '.join(k + '=' for k in twice)} more than once")
    query = {k: v[-1] for k, v in options.items()}
    if scheme == "sqlite":
        # sqlite:///rel.db -> "rel.db"; sqlite:////abs.db -> "/abs.db"
        if parts.netloc not in ("", "localhost") or not url[len(parts.scheme):].startswith("://"):
            raise InvalidDSN(
                f"malformed SQLite URL {shown!r}: use sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db (three or four slashes)"
            )
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if not path:
            raise InvalidDSN(f"SQLite URL {shown!r} names no file: use sqlite:///tether.db")
        if path == ":memory:":
            raise InvalidDSN(
                "sqlite :memory: cannot be shared between a worker and its producers; "
                "use a file, e.g. sqlite:///tether.db"
            )
        unknown = sorted(set(query) - SQLITE_OPTIONS)
        if unknown:  # ?synchronus=full must not quietly run with synchronous=normal
            raise InvalidDSN(f"SQLite URL {shown!r}: unknown option {unknown[0]!r} "
                             f"(known: {', '.join(sorted(SQLITE_OPTIONS))})")
        return DatabaseURL("sqlite", path, "main", query)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        try:
            schema = validate_identifier(query.pop("schema", "tether"), "schema")
        except ConfigError as exc:
            raise InvalidDSN(f"database URL {shown!r}: {exc}") from None
        if not _ports_ok(parts.netloc):
            raise InvalidDSN(f"malformed PostgreSQL URL {shown!r}: the port is not a number from 0 to 65535")
        # tether's own options: the driver never sees them (libpq refuses
        # parameters it does not know)
        ours = _pooler_options(shown.split("?")[0], query.pop("pgbouncer", None), query.pop("listen_url", None), query)
        netloc = parts.netloc
        # encoded again as they came: a value is decoded above, and libpq
        # refused "options=-c statement_timeout=5s" as written back raw (an
        # "=" or "&" in a value, or a space)
        rest = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in query.items())
        driver_url = f"postgresql://{netloc}{parts.path}" + (f"?{rest}" if rest else "")
        return DatabaseURL("postgresql", driver_url, schema, {**query, **ours})
    if scheme in ("http", "https"):
        return _server_url(url, parts.netloc, scheme, query)
    raise InvalidDSN(
        f"unsupported database URL {shown!r}: tether speaks sqlite:///path.db, "
        "postgresql://user@host:port/dbname and http(s)://host:port (a tether server)"
    )


_PORT = re.compile(r"[0-9]{1,5}")


def _ports_ok(netloc: str) -> bool:
    """Whether every host of a PostgreSQL URL's ``netloc`` has no port or one
    from 0 to 65535. libpq takes several hosts, ``host1:5432,host2:5433`` (a
    primary and its standbys, with ``target_session_attrs=read-write`` to find
    the one that takes writes), which urlsplit's ``port`` cannot read: it
    refused every such URL as a bad port."""
    for host in netloc.rpartition("@")[2].split(","):
        if host.startswith("["):  # [::1]:5432
            host = host.partition("]")[2]
            if host and not host.startswith(":"):
                return False
        port = host.rpartition(":")[2] if ":" in host else ""
        if port and not (_PORT.fullmatch(port) and int(port) <= 65535):
            return False
    return True


#: the values of the PostgreSQL URL's ``pgbouncer=`` option. One is enough:
#: what transaction pooling needs (no session state) works behind session
#: pooling too, and statement pooling cannot run tether's transactions (migrate).
POOLER_MODES = ("transaction",)


def _pooler_options(
    shown: str, pooler: str | None, listen_url: str | None, driver: dict[str, str]
) -> dict[str, str]:
    """For the URL ``shown`` (no password, no query: listen_url may carry one):
    ``pgbouncer=transaction`` (no session state: no startup options, no
    server-side prepared statements, no LISTEN through the pooler) and
    ``listen_url=`` (a direct server URL for LISTEN), checked."""
    out: dict[str, str] = {}
    if pooler is not None:
        if pooler not in POOLER_MODES:
            raise InvalidDSN(
                f"database URL {shown!r}: pgbouncer={pooler!r} is not a pooling mode tether knows: use "
                "pgbouncer=transaction behind a PgBouncer (or another pooler) in transaction pooling mode; "
                "it works behind session pooling too"
            )
        if "options" in driver:
            raise InvalidDSN(
                f"database URL {shown!r}: options= sends startup parameters, which a transaction pooler "
                "refuses (or keeps for one server connection only); drop it with pgbouncer=transaction"
            )
        out["pgbouncer"] = pooler
    if listen_url is not None:
        try:
            parts = urlsplit(listen_url)
        except ValueError:
            parts = None
        if (parts is None or parts.scheme.lower() not in ("postgresql", "postgres") or not parts.hostname
                or not _ports_ok(parts.netloc)):
            raise InvalidDSN(
                f"database URL {shown!r}: listen_url must be a postgresql://user@host:port/dbname URL "
                "of the server itself (not the pooler), for LISTEN"
            )
        query = parse_qs(parts.query)
        if "pgbouncer" in query or "schema" in query:
            raise InvalidDSN(
                f"database URL {shown!r}: listen_url is a plain connection to the server, for LISTEN "
                "only; pgbouncer= and schema= belong to the main URL"
            )
        out["listen_url"] = listen_url
    return out


#: where a secret stands in a URL, each as ``head``, ``secret`` and ``tail``
_SECRETS = (
    # ``scheme://user:Pass With Spaces@host``: libpq refuses the URL and quotes
    # the password; spaces allowed up to the last ``@`` before the path, the
    # query, the fragment or the line's end (tried first: the next pattern
    # stops at the first space)
    re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#\"']*:)(?P<secret>(?:(?!://)[^\n/?#])*)(?P<tail>@)"),
    # ``scheme://user:PASSWORD@``, nested ones too (``?listen_url=postgresql://...``):
    # up to the last ``@`` before a space or another URL, as urlsplit reads an ``@``
    # in a password
    re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#\"']*:)(?P<secret>(?:(?!://)\S)*)(?P<tail>@)"),
    # the same percent-encoded in a query: ``listen_url=postgresql%3A%2F%2Fuser%3APASSWORD%40host``
    re.compile(r"(?P<head>%3A%2F%2F(?:(?!%3A|%40)[^\s:/@?#&])*%3A)(?P<secret>(?:(?!%3A%2F%2F)[^\s&#])*)(?P<tail>%40)",
               re.I),
    # ``?password=...``, ``&sslpassword=...``, ``?token=...``
    re.compile(r"(?P<head>[?&](?:[A-Za-z_]*password|token|secret)=)(?P<secret>[^&#\s\"']*)(?P<tail>)", re.I),
    # libpq's keyword/value form: ``host=db password=s3cret dbname=app``, or
    # ``password = 'with spaces and \' quotes'`` (a quoted value runs to its
    # closing quote, backslash escapes included)
    re.compile(r"(?P<head>(?:^|(?<=[\s\"'(]))[A-Za-z_]*password\s*=\s*)"
               r"(?P<secret>'(?:[^'\\]|\\.)*'?|[^\s'\"]+)(?P<tail>)", re.I),
)
#: a password this short is left in a driver's message: masking it would mangle the words
_MIN_SECRET = 3


def redact_url(url: str) -> str:
    """The URL without its password (or a ``password=``/``token=`` option), for
    messages; any text, however malformed (it never raises)."""
    for pattern in _SECRETS:
        url = pattern.sub(lambda m: m["head"] + "***" + m["tail"], url)
    return url


def redact_text(text: str, *urls: str) -> str:
    """A message (a driver's, say) that may quote ``urls``: every URL in it
    redacted, and each password those URLs carry masked wherever it stands
    (libpq quotes the bad part of a URL alone: ``invalid percent-encoded
    token: "s3%cret"``)."""
    text = redact_url(text)
    for url in urls:
        for m in (m for pattern in _SECRETS for m in pattern.finditer(url)):
            raw = m["secret"]
            for secret in {raw, raw.strip("'"), unquote(raw), unquote(unquote(raw))}:
                if len(secret) >= _MIN_SECRET:
                    text = text.replace(secret, "***")
    return text


def _server_url(url: str, netloc: str, scheme: str, query: dict[str, str]) -> DatabaseURL:
    """``http(s)://host:port[/prefix]``: a tether server. The token never goes in
    the URL (URLs end up in logs): pass ``token=`` or set TETHER_TOKEN."""
    if "@" in netloc:
        raise InvalidDSN("a tether server URL must not carry credentials: pass the token with token=..., "
                         "--token or TETHER_TOKEN instead")
    shown = redact_url(url)  # no token= either
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise InvalidDSN(f"malformed server URL {shown!r}: the port is not a number from 0 to 65535") from None
    if not host:
        raise InvalidDSN(f"server URL {shown!r} names no host: use http://host:port")
    for key in query:
        if key not in ("timeout", "wait"):
            raise InvalidDSN(f"server URL {shown!r}: unknown option {key!r} (known: timeout, wait)")
        try:
            value = float(query[key])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (key == "timeout" and value == 0):
            raise InvalidDSN(f"server URL {shown!r}: {key} must be a non-negative number of seconds")
    base = f"{scheme}://{netloc}{parts.path.rstrip('/')}"
    del port
    return DatabaseURL("http", base, "", query)


def check_limits(limits: QueueLimits) -> QueueLimits:
    """A queue's limits as ``app.configure_queue`` stores them, checked: a valid
    queue name, whole numbers >= 1, a rate with both its count and a positive
    period in seconds. ConfigError naming the queue otherwise."""
    q = validate_queue(limits.queue)
    p = check_limit_numbers(f"queue {q!r}", limits.concurrency, limits.rate_limit, limits.rate_period)
    return QueueLimits(q, limits.concurrency, limits.rate_limit, p)


def check_limit_numbers(where: str, concurrency: object, rate_limit: object, rate_period: object) -> float | None:
    """ConfigError naming ``where`` unless the concurrency and rate count are
    None or whole numbers >= 1 and the rate has both a count and a positive
    period in seconds; the period as a float."""

    def whole(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 2**31 - 1

    if concurrency is not None and not whole(concurrency):
        raise ConfigError(f"{where}: concurrency must be a whole number >= 1, got {concurrency!r}")
    if (rate_limit is None) != (rate_period is None):
        raise ConfigError(f"{where}: a rate needs both a count and a period")
    if rate_limit is not None and not whole(rate_limit):
        raise ConfigError(f"{where}: a rate's count must be a whole number >= 1, got {rate_limit!r}")
    p = rate_period
    if p is not None and not (isinstance(p, int | float) and not isinstance(p, bool) and 0 < p <= 1e8):
        raise ConfigError(f"{where}: a rate's period must be a positive number of seconds, got {p!r}")
    return None if p is None else float(p)


def parse_rate(text: str, what: str = "rate") -> tuple[int, float | str]:
    """``"100/60"`` or ``"100/1m"`` as ``(100, 60.0)`` or ``(100, "1m")``: a
    whole count and the period, a number of seconds or a duration's text for
    ``parse_age`` (as ``app.configure_queue(rate=...)`` takes them). ConfigError
    naming ``what`` otherwise."""
    count, sep, period = str(text).strip().partition("/")
    count, period = count.strip(), period.strip()
    if not sep or not re.fullmatch(r"[0-9]{1,12}", count) or not period:
        raise ConfigError(f"{what} must be COUNT/PERIOD, e.g. 100/60 (seconds) or 100/1m; got {text!r}")
    return int(count), float(period) if re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,9})?", period) else period
