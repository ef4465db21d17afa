"""What a hostile client can make the two HTTP faces hold, against real
uvicorn processes over raw sockets (issue 41, items 1 and 2): bodies,
header blocks, requests that never end, and connections by the thousand."""

from __future__ import annotations

import secrets
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import Tether

from .http_raw import Served, read_all, send_until_answered, status_of

pytestmark = pytest.mark.processes

TOKEN = secrets.token_urlsafe(24)
MiB = 1 << 20
#: what a test client is willing to send before it concludes the server is buffering it all
PATIENCE = 32 * MiB


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'limits.db'}"
    app = Tether(url)
    app.migrate()
    app.close()
    return url


@pytest.fixture
def dashboard(db: str, tmp_path: Path) -> Iterator[Served]:
    served = Served(db, tmp_path, "dashboard", "--token", TOKEN)
    yield served
    served.close()


def _filler(size: int = 64 * 1024) -> Iterator[bytes]:
    chunk = b"token=" + b"x" * (size - 6)
    sent = 0
    while sent < PATIENCE:
        yield chunk
        sent += len(chunk)


def _chunked(size: int = 64 * 1024) -> Iterator[bytes]:
    for data in _filler(size):
        yield f"{len(data):x}\r\n".encode() + data + b"\r\n"


FORM = "application/x-www-form-urlencoded"
LOGIN = f"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\nContent-Type: {FORM}\r\n"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_the_dashboard_refuses_a_huge_login_body_before_it_has_arrived(dashboard: Served, framing: str) -> None:
    """A 1 GB login body: answered 413 while the client is still sending,
    having read at most the cap (and what the socket buffers hold). Before,
    the dashboard read all of it and only then sliced it to 64 KiB: no
    answer came while the client still had data to send."""
    head = LOGIN + (f"Content-Length: {1 << 30}\r\n" if framing == "content-length"
                    else "Transfer-Encoding: chunked\r\n")
    with dashboard.connect() as sock:
        sock.sendall(head.encode() + b"\r\n")
        sent, answer = send_until_answered(sock, _filler() if framing == "content-length" else _chunked())
    assert status_of(answer) == 413, answer[:300]
    assert sent < PATIENCE, "the dashboard read the whole body before answering"
    assert b"65536 bytes" in answer
    rss = dashboard.rss_kib()
    assert rss < 300 * 1024, f"{rss} KiB"


# -- item 2: headers, slow requests, connections, on both faces ------------------------------------
#: where each face answers a plain GET (the server's needs the token)
GET = {"server": f"GET /v1/now HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n",
       "dashboard": "GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"}
FACES = sorted(GET)


def _serve(face: str, db: str, tmp_path: Path, *options: str) -> Served:
    if face == "server":
        tokens = tmp_path / "tokens"
        tokens.write_text(f"{TOKEN} admin\n")
        return Served(db, tmp_path, "server", "--token-file", str(tokens), "--log-level", "info", *options)
    return Served(db, tmp_path, "dashboard", "--token", TOKEN, *options)


def _post_head(face: str, length: int) -> bytes:
    """The head of a POST whose route reads its body: enqueue, or the login form."""
    path, ctype = ("/v1/jobs", "application/json") if face == "server" else ("/login", FORM)
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\nAuthorization: Bearer "
            f"{TOKEN}\r\nContent-Type: {ctype}\r\nContent-Length: {length}\r\n\r\n").encode()


@pytest.fixture(params=FACES)
def face(request: pytest.FixtureRequest, db: str, tmp_path: Path) -> Iterator[tuple[str, Served]]:
    """Either face, with a one-second request timeout."""
    served = _serve(request.param, db, tmp_path, "--request-timeout", "1")
    yield request.param, served
    served.close()


def test_each_face_still_answers_within_its_limits(face: tuple[str, Served]) -> None:
    name, served = face
    answer = served.request(GET[name])
    assert status_of(answer) == 200, answer[:300]


def test_a_100_mb_header_line_is_refused_as_it_arrives(face: tuple[str, Served]) -> None:
    """Before: uvicorn's httptools parser took any header line; the API
    server's memory grew with it until the request ended."""
    name, served = face
    with served.connect() as sock:
        sock.sendall((GET[name] + "X-Big: ").encode())
        chunk = b"a" * (64 * 1024)
        sent, answer = send_until_answered(sock, (chunk for _ in range(100 * MiB // len(chunk))))
    assert status_of(answer) == 431, answer[:300]
    assert sent < 100 * MiB


def test_millions_of_header_lines_are_refused_early(face: tuple[str, Served]) -> None:
    """~4 million small header lines (the issue's 52 MB): 431 after the
    first hundred, long before the client is through."""
    name, served = face
    lines = b"a: b\r\n" * 10_000
    with served.connect() as sock:
        sock.sendall(GET[name].encode())
        sent, answer = send_until_answered(sock, (lines for _ in range(400)))
    assert status_of(answer) == 431, answer[:300]
    assert sent < 400 * len(lines)


@pytest.mark.parametrize("how", ["silent", "trickling headers", "half a body"])
def test_a_request_that_never_arrives_whole_is_closed_after_the_timeout(face: tuple[str, Served], how: str) -> None:
    """Before: a connection that never finished its request stayed open for
    good (uvicorn's keep-alive timer runs only between requests), and one
    sending a header line now and then, or a body byte, too."""
    name, served = face
    with served.connect() as sock:
        if how == "half a body":
            sock.sendall(_post_head(name, 1000) + b"x" * 100)
        answer = b""
        for n in range(50):  # 0.2 s apart: up to 10 s, ten times the timeout
            if how == "trickling headers":
                try:
                    sock.sendall(b"GET / HTTP/1.1\r\n" if n == 0 else f"x-{n}: y\r\n".encode())
                except (BrokenPipeError, ConnectionResetError):
                    break
            readable, _, _ = select.select([sock], [], [], 0.2)
            if readable:
                answer = read_all(sock)
                break
        else:
            pytest.fail("the connection is still open after ten times the request timeout")
    assert status_of(answer) in (408, 0), answer[:300]  # 408, or closed mid-answer
    assert "did not arrive whole" in served.close()


@pytest.mark.parametrize("name", FACES)
def test_connections_over_the_caps_are_refused_while_a_real_request_succeeds(db: str, tmp_path: Path,
                                                                             name: str) -> None:
    """Before: connections were not capped; 1,100 silent ones exhausted the
    file limit and every real request failed. Now one address holds at most
    its share, and a connection past a cap is answered 503 at once, unread."""
    served = _serve(name, db, tmp_path, "--max-connections", "30", "--max-connections-per-client", "10")
    held: list[socket.socket] = []
    try:
        for _ in range(10):
            held.append(served.connect("127.0.0.2"))
        with served.connect("127.0.0.2") as extra:  # the 11th from that address
            assert status_of(read_all(extra)) == 503
        assert status_of(served.request(GET[name])) == 200  # another address: served
        for source in ("127.0.0.3", "127.0.0.4"):
            for _ in range(10):
                held.append(served.connect(source))
        with served.connect("127.0.0.5") as extra:  # the 31st in all
            answer = read_all(extra)
        assert status_of(answer) == 503 and b"over 30 open connections" in answer
        readable, _, _ = select.select(held, [], [], 0.2)
        assert not readable, "a connection within the caps was refused"
        for sock in held[:5]:
            sock.close()
        answer = b""
        for _ in range(50):  # the server sees the closes soon after
            answer = served.request(GET[name])
            if status_of(answer) == 200:
                break
            select.select([], [], [], 0.1)
        assert status_of(answer) == 200, answer[:300]
    finally:
        for sock in held:
            sock.close()
        log = served.close()
    assert "refused a request from 127.0.0.2: over 10 open connections from 127.0.0.2" in log


@pytest.mark.parametrize("name", FACES)
def test_a_client_gone_mid_upload_is_one_log_line(db: str, tmp_path: Path, name: str) -> None:
    """Before: an ERROR with a whole traceback (the server's handler, and
    uvicorn's 'Exception in ASGI application' for the dashboard)."""
    served = _serve(name, db, tmp_path)
    with served.connect() as sock:
        sock.sendall(_post_head(name, 60000) + b"x" * 1000)
        select.select([sock], [], [], 0.3)  # the server is reading the body now
    log = ""
    for _ in range(100):
        log = served.log.read_text()
        if "disconnected before its request was read" in log:
            break
        select.select([], [], [], 0.1)
    log = served.close()
    gone = [line for line in log.splitlines() if "disconnected before its request was read" in line]
    assert len(gone) == 1, log
    assert "Traceback" not in log and "ERROR" not in log, log


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_both_of_uvicorns_parsers_are_held_to_the_limits(db: str, http: str) -> None:
    """The dashboard extra has no httptools, so uvicorn parses with h11
    there: the same limits hold with either (h11 answers its own size limit
    with 400)."""
    from tether.server import create_app, parse_tokens
    from tether.server.connections import Limits
    from tether.server.run import ServerThread
    from tether.store import open_store

    store = open_store(db)
    limits = Limits(request_timeout=0.5, max_headers=20, max_header_bytes=4096)
    try:
        with ServerThread(create_app(store, parse_tokens(f"{TOKEN} admin", "test")), limits=limits,
                          http=http) as server:
            port = server.port

            def ask(data: bytes) -> bytes:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                    sock.sendall(data)
                    return read_all(sock)

            head = GET["server"]
            assert status_of(ask(f"{head}Connection: close\r\n\r\n".encode())) == 200
            assert status_of(ask(f"{head}X-Big: {'a' * 5000}\r\n\r\n".encode())) == 431
            assert status_of(ask(f"{head}X-Big: {'a' * 100_000}".encode())) in (400, 431)  # unfinished
            assert status_of(ask((head + "a: b\r\n" * 21 + "\r\n").encode())) == 431
            assert status_of(ask(head.encode())) == 408  # never ends its head
            assert status_of(ask(_post_head("server", 100) + b"{")) == 408  # nor its body
    finally:
        store.close()
