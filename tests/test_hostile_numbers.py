"""Numbers from outside (issue 41, item 6): every one is ASCII digits within
its range, refused with a 400 (the API server), a 404 page (the dashboard) or
a usage error (the CLI) otherwise, never a 500; and a malformed session
cookie is no session, not a 500 on every request."""

from __future__ import annotations

import http.client
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from tether import Tether
from tether.cli.main import cli
from tether.dashboard import create_app
from tether.dashboard.security import COOKIE
from tether.model import NewJob
from tether.numbers import INT64_MAX, BadNumber, parse_int, parse_job_id

from .conftest import served

ADMIN = secrets.token_urlsafe(20)
TOKEN = "dashboard-token-0123456789"


@pytest.mark.parametrize("text", ["²", "--5", "-5", "+5", " 5", "5 ", "1_000", "٣", "\uff15", "", "0x10", "1e3",
                                  "9223372036854775808", "99999999999999999999999", "0"])
def test_a_job_id_is_ascii_digits_within_64_bits(text: str) -> None:
    with pytest.raises(BadNumber):
        parse_job_id(text)


def test_numbers_in_range_are_read() -> None:
    assert parse_job_id("3") == 3 and parse_job_id(str(INT64_MAX)) == INT64_MAX
    assert parse_int("-5", "n", lo=-10) == -5
    with pytest.raises(BadNumber, match="between 1 and 10"):
        parse_int("11", "n", lo=1, hi=10)


def three(app: Tether) -> None:
    """Jobs 1, 2 and 3."""
    assert app.store.enqueue([NewJob("t", "{}") for _ in range(3)]) == [1, 2, 3]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, int]]:
    with served(f"sqlite:///{tmp_path / 't.db'}", client_clock=False, tokens=f"{ADMIN} admin") as url:
        parts = urlsplit(url)
        yield parts.hostname or "", parts.port or 80


def _get(api: tuple[str, int], path: str) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(*api, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {ADMIN}"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize("path", [
    "/v1/jobs/--5", "/v1/jobs/%C2%B2", "/v1/jobs/%D9%A3", "/v1/jobs/9223372036854775808",
    "/v1/jobs/99999999999999999999999", "/v1/jobs/-1", "/v1/jobs/1_0",
    "/v1/jobs?limit=--5", "/v1/jobs?limit=%C2%B2", "/v1/jobs?limit=%D9%A3",
    "/v1/throughput?buckets=--1", "/v1/throughput?bucket_seconds=%C2%B2",
    "/v1/attempts?limit=--1", "/v1/unknown-tasks?since=%C2%B2",
])
def test_the_api_server_answers_crafted_numbers_with_400(api: tuple[str, int], path: str) -> None:
    status, body = _get(api, path)
    assert status == 400 and body["error"] == "bad_request", (path, body)


def test_an_arabic_indic_digit_is_not_job_3(api: tuple[str, int], tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 't.db'}")
    try:
        three(app)
    finally:
        app.close()
    assert _get(api, "/v1/jobs/3")[0] == 200
    assert _get(api, "/v1/jobs/%D9%A3")[0] == 400


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[Tether, TestClient]]:
    app = Tether(f"sqlite:///{tmp_path / 'd.db'}")
    app.migrate()
    with TestClient(create_app(app, token=TOKEN, allowed_hosts=["testserver"]), follow_redirects=False,
                    raise_server_exceptions=False) as client:
        page = client.get("/login")
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        r = client.post("/login", data={"token": TOKEN, "csrf": csrf, "next": "/"},
                        headers={"Origin": "http://testserver"})
        assert r.status_code == 303, r.text
        yield app, client
    app.close()


@pytest.mark.parametrize("path", ["/jobs/9223372036854775808", "/jobs/99999999999999999999999", "/jobs/%C2%B2",
                                  "/jobs/%D9%A3", "/jobs/0", "/jobs/--5"])
def test_the_dashboard_answers_crafted_job_paths_with_a_404_page(dashboard: tuple[Tether, TestClient],
                                                                 path: str) -> None:
    app, client = dashboard
    three(app)
    r = client.get(path)
    assert r.status_code == 404 and "no job" in r.text, (path, r.status_code)


@pytest.mark.parametrize("wanted", ["%C2%B2", "%D9%A3", "9223372036854775808", "99999999999999999999999", "--5"])
def test_the_dashboards_job_search_refuses_crafted_ids(dashboard: tuple[Tether, TestClient], wanted: str) -> None:
    app, client = dashboard
    three(app)
    r = client.get(f"/jobs?id={wanted}")
    assert r.status_code == 303 and r.headers["location"].startswith("/jobs?"), (wanted, r.status_code)
    assert client.get("/jobs?id=3").headers["location"] == "/jobs/3"


def test_crafted_ids_in_actions_are_refused(dashboard: tuple[Tether, TestClient]) -> None:
    _, client = dashboard
    csrf = client.get("/jobs").text.split('name="csrf" value="')[1].split('"')[0]
    origin = {"Origin": "http://testserver"}
    assert client.post("/jobs/%C2%B2/cancel", data={"csrf": csrf}, headers=origin).status_code == 404
    assert client.post("/jobs/99999999999999999999999/retry", data={"csrf": csrf}, headers=origin).status_code == 404
    r = client.post("/jobs/retry-dead", data={"csrf": csrf, "ids": "²,٣,99999999999999999999999"}, headers=origin)
    assert r.status_code == 303


def _asgi_get(app: Any, path: str, headers: list[tuple[bytes, bytes]]) -> int:
    """GET ``path`` with these exact header bytes (the test client re-encodes
    them: a Latin-1 "\xb2" would reach the app as UTF-8), as a server hands
    them over; the response status."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), *headers], "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
    anyio.run(app, scope, receive, send)
    return int(next(m["status"] for m in sent if m["type"] == "http.response.start"))


@pytest.mark.parametrize("cookie", ["a.x.²1.x".encode("latin-1"), "a.x.²1.x".encode(), "a.x.٣.x".encode(),
                                    b"p.x.--5.x", "a.x.1.²".encode("latin-1"), b"a.x.99999999999999999999999.x"])
def test_a_malformed_session_cookie_is_no_session(tmp_path: Path, cookie: bytes) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'd.db'}")
    app.migrate()
    try:
        dashboard = create_app(app, token=TOKEN, allowed_hosts=["testserver"])
        raw = [(b"cookie", f"{COOKIE}=".encode() + cookie)]  # "²" is the byte \xb2 in a Latin-1 header
        assert _asgi_get(dashboard, "/login", raw) == 200
        assert _asgi_get(dashboard, "/", raw) == 303  # to the login page: not logged in, not locked out
    finally:
        app.close()


def test_a_signature_with_non_ascii_text_is_refused_not_a_500(dashboard: tuple[Tether, TestClient]) -> None:
    _, client = dashboard
    assert client.get("/jobs?notice=hi&ns=%C2%B2").status_code == 200
    r = client.post("/jobs/retry-dead", data={"csrf": "²"}, headers={"Origin": "http://testserver"})
    assert r.status_code == 403


@pytest.mark.parametrize("given", ["²", "٣", "-5", "99999999999999999999999", "0", "1_0"])
def test_the_cli_refuses_crafted_job_ids(tmp_path: Path, given: str) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    app = Tether(db)
    app.migrate()
    three(app)
    app.close()
    for command in (["job", given], ["cancel", given], ["retry", given]):
        result = CliRunner().invoke(cli, ["-d", db, *command[:1], "--", *command[1:]])
        assert result.exit_code == 2 and "job id" in result.output, (command, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_workers_page_is_paged_and_its_offset_checked(dashboard: tuple[Tether, TestClient]) -> None:
    """Issue 41 item 3: 10,000 workers' rows froze this page; it shows 100 at a time."""
    from tether.model import WorkerInfo

    app, client = dashboard
    for i in range(120):
        app.store.register_worker(WorkerInfo(id=f"w-{i:03}", host="h", pid=i, proc_start=None, started_at=None,  # type: ignore[arg-type]
                                             last_seen=None, queues=["default"], concurrency=1))  # type: ignore[arg-type]
    first = client.get("/workers")
    assert first.status_code == 200 and first.text.count("<code>w-") == 100 and "120 not stopped" in first.text
    assert 'href="/workers?offset=100"' in first.text
    rest = client.get("/workers?offset=100")
    assert rest.status_code == 200 and rest.text.count("<code>w-") == 20
    for bad in ("%C2%B2", "--5", "99999999999999999999999", "-1"):
        assert client.get(f"/workers?offset={bad}").status_code == 400, bad
