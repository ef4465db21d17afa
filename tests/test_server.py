"""The tether server's edges: tokens and scopes, size limits, malformed bodies,
the client clock, stale reports as 409, and the HTTP store's error mapping.

Backend-independent, so these run over SQLite only; the conformance suite
runs every store operation over the server on both backends.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tether import Tether
from tether.errors import AccessDenied, ConfigError, InvalidDSN, PayloadError, ServerUnavailable, StaleAttempt
from tether.model import JobState, NewJob
from tether.server import create_app, parse_tokens
from tether.server.run import ServerThread
from tether.store import Store, open_store
from tether.store.http import wire

from .conftest import served

WORKER, PRODUCER, ADMIN = (secrets.token_urlsafe(20) for _ in range(3))
TOKENS = f"{WORKER} worker\n{PRODUCER} producer # a comment\n{ADMIN} admin"


class Client:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port or 80

    def request(self, method: str, path: str, body: bytes | str | dict[str, Any] | None = None,
                token: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if isinstance(body, dict):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        assert resp.getheader("content-type", "").startswith("application/json"), data
        return resp.status, json.loads(data)


@pytest.fixture
def server_url(tmp_path: Path) -> Iterator[str]:
    with served(f"sqlite:///{tmp_path / 't.db'}", client_clock=False, tokens=TOKENS) as url:
        yield url


@pytest.fixture
def client(server_url: str) -> Client:
    return Client(server_url)


JOB = {"jobs": [{"task": "t", "args": {"x": 1}}]}


def register(client: Client, worker: str, token: str = WORKER) -> tuple[int, dict[str, Any]]:
    """Register a worker id for a token (a worker token acts only for those it registered)."""
    body = {"id": worker, "host": "h", "pid": 1, "proc_start": None, "queues": ["default"], "concurrency": 1}
    return client.request("POST", "/v1/workers", body, token=token)


def test_no_token_or_an_unknown_one_is_refused(client: Client) -> None:
    for token, headers in [(None, None), ("x" * 30, None), (None, {"Authorization": f"Basic {WORKER}"})]:
        status, body = client.request("GET", "/v1/now", token=token, headers=headers)
        assert status == 401 and body["error"] == "unauthorized", body
    status, body = client.request("GET", "/openapi.json")
    assert status == 401
    status, body = client.request("POST", "/v1/jobs", JOB)
    assert status == 401
    # Nothing was enqueued by the refused request.
    status, body = client.request("GET", "/v1/jobs", token=PRODUCER)
    assert (status, body["jobs"]) == (200, [])


def test_scopes_are_enforced(client: Client) -> None:
    assert client.request("POST", "/v1/jobs", JOB, token=WORKER)[0] == 403
    status, body = client.request("POST", "/v1/jobs", JOB, token=PRODUCER)
    assert status == 200 and len(body["ids"]) == 1
    claim = {"worker": "w1", "queues": ["default"], "limit": 1, "lease_ttl": 30}
    status, body = client.request("POST", "/v1/claim", claim, token=PRODUCER)
    assert status == 403 and "scope worker" in body["message"]
    assert register(client, "w1") == (200, {})
    status, body = client.request("POST", "/v1/claim", claim, token=WORKER)
    assert status == 200 and len(body["jobs"]) == 1
    for token in (WORKER, PRODUCER):
        assert client.request("POST", "/v1/migrate", {}, token=token)[0] == 403
        assert client.request("POST", "/v1/destroy", {"confirm": "destroy"}, token=token)[0] == 403
    assert client.request("POST", "/v1/migrate", {}, token=ADMIN) == (200, {"applied": []})
    # each scope that would do, once: admin grants everything
    assert client.request("POST", "/v1/prune", {"ages": {"succeeded": 0}, "limit": 1}, token=WORKER) == (
        403, {"error": "forbidden", "message": "prune needs a token with scope admin; this token has worker"})
    status, body = client.request("POST", "/v1/claim", claim, token=PRODUCER)
    assert body["message"] == "claim needs a token with scope worker or admin; this token has producer"
    assert client.request("GET", "/v1/stats", token=ADMIN)[0] == 200  # admin may call everything


def test_a_worker_tokens_metrics_leave_the_stats_gauges_out_and_say_so_once(
    server_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A remote worker's --metrics-port with its worker token: the stats it may
    not read are left out, with one warning, not one per scrape (found by a
    new user's walkthrough); the worker's own series stay."""
    from prometheus_client import generate_latest

    from tether.metrics import Metrics

    store = open_store(server_url, token=WORKER)
    metrics = Metrics().watch_store(store)
    with caplog.at_level(logging.WARNING, logger="tether.metrics"):
        pages = [generate_latest(metrics.registry).decode() for _ in range(3)]
    assert all("tether_queue_depth" not in p and "tether_jobs_in_flight" in p for p in pages)
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(warned) == 1 and "scope" in warned[0], warned
    store.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_keep_alive_connection_the_server_closed_is_not_reused(server_url: str, client: Client, kind: str) -> None:
    """After a server restart (here: a proxy resetting every connection), the
    client's idle keep-alive connection is dead. It used to be written into,
    and the call failed with ServerUnavailable (BrokenPipeError), a progress
    report included (a new user's walkthrough); now it is seen closed before
    reuse, and the call goes out on a new connection."""
    import asyncio

    from tether.chaos.proxy import TCPProxy

    parts = urlsplit(server_url)
    proxy = TCPProxy(parts.hostname or "127.0.0.1", parts.port or 80)
    store = open_store(f"http://127.0.0.1:{proxy.port}", token=WORKER)
    try:
        if kind == "sync":
            store.db_now()
            proxy.reset()
            time.sleep(0.2)  # the reset reaches the client's socket
            store.db_now()  # raised ServerUnavailable before
        else:
            assert register(client, "w1")[0] == 200
            async def twice() -> None:  # one loop: its idle connection is the one reset
                await store.claim_async("w1", ["default"], 1, 30.0)
                proxy.reset()
                await asyncio.sleep(0.2)
                await store.claim_async("w1", ["default"], 1, 30.0)

            asyncio.run(twice())
    finally:
        store.close()
        proxy.close()


def test_http_store_maps_refusals_to_access_denied(server_url: str) -> None:
    producer = open_store(server_url, token=PRODUCER)
    with pytest.raises(AccessDenied, match="scope worker"):
        producer.claim("w1", ["default"], 1, 30.0)
    stranger = open_store(server_url, token="y" * 32)
    with pytest.raises(AccessDenied, match="not one this server knows"):
        stranger.db_now()
    producer.close()
    stranger.close()


def test_oversized_bodies_get_413_with_a_clear_message(client: Client, server_url: str) -> None:
    big = {"jobs": [{"task": "t", "args": {"blob": "x" * (9 * 1024 * 1024)}}]}
    status, body = client.request("POST", "/v1/jobs", big, token=PRODUCER)
    assert status == 413 and body["error"] == "too_large" and "over this server's limit" in body["message"]
    # A lying Content-Length is cut off by the streamed count as well.
    conn = http.client.HTTPConnection(client.host, client.port, timeout=10)
    conn.putrequest("POST", "/v1/jobs")
    conn.putheader("Authorization", f"Bearer {PRODUCER}")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    chunk = b"x" * (1024 * 1024)
    try:
        for _ in range(9):
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server may answer and close before reading it all
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["error"] == "too_large"
    conn.close()
    # Through the store: a PayloadError-family refusal, nothing enqueued.
    s = open_store(server_url, token=PRODUCER)
    assert s.list_jobs() == []
    s.close()


@pytest.mark.parametrize(("raw", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b'{"jobs": [{"task": "t", "args": {"x": NaN}}]}', "NaN is not JSON"),
    (b'{"jobs": [{"task": "t", "args": {"x": "a\\u0000b"}}]}', "NUL"),
    (b'{"jobs": [{"task": "t", "args": {"x": "\\ud800"}}]}', "surrogate"),
    (b'{"jobs": [{"task": "t"}]}', "body.jobs[0].args is required"),
    (b'{"jobs": [{"task": "t", "args": {}, "priority": "high"}]}', "priority must be integer"),
    (b'{"jobs": [{"task": "t", "args": {}, "color": 1}]}', "unknown field 'color'"),
    (b'[' * 100_000 + b']' * 100_000, "nests JSON too deeply"),
    (b'\xff\xfe', "not UTF-8"),
    (b"null", "must be object"),  # found by schemathesis: a JSON null once passed as "no body"
    (b'{"jobs": [{"task": "t", "args": {"x": 1, "x": 2}}]}', "the key 'x' is given twice"),  # was collapsed
    (b'{"jobs": [{"task": "t", "args": {"x": 1e400}}]}', "out of range for a float"),  # was a 422
])
def test_malformed_bodies_get_400_with_a_clear_message(client: Client, raw: bytes, fragment: str) -> None:
    status, body = client.request("POST", "/v1/jobs", raw, token=PRODUCER,
                                  headers={"Content-Type": "application/json"})
    assert status == 400 and body["error"] == "bad_request", body
    assert fragment in body["message"]
    assert client.request("GET", "/v1/jobs", token=PRODUCER)[1]["jobs"] == []


def test_other_refusals_are_json(client: Client) -> None:
    status, body = client.request("POST", "/v1/jobs", b"task=t", token=PRODUCER,
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (status, body["error"]) == (415, "unsupported_media_type")
    bad_queue = {"jobs": [{"task": "t", "args": {}, "queue": "no spaces"}]}
    status, body = client.request("POST", "/v1/jobs", bad_queue, token=PRODUCER)
    assert (status, body["error"]) == (400, "bad_request") and "queue 'no spaces' does not match" in body["message"]
    # a pattern's $ is the end of the string (JSON Schema), not "before a final newline" (Python's)
    status, body = client.request("POST", "/v1/jobs", {"jobs": [{"task": "t", "args": {}, "queue": "default\n"}]},
                                  token=PRODUCER)
    assert (status, body["error"]) == (400, "bad_request") and "does not match" in body["message"]
    too_big = {"jobs": [{"task": "t", "args": {"blob": "x" * 300_000}}]}  # under the body limit, over the payload cap
    status, body = client.request("POST", "/v1/jobs", too_big, token=PRODUCER)
    assert (status, body["error"]) == (422, "payload_error") and "over the cap" in body["message"]
    # a key the schema's character count passes but PostgreSQL could not index (600 four-byte characters)
    wide = {"jobs": [{"task": "t", "args": {}, "exclusive_key": "\U0001f600" * 600}]}
    status, body = client.request("POST", "/v1/jobs", wide, token=PRODUCER)
    assert (status, body["error"]) == (422, "config_error") and "2400 bytes of UTF-8" in body["message"], (status, body)
    assert client.request("GET", "/v1/jobs/12345", token=PRODUCER)[1]["error"] == "job_not_found"
    assert client.request("GET", "/v1/jobs/abc", token=PRODUCER)[0] == 400
    assert client.request("GET", "/v1/jobs?limit=0", token=PRODUCER)[0] == 400
    assert client.request("GET", "/v1/jobs?color=red", token=PRODUCER)[0] == 400
    assert client.request("GET", "/v1/nothing", token=PRODUCER)[1]["error"] == "not_found"
    assert client.request("DELETE", "/v1/jobs", token=PRODUCER)[0] == 405


def test_client_clock_is_refused_unless_the_server_allows_it(client: Client, server_url: str) -> None:
    body = {**JOB, "now": "2030-01-01T00:00:00+00:00"}
    status, answer = client.request("POST", "/v1/jobs", body, token=PRODUCER)
    assert (status, answer["error"]) == (400, "client_clock_refused")
    s = open_store(server_url, token=ADMIN)
    with pytest.raises(ConfigError, match="unsafe-client-clock"):
        s.reap(10, now=s.db_now())
    s.close()
    # a read that takes a clock takes it as a query parameter, refused the same way
    status, answer = client.request("GET", "/v1/throughput?now=2030-01-01T00:00:00%2B00:00", token=WORKER)
    assert (status, answer["error"]) == (400, "client_clock_refused")
    assert client.request("GET", "/v1/throughput?buckets=2&bucket_seconds=60", token=WORKER)[0] == 200
    # ... and the document this server publishes says so: no 'now' anywhere.
    doc = client.request("GET", "/openapi.json", token=WORKER)[1]
    assert '"now"' not in json.dumps(doc["paths"]["/v1/claim"]["post"]["requestBody"])
    assert '"now"' not in json.dumps(doc["paths"]["/v1/throughput"]["get"]["parameters"])


def test_stale_report_is_409_with_the_fence_details(client: Client, server_url: str) -> None:
    client.request("POST", "/v1/jobs", JOB, token=PRODUCER)
    claim = {"worker": "w1", "queues": ["default"], "limit": 1, "lease_ttl": 30}
    for worker in ("w1", "w2", "someone-else"):  # one token's workers: the fence tells them apart
        register(client, worker)
    (job,) = client.request("POST", "/v1/claim", claim, token=WORKER)[1]["jobs"]
    stale = {"worker": "w1", "job_id": job["id"], "attempt": job["attempt"] + 1, "outcome": "failed",
             "error": "boom"}
    status, body = client.request("POST", "/v1/fail", stale, token=WORKER)
    assert status == 409 and body["error"] == "stale_attempt"
    assert (body["job_id"], body["attempt"], body["worker"], body["op"]) == (job["id"], job["attempt"] + 1,
                                                                             "w1", "fail")
    s = open_store(server_url, token=WORKER)
    with pytest.raises(StaleAttempt) as info:
        s.release("someone-else", job["id"], job["attempt"])
    assert (info.value.job_id, info.value.worker) == (job["id"], "someone-else")
    assert s.complete("w2", [(job["id"], job["attempt"], None)]) == set()
    assert s.complete("w1", [(job["id"], job["attempt"], '"ok"')]) == {job["id"]}
    s.close()


def _requests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ``METHOD path`` of every request http.client sends from now on (sent as ever)."""
    sent: list[str] = []
    real = http.client.HTTPConnection.request

    def request(conn: http.client.HTTPConnection, method: str, url: str, *args: Any, **kwargs: Any) -> None:
        sent.append(f"{method} {url}")
        real(conn, method, url, *args, **kwargs)

    monkeypatch.setattr(http.client.HTTPConnection, "request", request)
    return sent


def _state(s: Store, job_id: int) -> JobState:
    job = s.get_job(job_id)
    assert job is not None
    return job.state


def test_a_worker_round_is_one_request(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """complete_and_claim, a remote worker's usual round, goes out as one
    request: the successes (each fenced) and the next claim."""
    s = open_store(server_url, token=ADMIN)
    a, b, c = s.enqueue([NewJob(task="t", args_json="{}") for _ in range(3)])
    (first,) = s.claim("w1", ["default"], 1, 60.0)
    sent = _requests(monkeypatch)
    accepted, jobs = s.complete_and_claim("w1", [(first.id, first.attempt, '{"ok": 1}'),
                                                 (first.id + 100, 1, None)], ["default"], 5, 60.0)
    assert sent == ["POST /v1/complete-and-claim"]
    assert accepted == {first.id} and [j.id for j in jobs] == [b, c]
    monkeypatch.undo()
    done = s.get_job(a)
    assert done is not None and done.state is JobState.SUCCEEDED and done.result == {"ok": 1}
    s.close()


def test_complete_and_claim_long_polls_after_writing_its_successes(server_url: str) -> None:
    """The successes are written at once (one transaction with the first,
    empty, claim); the claim then waits on the server for a job, as a plain
    claim does, and the answer carries both."""
    s = open_store(server_url + "?wait=20", token=ADMIN)
    (a,) = s.enqueue([NewJob(task="t", args_json="{}")])
    (claimed,) = s.claim("w1", ["default"], 1, 120.0)
    with ThreadPoolExecutor(1) as pool:
        round_trip = pool.submit(s.complete_and_claim, "w1", [(a, claimed.attempt, None)], ["default"], 1, 120.0)
        deadline = time.monotonic() + 20
        while _state(s, a) is not JobState.SUCCEEDED:
            assert time.monotonic() < deadline and not round_trip.done(), "the successes were not written"
            time.sleep(0.01)
        # Only now is there a job: the claim that ran with the successes found none.
        (b,) = s.enqueue([NewJob(task="t", args_json="{}")])
        accepted, jobs = round_trip.result(timeout=30)
    assert accepted == {a} and [j.id for j in jobs] == [b]
    s.close()


def test_complete_and_claim_refuses_a_bad_result_whole(tmp_path: Path) -> None:
    """A result over the server's payload cap refuses the whole request:
    no success is written and nothing is claimed."""
    with served(f"sqlite:///{tmp_path / 't.db'}", tokens=f"{ADMIN} admin", max_payload_bytes=1024) as url:
        s = open_store(url, token=ADMIN)
        a, b, c = s.enqueue([NewJob(task="t", args_json="{}") for _ in range(3)])
        x, y = s.claim("w1", ["default"], 2, 60.0)
        with pytest.raises(PayloadError, match="result"):
            s.complete_and_claim("w1", [(x.id, x.attempt, '"ok"'), (y.id, y.attempt, json.dumps("x" * 2000))],
                                 ["default"], 1, 60.0)
        assert [_state(s, j) for j in (a, b, c)] == [JobState.RUNNING, JobState.RUNNING, JobState.QUEUED]
        s.close()


def test_complete_and_claim_against_an_older_server_takes_two_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A server that predates the combined operation answers 404 not_found
    (nothing written): the store does the round as complete then claim, and
    keeps doing so, saying it once in the log."""
    local = open_store(f"sqlite:///{tmp_path / 't.db'}")
    local.migrate()
    app = create_app(local, parse_tokens(f"{ADMIN} admin", "tokens"))
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", "") != "/v1/complete-and-claim"]
    with ServerThread(app) as server:
        s = open_store(server.url, token=ADMIN)
        ids = s.enqueue([NewJob(task="t", args_json="{}") for _ in range(4)])
        (first,) = s.claim("w1", ["default"], 1, 60.0)
        sent = _requests(monkeypatch)
        with caplog.at_level(logging.WARNING, logger="tether.store.http"):
            accepted, jobs = s.complete_and_claim("w1", [(first.id, first.attempt, None)], ["default"], 1, 60.0)
            assert accepted == {first.id} and [j.id for j in jobs] == [ids[1]]
            accepted, jobs = s.complete_and_claim("w1", [(jobs[0].id, jobs[0].attempt, None)], ["default"], 1,
                                                  60.0)
            assert accepted == {ids[1]} and [j.id for j in jobs] == [ids[2]]
        assert sent == ["POST /v1/complete-and-claim", "POST /v1/complete", "POST /v1/claim",
                        "POST /v1/complete", "POST /v1/claim"]
        assert len([r for r in caplog.records if "predates complete_and_claim" in r.message]) == 1
        s.close()
    local.close()


def test_openapi_document_lists_every_operation(client: Client) -> None:
    doc = client.request("GET", "/openapi.json", token=WORKER)[1]
    ops = {o["operationId"] for path in doc["paths"].values() for o in path.values()}
    assert ops == {op.name for op in wire.OPS}
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_unreachable_server_raises_server_unavailable() -> None:
    s = open_store("http://127.0.0.1:9/?timeout=2", token=WORKER)  # port 9 (discard): nothing listens
    with pytest.raises(ServerUnavailable, match="unreachable") as info:
        s.heartbeat("w1", [], 30.0)
    assert isinstance(info.value, ConnectionError)
    s.close()


def _tcp_ends(port: int) -> list[tuple[str, bool]]:
    """This process's connected TCP sockets with ``port`` at one end: which
    end each is (``client`` or ``server``) and whether it has TCP_NODELAY."""
    ends = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))  # closing the duplicate leaves the connection be
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        with sock:
            if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
                continue
            try:
                local, peer = sock.getsockname(), sock.getpeername()
            except OSError:
                continue  # a listening socket
            if port in (local[1], peer[1]):
                ends.append(("server" if local[1] == port else "client",
                             bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))))
    return ends


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds the server's end of a connection in /proc")
def test_both_ends_of_a_server_connection_set_tcp_nodelay(server_url: str) -> None:
    """uvicorn writes a response in two parts (headers, then body), and
    http.client a request with a body in two: with Nagle's algorithm on at
    either end, the second part waits for the peer's delayed ACK of the first
    (about 40 ms on Linux) on every request. The test server once left it on
    (its listening socket did not say it was TCP, so asyncio skipped
    TCP_NODELAY); the conformance suite paid 44 ms a request."""
    port = urlsplit(server_url).port or 80
    s = open_store(server_url, token=PRODUCER)
    try:
        job_id = s.enqueue([NewJob(task="t", args_json="{}")])[0]  # a request with a body
        assert s.get_job(job_id) is not None  # and one without, on the same keep-alive connection
        ends = _tcp_ends(port)
        assert sorted(end for end, _ in ends) == ["client", "server"], ends
        assert all(nodelay for _, nodelay in ends), ends
    finally:
        s.close()


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "no tokens configured"),
    ("short worker", "at least 16 characters"),
    (f"{WORKER} root", "unknown scope"),
    (f"{WORKER} worker extra", "TOKEN SCOPE"),
    (f"{WORKER} worker;{WORKER} admin", "listed twice"),
])
def test_bad_token_configuration_is_refused_at_start(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_tokens(text, "tokens")


def test_token_table_scopes() -> None:
    table = parse_tokens(TOKENS, "tokens")
    assert table.scopes_of(WORKER) == {"worker"}
    assert table.scopes_of(WORKER + "x") is None
    assert table.allows(frozenset({"admin"}), ("worker",))
    assert not table.allows(frozenset({"producer"}), ("worker",))


@pytest.mark.parametrize(("url", "fragment"), [
    ("http://user:pw@host:1", "must not carry credentials"),
    ("http://:80", "names no host"),
    ("http://host:1?wait=-1", "non-negative"),
    ("http://host:1?color=red", "unknown option"),
])
def test_bad_server_urls(url: str, fragment: str) -> None:
    with pytest.raises(InvalidDSN, match=fragment):
        Tether(url)


def test_a_server_url_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="needs a token"):
        Tether("http://127.0.0.1:1").store.db_now()
