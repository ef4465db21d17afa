"""The "Migrating from" pages (docs/migrating): tether's side, run as a
script in an empty directory on a fresh SQLite database; the other queues'
side, compiled (the suite does not install Celery, RQ, procrastinate or
django-tasks, so it cannot run them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MIGRATING = Path(__file__).resolve().parent.parent / "docs" / "examples" / "migrating"
SRC = Path(__file__).resolve().parent.parent / "src"
THEIRS = sorted(p.name for p in MIGRATING.glob("*.py") if p.name != "shop.py")


def test_the_tether_side_runs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TETHER_DATABASE_URL", None)
    env.pop("TETHER_TRANSPORT", None)
    proc = subprocess.run([sys.executable, "-W", "error", str(MIGRATING / "shop.py")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["receipt for order 42", "ok"], proc.stdout


@pytest.mark.parametrize("name", THEIRS)
def test_the_other_side_compiles(name: str) -> None:
    compile((MIGRATING / name).read_text(), name, "exec", dont_inherit=True)
