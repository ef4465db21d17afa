"""Workers on a tether server against a hostile worker token (issue 41):
look-alike identities refused by the server itself (item 8), bury-unknown
with a short grace for admin tokens only (item 8)."""

from __future__ import annotations

import http.client
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .conftest import served

WORKER, ADMIN = secrets.token_urlsafe(20), secrets.token_urlsafe(20)
TOKENS = f"{WORKER} worker\n{ADMIN} admin"


class Api:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port or 80

    def __call__(self, method: str, path: str, body: dict[str, Any] | None = None,
                 token: str = WORKER) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with served(f"sqlite:///{tmp_path / 't.db'}", client_clock=False, tokens=TOKENS) as url:
        yield Api(url)


def registration(wid: str, host: str = "h", queues: list[str] | None = None) -> dict[str, Any]:
    return {"id": wid, "host": host, "pid": 1, "proc_start": None, "queues": queues or ["default"], "concurrency": 1}


@pytest.mark.parametrize(("wid", "host"), [("w\u200b1", "h"), ("w-\u202e1", "h"), ("w\u043e1", "h"),
                                           ("w-\x1b[2J", "h"), ("\uff57", "h"), ("w1", "h\u200b"),
                                           ("w1", "h\u043e\u0073t")])
def test_the_server_refuses_look_alike_worker_identities(api: Api, wid: str, host: str) -> None:
    status, body = api("POST", "/v1/workers", registration(wid, host))
    assert status == 422 and body["error"] == "config_error" and "refused" in body["message"], body
    assert api("GET", "/v1/workers", token=ADMIN) == (200, {"workers": []})


def test_bury_unknown_with_a_short_grace_needs_the_admin_scope(api: Api) -> None:
    short = {"queues": ["default"], "grace": 0, "limit": 100}
    status, body = api("POST", "/v1/bury-unknown", short)
    assert status == 403 and "admin" in body["message"], body
    assert api("POST", "/v1/bury-unknown", {**short, "grace": 3599.9})[0] == 403
    assert api("POST", "/v1/bury-unknown", {**short, "grace": 3600}) == (200, {"buried": []})
    assert api("POST", "/v1/bury-unknown", short, token=ADMIN) == (200, {"buried": []})
