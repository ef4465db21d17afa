"""``tether.contrib.asgi.worker_lifespan`` in a real uvicorn process serving the
README's FastAPI app (``tests/asgi_app.py``), on both backends: jobs enqueued
through the web app run in its worker, and SIGTERM mid-job releases the job
(queued again, not failed, its retry budget untouched)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tether import JobState, Outcome, Tether

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _post(port: int, path: str) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(json.loads(resp.read())["job_id"])


@pytest.mark.parametrize(("endpoint", "result"), [("resize", "resized a.png"), ("thumbnail", "thumbnail of a.png")])
def test_sigterm_to_uvicorn_releases_the_embedded_workers_job(db_url: str, tmp_path: Path, endpoint: str,
                                                              result: str) -> None:
    """An async handler (cancelled at its await) and a def one (on a thread,
    told through ctx.cancelled): either way the job goes back to the queue."""
    app = Tether(db_url)
    app.migrate()
    port = _free_port()
    log = tmp_path / "uvicorn.log"
    env = {**os.environ, "TETHER_DATABASE_URL": db_url,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "asgi_app:api", "--host", "127.0.0.1",
                                   "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # "Uvicorn running on", not "Application startup complete": uvicorn
        # logs the latter when the lifespan has started, before it binds its
        # socket, and a request sent between the two was refused
        _wait(lambda: "Uvicorn running on" in log.read_text() or server.poll() is not None, 30,
              "uvicorn to start")
        assert server.poll() is None, log.read_text()

        quick = _post(port, f"/{endpoint}?path=a.png")
        done = _wait(lambda: (j := app.get_job(quick)) is not None and j.state is JobState.SUCCEEDED and j, 20,
                     "the quick job to succeed")
        assert done.result == result

        slow = _post(port, f"/{endpoint}?path=b.png&seconds=60")
        _wait(lambda: (j := app.get_job(slow)) is not None and j.state is JobState.RUNNING, 20, "the slow job to run")
        server.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught (0.29+: exit -15)
        assert server.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()
        assert "Application shutdown complete" in log.read_text()

        job = app.get_job(slow)
        assert job is not None, log.read_text()
        assert (job.state, job.attempt, job.released, job.attempts_used) == (JobState.QUEUED, 1, 1, 0), job
        assert job.attempts[-1].outcome is Outcome.RELEASED and job.last_error is None
        [worker] = app.store.list_workers()
        assert worker.stopped_at is not None  # it said goodbye: nothing for a reaper to recover
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        app.close()


def test_import_tether_needs_no_web_framework() -> None:
    code = ("import sys, tether, tether.testing, tether.contrib.asgi; "
            "bad = sorted(m for m in ('fastapi', 'starlette', 'uvicorn', 'django', 'pytest') if m in sys.modules); "
            "assert not bad, bad")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
