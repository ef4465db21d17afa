"""The how-to guides' example scripts (docs/examples/guides), each run as a
script in an empty directory of its own on a fresh SQLite database, as a
reader would run it: each asserts what its page says and prints "ok"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GUIDES = Path(__file__).resolve().parent.parent / "docs" / "examples" / "guides"
SRC = Path(__file__).resolve().parent.parent / "src"
SCRIPTS = sorted(p.name for p in GUIDES.glob("*.py"))


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
