"""Workers on a tether server against a hostile worker token (issue 41):
look-alike identities refused by the server itself and bury-unknown with a
short grace for admin tokens only (item 8); registrations capped per token
and per queue, the rows of long-gone workers pruned, and the lists of
workers bounded (item 3)."""

from __future__ import annotations

import http.client
import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tether.server import WorkerPolicy, create_app, parse_tokens
from tether.server.run import ServerThread
from tether.store import open_store
from tether.store.worker_rows import DEFAULT_WORKERS_PER_TOKEN
from tether.worker.pruner import Pruner

from .conftest import served

WORKER, ADMIN = secrets.token_urlsafe(20), secrets.token_urlsafe(20)
TOKENS = f"{WORKER} worker\n{ADMIN} admin"


class Api:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port or 80

        self.conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __call__(self, method: str, path: str, body: dict[str, Any] | None = None,
                 token: str = WORKER) -> tuple[int, dict[str, Any]]:
        """One request on a kept-alive connection (as an attacker would send them)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        try:
            self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            resp = self.conn.getresponse()
            return resp.status, json.loads(resp.read())
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with served(f"sqlite:///{tmp_path / 't.db'}", client_clock=False, tokens=TOKENS) as url:
        api = Api(url)
        yield api
        api.close()


@contextmanager
def serving(db: Path, policy: WorkerPolicy) -> Iterator[Api]:
    store = open_store(f"sqlite:///{db}")
    store.migrate()
    try:
        with ServerThread(create_app(store, parse_tokens(TOKENS, "test"), worker_policy=policy)) as server:
            api = Api(server.url)
            yield api
            api.close()
    finally:
        store.close()


def age_rows(db: Path, ids: list[str], seconds: float) -> None:
    """Make these workers last seen ``seconds`` ago (their owner's workers went silent)."""
    with sqlite3.connect(db) as conn:
        conn.executemany("UPDATE tether_workers SET last_seen = ? WHERE id = ?",
                         [(time.time() - seconds, i) for i in ids])


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


def test_ten_thousand_registrations_are_refused_past_the_cap(api: Api) -> None:
    """The attack of issue 41 (one token, 10,000 workers in 16 s), cut short:
    past DEFAULT_WORKERS_PER_TOKEN live workers, every registration is
    refused, and the stats list a bounded page of them with their count."""
    statuses = [api("POST", "/v1/workers", registration(f"w-{i}"))[0]
                for i in range(DEFAULT_WORKERS_PER_TOKEN + 30)]
    assert statuses[:DEFAULT_WORKERS_PER_TOKEN] == [200] * DEFAULT_WORKERS_PER_TOKEN
    assert set(statuses[DEFAULT_WORKERS_PER_TOKEN:]) == {403}
    status, body = api("POST", "/v1/workers", registration("one-more"))
    assert body["error"] == "too_many_workers" and "--max-workers-per-token" in body["message"]
    assert api("POST", "/v1/workers", registration("w-7"))[0] == 200  # its own again: a re-registration
    status, stats = api("GET", "/v1/stats", token=ADMIN)
    assert status == 200 and stats["workers_total"] == DEFAULT_WORKERS_PER_TOKEN and len(stats["workers"]) == 100
    status, page = api("GET", "/v1/workers/page?limit=10&offset=990", token=ADMIN)
    assert status == 200 and len(page["workers"]) == 10


def test_at_its_cap_a_token_makes_room_from_its_own_gone_workers(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with serving(db, WorkerPolicy(per_token=3, live_per_queue=None)) as api:
        for i in range(3):
            assert api("POST", "/v1/workers", registration(f"w-{i}"))[0] == 200
        assert api("POST", "/v1/workers", registration("w-3"))[1]["error"] == "too_many_workers"
        assert api("POST", "/v1/workers", registration("a-0"), token=ADMIN)[0] == 200  # admin: no cap
        age_rows(db, ["w-0"], 3600)  # silent an hour: gone
        assert api("POST", "/v1/workers", registration("w-3")) == (200, {})
        ids = sorted(w["id"] for w in api("GET", "/v1/workers", token=ADMIN)[1]["workers"])
        assert ids == ["a-0", "w-1", "w-2", "w-3"]  # w-0's row made room
        assert api("POST", "/v1/workers/stop", {"worker": "w-0"})[0] == 403  # and w-0 is no longer its to act for


def test_live_workers_per_queue_are_capped(tmp_path: Path) -> None:
    with serving(tmp_path / "t.db", WorkerPolicy(per_token=None, live_per_queue=2)) as api:
        assert api("POST", "/v1/workers", registration("m-0", queues=["mail"]))[0] == 200
        assert api("POST", "/v1/workers", registration("m-1", queues=["mail", "pdf"]))[0] == 200
        status, body = api("POST", "/v1/workers", registration("m-2", queues=["pdf", "mail"]))
        assert status == 403 and "queue 'mail'" in body["message"], body
        assert api("POST", "/v1/workers", registration("p-0", queues=["pdf"]))[0] == 200
        assert api("POST", "/v1/workers/stop", {"worker": "m-0"}) == (200, {})
        assert api("POST", "/v1/workers", registration("m-2", queues=["mail"]))[0] == 200  # m-0 stopped: room


def test_the_pruner_deletes_workers_rows_past_the_worker_retention(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = open_store(f"sqlite:///{db}")
    store.migrate()
    try:
        with ServerThread(create_app(store, parse_tokens(TOKENS, "test"))) as server:
            api = Api(server.url)
            for i in range(5):
                assert api("POST", "/v1/workers", registration(f"w-{i}"))[0] == 200
            assert api("POST", "/v1/workers/stop", {"worker": "w-1"}) == (200, {})
            api.close()
        age_rows(db, ["w-0", "w-2"], 8 * 86400)
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE tether_workers SET stopped_at = ? WHERE id = 'w-1'", (time.time() - 8 * 86400,))
        pruner = Pruner(store, {}, worker_age=7 * 86400.0)
        pruner.tick()
        assert pruner.workers_pruned == 3
        assert sorted(w.id for w in store.list_workers()) == ["w-3", "w-4"]
    finally:
        store.close()
