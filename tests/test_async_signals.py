"""``app.run_worker_async(signals=True)``: a program that runs its worker with
``asyncio.run`` and handles no signal gets ``run_worker``'s SIGTERM (stop
claiming, let running jobs finish, exit). Without it, SIGTERM ends such a
program at once and its running job stays ``running`` until its lease lapses
(found by a new user's walkthrough; the README says so). Real processes, a
real SQLite file."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tether import JobContext, JobState, Tether
from tether.errors import ConfigError

from .test_processes import wait_for

SCRIPT = textwrap.dedent("""
    import asyncio, sys, time
    from tether import Tether, JobContext

    app = Tether(sys.argv[1])

    @app.task(name="slow")
    def slow(ctx: JobContext) -> str:
        time.sleep(1.5)
        return "finished"

    if __name__ == "__main__":
        asyncio.run(app.run_worker_async(concurrency=2, shutdown_timeout=20, signals=sys.argv[2] == "1"))
""")


@pytest.mark.parametrize("signals", [True, False])
def test_sigterm_under_asyncio_run(tmp_path: Path, signals: bool) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "worker.py").write_text(SCRIPT)
    app = Tether(url)
    app.migrate()

    @app.task(name="slow")
    def slow(ctx: JobContext) -> None: ...  # the producer's side of the script's task

    job_id = slow.enqueue()
    proc = subprocess.Popen([sys.executable, "worker.py", url, "1" if signals else "0"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: ((j := app.get_job(job_id)) is not None and j.state is JobState.RUNNING) or None,
                 20, "the job to start")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    job = app.get_job(job_id)
    assert job is not None
    if signals:
        assert proc.returncode == 0, out
        assert "SIGTERM: no new claims" in out
        assert job.state is JobState.SUCCEEDED and job.result == "finished", (job, out)
    else:  # the default: the program's own signal handling stands, and it had none
        assert proc.returncode == -signal.SIGTERM, out
        assert job.state is JobState.RUNNING, job
    app.close()


def test_signals_need_the_main_thread(tmp_path: Path) -> None:
    import asyncio

    app = Tether(f"sqlite:///{tmp_path / 'jobs.db'}")
    app.migrate()
    raised: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(app.run_worker_async(signals=True))
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=main)
    t.start()
    t.join(timeout=10)
    assert len(raised) == 1 and isinstance(raised[0], ConfigError) and "main thread" in str(raised[0])
    app.close()
