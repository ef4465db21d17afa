"""``app.run_worker(processes=N)`` from a script: it becomes ``tether worker
--processes N`` (the same pid: the supervisor), whose worker processes import
the script by its name and share the jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tether import ConfigError, JobContext, JobState, Tether

SCRIPT = """
import os, time
from tether import JobContext, Tether

app = Tether(os.environ["TETHER_DATABASE_URL"])

@app.task(name="where")
def where(ctx: JobContext) -> int:
    time.sleep(0.2)
    return os.getpid()

if __name__ == "__main__":
    app.run_worker(processes=2, concurrency=2, burst=True, queues=["default"], shutdown_timeout=5)
"""


@pytest.mark.processes
def test_run_worker_processes_from_a_script(db_url: str, tmp_path: Path) -> None:
    app = Tether(db_url)
    app.migrate()

    @app.task(name="where")
    def where(ctx: JobContext) -> int: ...

    try:
        ids = [where.enqueue() for _ in range(12)]
        script = tmp_path / "pworker.py"
        script.write_text(textwrap.dedent(SCRIPT))
        proc = subprocess.run([sys.executable, str(script)], env={**os.environ, "TETHER_DATABASE_URL": db_url},
                              cwd=tmp_path.parent, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        jobs = [app.get_job(j) for j in ids]
        assert all(j is not None and j.state is JobState.SUCCEEDED for j in jobs), proc.stderr
        assert "2 worker processes of pworker:app" in proc.stderr, proc.stderr
        assert proc.stderr.count("worker process 1 started") == proc.stderr.count("worker process 2 started") == 1
    finally:
        app.close()


def test_run_worker_processes_refuses_what_tether_worker_cannot_say() -> None:
    app = Tether("sqlite:///:memory:")
    try:
        with pytest.raises(ConfigError, match="claim_batch"):
            app.run_worker(processes=2, claim_batch=5)
        with pytest.raises(ConfigError, match="processes must be"):
            app.run_worker(processes=0)
        with pytest.raises(ConfigError, match="this process's alone"):
            app.run_worker(processes=2)
    finally:
        app.close()
