"""``tether worker --isolation process`` as a real process: its children
never outlive it (kill -9 of the worker: the stuck child dies at once, so no
handler runs on past its lease), and a SIGTERM past the shutdown timeout
kills the stuck child and releases its job without spending its budget."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import JobContext, JobState, Outcome, Tether

from .test_isolation import alive, read_pid, wait_until

APP = """
import os, time
from pathlib import Path
from tether import JobContext, Tether

app = Tether(os.environ["TETHER_DATABASE_URL"], lease_ttl=2, heartbeat_interval=0.4, reaper_interval=0.5)

@app.task(name="stuck")
def stuck(ctx: JobContext, where: str) -> None:
    Path(where, f"pid-{ctx.attempt}").write_text(str(os.getpid()))
    time.sleep(3600)
"""


@pytest.fixture
def worker(db_url: str, tmp_path: Path) -> Iterator[tuple[Tether, subprocess.Popen[bytes], Path]]:
    (tmp_path / "stuck_app.py").write_text(textwrap.dedent(APP))
    app = Tether(db_url)
    app.migrate()

    @app.task(name="stuck")  # the producer's view of the task (the worker runs stuck_app's)
    def stuck(ctx: JobContext, where: str) -> None: ...

    log = tmp_path / "worker.log"
    env = {**os.environ, "TETHER_DATABASE_URL": db_url}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "worker", "--app", "stuck_app:app", "--isolation", "process", "-c", "4",
             "--max-tasks-per-child", "100", "--max-memory-per-child", "500MB", "--shutdown-timeout", "0.5"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield app, proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        app.close()


def _started(app: Tether, tmp_path: Path, log: Path) -> tuple[int, int]:
    jid = app.enqueue("stuck", where=str(tmp_path))
    return jid, read_pid(tmp_path / "pid-1", 20, f"the handler's start; log: {log.read_text()}")


def test_kill_9_of_the_worker_takes_its_stuck_child_with_it(
        worker: tuple[Tether, subprocess.Popen[bytes], Path], tmp_path: Path) -> None:
    app, proc, log = worker
    _, child = _started(app, tmp_path, log)
    assert alive(child) and child != proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    wait_until(lambda: not alive(child), 2, "the orphaned child's death")


def test_sigterm_past_the_shutdown_timeout_kills_the_child_and_releases_the_job(
        worker: tuple[Tether, subprocess.Popen[bytes], Path], tmp_path: Path) -> None:
    app, proc, log = worker
    jid, child = _started(app, tmp_path, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0, log.read_text()
    assert not alive(child)
    job = app.get_job(jid)
    assert job is not None and job.state is JobState.QUEUED, job
    assert [a.outcome for a in job.attempts] == [Outcome.RELEASED]  # handed back, its budget untouched


EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "handlers" / "isolation.py"


def test_docs_isolation_example_runs_render_in_a_child(db_url: str, tmp_path: Path) -> None:
    """docs/examples/handlers/isolation.py run as its page says (``python isolation.py``):
    render's result names a pid other than the worker's."""
    app = Tether(db_url)
    app.migrate()

    @app.task(name="render")
    def render(ctx: JobContext, pages: int) -> None: ...

    try:
        jid = render.enqueue(pages=3)
        log = tmp_path / "worker.log"
        with log.open("wb") as err:
            proc = subprocess.Popen([sys.executable, str(EXAMPLE)], env={**os.environ, "TETHER_DATABASE_URL": db_url},
                                    cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
        try:
            job = app.wait(jid, timeout=30)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
        assert job.result is not None and job.result["pages"] == 3
        assert job.result["pid"] != proc.pid and not alive(job.result["pid"])
        assert job.progress_message == "page 2"
    finally:
        app.close()
