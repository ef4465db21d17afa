"""A fuzz pass over every dashboard route and form (issue 41), as
test_server_fuzz.py is for the API: hypothesis generates paths, path
parameters, query strings, form bodies, CSRF tokens, origins and session
cookies, logged in and not, against the Starlette app over a seeded SQLite
file. Every answer must be a deliberate one (no 500), a page must never
carry generated text unescaped, and a redirect must stay on the dashboard.

Crafted numbers (non-ASCII digits, out-of-range ids, a cookie whose issue
time is "²1") are issue 41 item 6, fixed on another branch (it adds
``tether.numbers``): until that is merged the cases that meet them are
expected to fail, and they must pass once it is."""

from __future__ import annotations

import asyncio
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tether import Tether
from tether.dashboard import create_app
from tether.server.throttle import Throttle

from .dashboard_seed import seed

TOKEN = "fuzz-token-0123456789"
ORIGIN = "http://testserver"
#: generated text carries it; a page that shows it unescaped fails
MARK = "<fz'\">"
ITEM6 = importlib.util.find_spec("tether.numbers") is not None
#: until item 6 is merged: the generated numbers and cookies reach its 500s
item6 = pytest.mark.xfail(not ITEM6, strict=True, reason="issue 41 item 6 (crafted numbers, cookies) is "
                                                        "fixed on branch sec-data")

GET_ROUTES = ["/", "/jobs", "/jobs/{id}", "/workflows/{id}", "/batches/{id}", "/workers", "/recoveries", "/schedules",
              "/login", "/metrics", "/static/{name}", "/{other}"]
POST_ROUTES = ["/jobs/retry-dead", "/jobs/bulk", "/jobs/bulk/run", "/jobs/{id}/rerun", "/jobs/{id}/cancel", "/jobs/{id}/retry", "/queues/{queue}/pause",
               "/queues/{queue}/resume", "/queues/{queue}/limits", "/login", "/logout"]
QUERY_KEYS = ["id", "state", "queue", "task", "tag", "meta", "args", "before", "trail", "next", "notice", "ns"]
FORM_KEYS = ["token", "next", "concurrency", "rate", "ids", "do", "state", "queue", "meta", "args", "tag"]

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
_numbers = st.one_of(st.integers(-2**70, 2**70).map(str), st.from_regex(r"[-+]?[0-9]{1,25}", fullmatch=True),
                     st.sampled_from(["²", "--5", "٣", "1e3", "0x10", " 7", "9223372036854775808", "1,2,²"]))
values = st.one_of(_text, _numbers, _text.map(lambda t: t + MARK),
                   st.sampled_from(["", "dead", "reports", "reports.build", "//evil.example", "/\\evil",
                                    "javascript:alert(1)", "5/min", "0", "1", "2", "3", "%", "%00", "..", "../.."]))
cookie_values = st.one_of(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters=";,\\\"\x7f"), max_size=60),
    st.builds(lambda k, s, i, g: f"{k}.{s}.{i}.{g}", st.sampled_from(["a", "p", "x", ""]), _numbers, _numbers,
              _numbers).filter(lambda v: all(0x21 <= ord(c) <= 0xFF and c not in ';,\\"' for c in v)))


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    app = Tether(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'dash.db'}")
    app.migrate()
    seed(app)
    # failed logins are most of what it generates: the throttle is tested elsewhere
    yield create_app(app, token=TOKEN, allowed_hosts=["testserver"],
                     throttle=Throttle(free=10**9, global_free=10**9))
    app.close()


class Browsers:
    """A browser logged in and one not, kept across examples (a login per
    example would be most of the run); ``csrf`` is each one's form token."""

    def __init__(self, web: Any) -> None:
        self.web = web
        self.clients = {False: TestClient(web, follow_redirects=False), True: TestClient(web, follow_redirects=False)}
        self.csrf = {False: self._token(False), True: ""}
        self.log_in()

    def _token(self, logged_in: bool) -> str:
        c = self.clients[logged_in]
        m = re.search(r'name="csrf" value="([^"]+)"', c.get("/" if logged_in else "/login").text)
        assert m, "no CSRF field"
        return m.group(1)

    def log_in(self) -> None:
        c = self.clients[True]
        c.cookies.clear()
        r = c.post("/login", data={"token": TOKEN, "csrf": _login_csrf(c), "next": "/"}, headers={"Origin": ORIGIN})
        assert r.status_code == 303, r.text
        self.csrf[True] = self._token(True)

    def after(self, logged_in: bool, path: str) -> None:
        """Put a browser back as it was (a generated POST may have logged it out, or in)."""
        if logged_in and path == "/logout":
            self.log_in()
        if not logged_in and path == "/login" and self.clients[False].get("/").status_code == 200:
            self.clients[False].cookies.clear()  # (a generated form cannot hold the token, but if it did)
            self.csrf[False] = self._token(False)


def _login_csrf(c: TestClient) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text)
    assert m, "no CSRF field on /login"
    return m.group(1)


@pytest.fixture(scope="module")
def browsers(web: Any) -> Browsers:
    return Browsers(web)


def _path(template: str, value: str) -> str:
    return re.sub(r"\{\w+\}", quote(value, safe=""), template)


def _check(response: Any, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.text[:500]}"
    if response.headers.get("content-type", "").startswith("text/html"):
        assert "<fz" not in response.text, f"{what}: generated text unescaped in the page"
    location = response.headers.get("location")
    if location is not None:  # a path, or (Starlette's slash redirects) the dashboard's own origin
        path = location.removeprefix(ORIGIN)
        assert path.startswith("/") and not path.startswith("//") and "\\" not in path, \
            f"{what}: redirects off the dashboard to {location!r}"


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])


@item6
@SETTINGS
@example(template="/jobs", param="", logged_in=True, query={"id": "²"})
@example(template="/jobs/{id}", param="9223372036854775808", logged_in=True, query={})
@example(template="/jobs/{id}", param="99999999999999999999999", logged_in=True, query={})
@example(template="/", param="", logged_in=True, query={"notice": "²", "ns": "²"})
@given(template=st.sampled_from(GET_ROUTES), param=values, logged_in=st.booleans(),
       query=st.dictionaries(st.one_of(st.sampled_from(QUERY_KEYS), _text), values, max_size=4))
def test_every_page_answers_generated_paths_and_queries(browsers: Browsers, template: str, param: str,
                                                        logged_in: bool, query: dict[str, str]) -> None:
    path = _path(template, param)
    _check(browsers.clients[logged_in].get(path, params=query), f"GET {path} {query}")


@item6
@SETTINGS
@example(template="/jobs/retry-dead", param="", logged_in=True, form={"ids": "1,²,٣"}, csrf="valid", origin=ORIGIN)
@example(template="/queues/{queue}/limits", param="reports", logged_in=True, form={"concurrency": "²"},
         csrf="valid", origin=ORIGIN)
@given(template=st.sampled_from(POST_ROUTES), param=values, logged_in=st.booleans(),
       form=st.dictionaries(st.one_of(st.sampled_from(FORM_KEYS), _text), values, max_size=5),
       csrf=st.sampled_from(["valid", "missing", "wrong"]), origin=st.sampled_from([ORIGIN, None, "http://evil"]))
def test_every_form_answers_generated_bodies(browsers: Browsers, template: str, param: str, logged_in: bool,
                                             form: dict[str, str], csrf: str, origin: str | None) -> None:
    data = dict(form)
    if csrf != "missing":
        data["csrf"] = browsers.csrf[logged_in] if csrf == "valid" else "x" + MARK
    path = _path(template, param)
    try:
        response = browsers.clients[logged_in].post(path, data=data, headers={"Origin": origin} if origin else {})
    finally:
        browsers.after(logged_in, path)
    _check(response, f"POST {path} {data} origin={origin}")
    if (origin != ORIGIN or csrf != "valid") and not (logged_in and path == "/login"):  # that one redirects
        assert response.status_code in (401, 403, 404, 405, 413, 422, 429), \
            f"POST {path} without same origin and CSRF token: {response.status_code}"


@item6
@SETTINGS
@example(cookie="a.x.²1.x", path="/login")
@given(cookie=cookie_values, path=st.sampled_from(["/login", "/", "/jobs", "/metrics"]))
def test_any_session_cookie_is_a_session_or_none(web: Any, cookie: str, path: str) -> None:
    """Another app on the same host name can set this cookie: a malformed one
    must read as no session, never lock the browser out with 500s."""
    for raw in (cookie.encode("latin-1"), cookie.encode()):  # as sent, byte for byte; as a browser's UTF-8
        response = _raw_get(web, path, [(b"cookie", b"tether_session=" + raw)])
        _check(response, f"GET {path} with cookie {raw!r}")
        assert response.status_code in (200, 303, 401), f"{path} with cookie {raw!r}: {response.status_code}"


@dataclass
class _Answer:
    status_code: int
    headers: dict[str, str]
    text: str


def _raw_get(web: Any, path: str, headers: list[tuple[bytes, bytes]]) -> _Answer:
    """A GET straight through ASGI: header bytes exactly as given (the test
    client's httpx re-encodes them as UTF-8, which no hostile client must do)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), *headers], "client": ("192.0.2.1", 1), "server": ("testserver", 80)}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(web(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return _Answer(start["status"], {k.decode(): v.decode("latin-1") for k, v in start["headers"]},
                   body.decode("utf-8", "replace"))


def test_huge_forms_are_refused_logged_in_or_not(browsers: Browsers) -> None:
    """Every POST route reads its form through the capped reader (item 1)."""
    for logged_in in (False, True):
        for template in POST_ROUTES:
            path = _path(template, "1")
            data = {"csrf": browsers.csrf[logged_in], "ids": "1," * 40_000}
            response = browsers.clients[logged_in].post(path, data=data, headers={"Origin": ORIGIN})
            # not logged in: refused unread; logged in, /login redirects unread
            expected = {(False, True): 413, (True, True): 303, (True, False): 413}.get(
                (logged_in, path == "/login"), 401)
            assert response.status_code == expected, (path, logged_in, response.text[:200])
