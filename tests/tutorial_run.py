"""The tutorial's steps (docs/examples/tutorial), run as a reader runs them:
``steps.sh`` in a fresh directory holding ``app.py``, with a ``tether`` and a
``python`` from ``bin_dir`` first on PATH (the test venv's, or a fresh venv the
built wheel went into), then the outcome checked in the database."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tether import JobState, Tether

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "examples" / "tutorial"


def tutorial_url(backend: str, db_url: str) -> str | None:
    """What TETHER_DATABASE_URL the tutorial runs with: none on SQLite (the
    default, tether.db in the working directory, as the page says)."""
    return None if backend == "sqlite" else db_url


def run_tutorial(bin_dir: Path, workdir: Path, db_url: str | None, *, timeout: float = 120) -> str:
    """Runs steps.sh in ``workdir`` against ``db_url`` (None: the default
    database); its output (stdout and stderr together), or AssertionError
    with it."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("app.py", "steps.sh"):
        shutil.copy(TUTORIAL / name, workdir / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    if db_url is not None:
        env["TETHER_DATABASE_URL"] = db_url
    done = subprocess.run(["bash", "steps.sh"], cwd=workdir, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert done.returncode == 0, f"steps.sh exited {done.returncode}:\n{done.stdout}"
    return done.stdout


def check_tutorial(workdir: Path, db_url: str | None) -> None:
    """What the tutorial promises: job 1 ran once; job 2, whose worker was
    SIGKILLed mid-job, succeeded on its second attempt."""
    app = Tether(db_url or f"sqlite:///{workdir / 'tether.db'}")
    try:
        first, second = app.get_job(1), app.get_job(2)
        assert first is not None and second is not None
        assert (first.state, first.attempt, first.result) == (JobState.SUCCEEDED, 1, 5)
        assert (second.state, second.attempt, second.result) == (JobState.SUCCEEDED, 2, 42)
    finally:
        app.close()
