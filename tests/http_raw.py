"""Real ``tether server`` and ``tether dashboard`` processes, and raw-socket
HTTP against them: what a hostile client sends is not what an HTTP library
lets one send (a body that never ends, a header block that never ends)."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """``python -m tether -d DB COMMAND --port P ARGS...`` until closed; ``port`` once it answers."""

    def __init__(self, db_url: str, tmp: Path, command: str, *args: str,
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = tmp / f"{command}-{self.port}.log"
        full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tether", "-d", db_url, command, "--port", str(self.port), *args],
                env=full_env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"{command} did not listen: {self.log.read_text()}"
                time.sleep(0.05)

    def connect(self, source: str = "127.0.0.1", timeout: float = 10) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", self.port))
        return sock

    def request(self, head: str, body: bytes = b"", source: str = "127.0.0.1") -> bytes:
        """One request on a fresh connection; the whole answer (the server closes: Connection: close)."""
        with self.connect(source) as sock:
            sock.sendall(head.encode("latin-1") + b"Connection: close\r\n\r\n" + body)
            return read_all(sock)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def close(self) -> str:
        """Stop it; its log."""
        stop(self.proc)
        return self.log.read_text()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not ended in 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def read_all(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    """What the server sends until it closes (or resets) the connection."""
    out = bytearray()
    while len(out) < limit:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


def send_until_answered(sock: socket.socket, chunks: Iterable[bytes]) -> tuple[int, bytes]:
    """Send ``chunks`` until the server answers (or stops reading, or closes):
    how many bytes went out, and the answer. The server must answer before
    the chunks run out for the answer to say it refused early."""
    sent = 0
    for chunk in chunks:
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            break
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            break
        sent += len(chunk)
    return sent, read_all(sock)


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP answer (0: none came)."""
    if not answer.startswith(b"HTTP/1."):
        return 0
    return int(answer.split(b" ", 2)[1])
