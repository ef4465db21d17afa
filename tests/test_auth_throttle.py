"""Failed authentication is held back (issue 41, item 4): per client address
and globally, with exponential back-off, answered 429 with Retry-After, one
log line per failure that names the address and never the token; a client
that authenticates is never held back."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from tether import Tether
from tether.cli.main import cli
from tether.dashboard import create_app as dashboard_app
from tether.errors import ConfigError
from tether.server import create_app, parse_tokens
from tether.server.throttle import Throttle
from tether.store import open_store

TOKEN = secrets.token_urlsafe(24)
WRONG = "wrong-" + secrets.token_urlsafe(12)
ATTACKER, OTHER = ("203.0.113.7", 40000), ("198.51.100.9", 40001)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_waits_after_its_free_failures_twice_as_long_each_time() -> None:
    clock = Clock()
    t = Throttle(free=3, base_wait=1, max_wait=8, forget=100, clock=clock)
    for _ in range(3):
        assert t.retry_after("a") is None
        t.failed("a", "test")
    assert t.retry_after("a") is None  # three free failures
    waits = []
    for _ in range(6):
        t.failed("a", "test")
        wait = t.retry_after("a")
        assert wait is not None
        waits.append(wait)
        clock.now += wait
        assert t.retry_after("a") is None
    assert waits == [1, 2, 4, 8, 8, 8]  # doubled, up to max_wait
    assert t.retry_after("b") is None  # another address is not held back
    t.failed("a", "test")
    t.succeeded("a")  # a success forgets the failures
    assert t.retry_after("a") is None
    for _ in range(3):
        t.failed("a", "test")
    clock.now += 101  # so does time
    t.failed("a", "test")
    assert t.retry_after("a") is None


def test_many_addresses_failing_make_each_failing_one_wait_but_not_the_others() -> None:
    clock = Clock()
    t = Throttle(free=5, global_free=10, window=60, base_wait=1, max_wait=300, clock=clock)
    for n in range(10):
        t.failed(f"10.0.0.{n}", "test")
        assert t.retry_after(f"10.0.0.{n}") is None
    t.failed("10.0.1.1", "test")  # the 11th failure in the window: from one try, this address waits
    assert t.retry_after("10.0.1.1") == 1
    t.failed("10.0.1.2", "test")
    assert t.retry_after("10.0.1.2") == 2
    assert t.retry_after("10.0.2.1") is None  # an address that has not failed may still try
    clock.now += 61  # the window has passed: one failure is free again
    t.failed("10.0.1.3", "test")
    assert t.retry_after("10.0.1.3") is None


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Clock, TestClient, TestClient]]:
    """The API server, seen from an attacker's address and from another's."""
    store = open_store(f"sqlite:///{tmp_path / 'throttle.db'}")
    store.migrate()
    clock = Clock()
    app = create_app(store, parse_tokens(f"{TOKEN} admin", "test"), throttle=Throttle(free=5, clock=clock))
    with TestClient(app, client=ATTACKER) as attacker, TestClient(app, client=OTHER) as other:
        yield clock, attacker, other
    store.close()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_api_server_answers_429_to_an_address_that_keeps_failing(
        api: tuple[Clock, TestClient, TestClient], caplog: pytest.LogCaptureFixture) -> None:
    clock, attacker, other = api
    with caplog.at_level(logging.WARNING, "tether.auth"):
        for _ in range(6):
            assert attacker.get("/v1/now", headers=_bearer(WRONG)).status_code == 401
        refused = attacker.get("/v1/now", headers=_bearer(TOKEN))  # not even the right token is looked at
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error"] == "too_many_failures"
        assert attacker.get("/openapi.json", headers=_bearer(WRONG)).status_code == 429
        # another address is not slowed
        assert other.get("/v1/now", headers=_bearer(TOKEN)).status_code == 200
        clock.now += 1
        assert attacker.get("/v1/now", headers=_bearer(WRONG)).status_code == 401
        assert attacker.get("/v1/now", headers=_bearer(TOKEN)).headers["Retry-After"] == "2"  # doubled
        clock.now += 2
        assert attacker.get("/v1/now", headers=_bearer(TOKEN)).status_code == 200
        assert attacker.get("/v1/now", headers=_bearer(WRONG)).status_code == 401  # forgotten: free again
    lines = [r.getMessage() for r in caplog.records if r.name == "tether.auth"]
    assert len(lines) == 8, lines  # one per failure, none per refusal
    assert all(ATTACKER[0] in line and "the API server" in line for line in lines)
    assert WRONG not in caplog.text and TOKEN not in caplog.text


def test_the_http_client_reads_429_as_access_denied(api: tuple[Clock, TestClient, TestClient]) -> None:
    from tether.errors import AccessDenied
    from tether.store.http.client import _error

    assert isinstance(_error(429, {"error": "too_many_failures", "message": "wait"}, "claim", "u"), AccessDenied)


@pytest.fixture
def tether_app(tmp_path: Path) -> Iterator[Tether]:
    app = Tether(f"sqlite:///{tmp_path / 'dash.db'}")
    app.migrate()
    yield app
    app.close()


def _login(c: TestClient, token: str) -> int:
    page = c.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    r = c.post("/login", data={"token": token, "csrf": csrf.group(1), "next": "/"},
               headers={"Origin": "http://testserver"})
    return r.status_code


def test_the_dashboard_login_answers_429_to_an_address_that_keeps_failing(
        tether_app: Tether, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    web = dashboard_app(tether_app, token=TOKEN, allowed_hosts=["testserver"], throttle=Throttle(free=5, clock=clock))
    with (caplog.at_level(logging.WARNING, "tether.auth"),
          TestClient(web, client=ATTACKER, follow_redirects=False) as attacker,
          TestClient(web, client=OTHER, follow_redirects=False) as other):
        assert [_login(attacker, WRONG) for _ in range(6)] == [401] * 6
        page = attacker.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf
        r = attacker.post("/login", data={"token": TOKEN, "csrf": csrf.group(1)},
                          headers={"Origin": "http://testserver"})
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        assert "try again in 1 seconds" in r.text
        assert attacker.get("/metrics", headers=_bearer(TOKEN)).status_code == 429
        assert _login(other, TOKEN) == 303  # another address logs in at once
        clock.now += 1
        assert _login(attacker, TOKEN) == 303
    lines = [r.getMessage() for r in caplog.records if r.name == "tether.auth"]
    assert len(lines) == 6 and all(ATTACKER[0] in line and "login" in line for line in lines), lines
    assert WRONG not in caplog.text and TOKEN not in caplog.text


def test_wrong_metrics_bearer_tokens_count_as_failures(tether_app: Tether) -> None:
    web = dashboard_app(tether_app, token=TOKEN, allowed_hosts=["testserver"], throttle=Throttle(free=2))
    with TestClient(web, client=ATTACKER) as attacker:
        assert [attacker.get("/metrics", headers=_bearer(WRONG)).status_code for _ in range(4)] == [401, 401, 401, 429]
        assert attacker.get("/metrics").status_code == 429


def test_the_dashboard_token_needs_16_characters(tether_app: Tether, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least 16 characters"):
        dashboard_app(tether_app, token="x" * 15)
    dashboard_app(tether_app, token="x" * 16)
    out = CliRunner().invoke(cli, ["-d", f"sqlite:///{tmp_path / 'dash.db'}", "dashboard", "--token", "eight888"])
    assert out.exit_code != 0 and "at least 16 characters" in out.output, out.output


@pytest.mark.parametrize("trusted", [None, "127.0.0.1"])
def test_a_forwarded_for_header_names_the_client_only_from_a_trusted_proxy(tmp_path: Path,
                                                                            trusted: str | None) -> None:
    """A real uvicorn: by default X-Forwarded-For is ignored, so a client that
    claims a new address on every guess is still one address and is held back
    (uvicorn trusted the header from 127.0.0.1, which let any local client
    escape the per-address throttle); with ``--forwarded-allow-ips`` naming
    its proxy, the header names the client."""
    import urllib.error
    import urllib.request

    from tether.server.connections import Limits
    from tether.server.run import ServerThread

    store = open_store(f"sqlite:///{tmp_path / 'throttle.db'}")
    store.migrate()
    app = create_app(store, parse_tokens(f"{TOKEN} admin", "test"), throttle=Throttle(free=3))
    server = ServerThread(app, limits=Limits(forwarded_allow_ips=trusted)).start()

    def status(i: int) -> int:
        request = urllib.request.Request(f"{server.url}/v1/now",
                                         headers={**_bearer(WRONG), "X-Forwarded-For": f"198.51.100.{i}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        codes = [status(i) for i in range(1, 7)]
    finally:
        server.stop()
        store.close()
    assert codes == ([401] * 6 if trusted else [401] * 4 + [429] * 2)


def test_forwarded_allow_ips_must_name_an_address() -> None:
    from tether.server.connections import Limits

    with pytest.raises(ConfigError, match="forwarded_allow_ips"):
        Limits(forwarded_allow_ips=" ")
