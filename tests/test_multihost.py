"""A multi-host PostgreSQL URL (``host1:p1,host2:p2`` with
``target_session_attrs=read-write``), the form a primary with standbys is
reached by (issue 41's failover): accepted by the URL checks, masked in
messages, and working end to end: the pools, LISTEN and the PgBouncer's
``listen_url`` check, with the first host down."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from urllib.parse import quote, urlsplit

import pytest

from tether.config import parse_database_url, redact_url
from tether.errors import InvalidDSN
from tether.store import open_store

from .conftest import PG_URL, _require_pg
from .test_conformance import new_job


def _dead_port() -> int:
    """A loopback port nothing listens on (refused at once, as a killed primary's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _multi(url: str, dead: int) -> str:
    """``url`` reached through a first host that is down."""
    parts = urlsplit(url)
    user, _, hostport = parts.netloc.rpartition("@")
    netloc = f"{user}@127.0.0.1:{dead},{hostport}" if user else f"127.0.0.1:{dead},{hostport}"
    query = parts.query + ("&" if parts.query else "") + "target_session_attrs=read-write"
    return parts._replace(netloc=netloc, query=query).geturl()


MULTI = "postgresql://app:s3cret-pw@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write"


def test_a_multi_host_url_is_accepted_and_handed_to_the_driver_whole() -> None:
    dsn = parse_database_url(MULTI + "&schema=jobs")
    assert dsn.backend == "postgresql" and dsn.schema == "jobs"
    assert "10.0.0.1:5432,10.0.0.2:5433" in dsn.url
    assert dsn.options["target_session_attrs"] == "read-write"
    assert parse_database_url("postgresql://u@[::1]:5432,db2,db3:6432/x").url.startswith("postgresql://u@[::1]")


@pytest.mark.parametrize("netloc", ["h1:5432,h2:99999", "h1:x,h2:5432", "h1:5432,h2:²", "h1:--5,h2", "[::1]x,h2"])
def test_a_bad_port_on_any_host_is_refused(netloc: str) -> None:
    with pytest.raises(InvalidDSN, match="port is not a number"):
        parse_database_url(f"postgresql://u:pw@{netloc}/db")


def test_a_multi_host_url_is_shown_without_its_password() -> None:
    assert "s3cret-pw" not in redact_url(MULTI)
    assert "s3cret-pw" not in repr(parse_database_url(MULTI))
    with pytest.raises(InvalidDSN) as info:
        parse_database_url(MULTI.replace(":5433", ":70000"))
    assert "s3cret-pw" not in str(info.value)


def test_a_multi_host_listen_url_is_accepted() -> None:
    dsn = parse_database_url("postgresql://u@pooler:6432/db?pgbouncer=transaction&listen_url="
                             + quote(MULTI, safe=""))
    assert dsn.options["listen_url"] == MULTI


def test_the_store_and_its_listen_connection_find_the_host_that_answers() -> None:
    _require_pg()
    store = open_store(_multi(PG_URL, _dead_port()) + f"&schema=t_{secrets.token_hex(6)}")
    try:
        store.migrate()
        heard = threading.Event()
        listener = store.listen(lambda queue: heard.set() if queue == "multi" else None)
        assert listener is not None
        try:
            deadline = time.monotonic() + 10
            while not listener.healthy and time.monotonic() < deadline:
                time.sleep(0.02)
            assert listener.healthy
            [job_id] = store.enqueue([new_job(queue="multi")])
            assert heard.wait(5), "no NOTIFY reached the LISTEN connection of a multi-host URL"
            [claimed] = store.claim("w1", ["multi"], 1, 30.0)
            assert claimed.id == job_id
        finally:
            listener.close()
        store.destroy()
    finally:
        store.close()


def test_a_pooled_url_with_a_multi_host_listen_url_passes_its_check() -> None:
    """pgbouncer=transaction (here on the server itself: the mode, not the
    pooler, is what is checked) with a listen_url whose first host is down:
    check_listen_url finds the same database through the second."""
    _require_pg()
    listen = _multi(PG_URL, _dead_port())
    store = open_store(PG_URL + f"?schema=t_{secrets.token_hex(6)}&pgbouncer=transaction&listen_url="
                       + quote(listen, safe=""))
    try:
        store.migrate()
        listener = store.listen(lambda queue: None)
        assert listener is not None
        listener.close()
        store.destroy()
    finally:
        store.close()
