"""docs/how-to/many-jobs.md's examples, run as a reader would: the Python
example, then the command-line one on the same database, on SQLite and
PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples" / "many-jobs"


@pytest.mark.processes
def test_many_jobs_examples(db_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_DATABASE_URL": db_url,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([sys.executable, str(EXAMPLES / "example.py")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:3] == ["[9, 6]", "[3] None", "9"]
    assert "3 3" in r.stdout.splitlines()  # cancel_many's count and its job.cancelled events
    assert "['billing'] billing.nightly_resync" in r.stdout.splitlines()  # a schedule's job has its task's tags
    r = subprocess.run(["bash", str(EXAMPLES / "cli.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "next page: --after" in out and "would retry 3 job(s)" in out and "retry: 3 job(s)" in out
    assert "cancel: 5 job(s)" in out and "delete: " in out  # the 3 retried, the rerun and the triggered one
