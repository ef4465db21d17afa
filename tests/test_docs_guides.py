"""The how-to guides' example scripts (docs/examples/guides), each run as a
script in an empty directory of its own on a fresh SQLite database, as a
reader would run it: each asserts what its page says and prints "ok"."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

GUIDES = Path(__file__).resolve().parent.parent / "docs" / "examples" / "guides"
SRC = Path(__file__).resolve().parent.parent / "src"
#: run as scripts; remote.py is the app remote.sh runs
SCRIPTS = sorted(p.name for p in GUIDES.glob("*.py") if p.name != "remote.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_guide_example_runs(script: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TETHER_DATABASE_URL", None)
    env.pop("TETHER_TRANSPORT", None)
    proc = subprocess.run([sys.executable, "-W", "error", str(GUIDES / script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if script != "typed.py":
        assert proc.stdout.rstrip().endswith("ok"), proc.stdout + proc.stderr


def test_remote_workers_through_a_tether_server(tmp_path: Path) -> None:
    """remote.sh: a real `tether server` on a SQLite file; a producer and a
    worker (--burst) that reach it with tokens only."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    shutil.copy(GUIDES / "remote.py", tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)]), "PORT": str(port),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    env.pop("TETHER_DATABASE_URL", None)
    env.pop("TETHER_TRANSPORT", None)
    proc = subprocess.run(["bash", str(GUIDES / "remote.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["1", "ok"], proc.stdout
