"""What a hostile client can make the two HTTP faces hold, against real
uvicorn processes over raw sockets (issue 41, items 1 and 2): bodies,
header blocks, requests that never end, and connections by the thousand."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import Tether

from .http_raw import Served, send_until_answered, status_of

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


LOGIN = "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\n" \
        "Content-Type: application/x-www-form-urlencoded\r\n"


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
