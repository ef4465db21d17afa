"""A worker's start (issue 47): what it imports and which statements stand
between its spawn and its first claim. No timings here (tests never assert on
time; bench/scenarios/startup.py measures it): the modules it loads and the
statements it sends are what its start-up time is made of, and they are
counted exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether import Tether

ROOT = Path(__file__).resolve().parents[1]

#: optional extras and the parts of tether a worker of an app without
#: schedules does not run: none is imported by ``import tether`` or a worker
NOT_FOR_A_WORKER = ("rich", "click", "starlette", "uvicorn", "fastapi", "prometheus_client", "opentelemetry", "nats",
                    "pydantic", "httpx", "zoneinfo", "cronsim", "tether.cli", "tether.server",
                    "tether.dashboard", "tether.chaos", "tether.metrics", "tether.otel", "tether.contrib")


def _loaded(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in NOT_FOR_A_WORKER))


def test_import_tether_and_building_a_worker_load_no_extra_and_no_worker_part_until_asked(tmp_path: Path) -> None:
    code = (
        "import sys, tether\n"
        "before = sorted(m for m in sys.modules if m.startswith('tether.worker.'))\n"
        f"app = tether.Tether('sqlite:///{tmp_path / 't.db'}')\n"
        "@app.task(name='hello')\ndef hello(ctx): return 'hi'\n"
        "app.migrate(); w = app.worker()\n"
        "import json; print(json.dumps([before, sorted(sys.modules)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")}).stdout
    before, modules = json.loads(out.splitlines()[-1])
    # `import tether` (a producer's) leaves the worker's runtime for app.worker() to import
    assert "tether.worker.runtime" not in before and "tether.worker.drain" not in before
    assert "tether.worker.runtime" in modules
    assert _loaded(modules) == []


#: the app a worker runs below: it counts every statement sent through psycopg,
#: from its import (before the worker opens its store) until the first handler runs
APP = '''
import json, os, sys
import psycopg
from tether import Tether

sent = []
_sync, _async = psycopg.Cursor.execute, psycopg.AsyncCursor.execute

def _name(query):
    text = query.decode() if isinstance(query, bytes) else str(query)
    first = text.split("\\n", 1)[0]
    return first[len("/* tether:"):-len(" */")] if first.startswith("/* tether:") else first.split(" ", 1)[0]

def execute(self, query, *args, **kwargs):
    sent.append(_name(query))
    return _sync(self, query, *args, **kwargs)

async def execute_async(self, query, *args, **kwargs):
    sent.append(_name(query))
    return await _async(self, query, *args, **kwargs)

psycopg.Cursor.execute, psycopg.AsyncCursor.execute = execute, execute_async
app = Tether()

@app.task(name="first")
def first(ctx):
    with open(os.environ["STARTUP_OUT"], "w") as f:
        json.dump({"sent": list(sent), "modules": sorted(sys.modules)}, f)
'''


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_postgresql_worker_sends_five_statements_before_its_first_claim_registration_first(
        db_url: str, tmp_path: Path) -> None:
    """`tether worker` checks the schema once (one statement: the versions and
    the JIT probe), registers, recovers its dead predecessors and syncs its
    (no) schedules, then claims: the claim after the registration, so that the
    reaper never sees a job held by an owner it does not know (I2, I5)."""
    app = Tether(db_url)
    try:
        app.migrate()
        app.task(name="first")(lambda ctx: None).enqueue()
    finally:
        app.close()
    (tmp_path / "startapp.py").write_text(APP)
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]),
           "TETHER_DATABASE_URL": db_url, "STARTUP_OUT": str(out)}
    done = subprocess.run([sys.executable, "-m", "tether", "worker", "--app", "startapp:app", "--burst",
                           "--log-level", "warning"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(out.read_text())
    sent = [s for s in seen["sent"] if s != "LISTEN"]  # the listener's own connection, beside the rest
    claims = [i for i, name in enumerate(sent) if "claim" in name]
    assert claims, sent
    before = sent[:claims[0]]
    assert sorted(before) == ["SELECT", "list_workers", "register_worker", "sync_schedules"], sent
    assert before[0] == "SELECT" and before[1] == "register_worker", sent
    # the worker's CLI is click, and psycopg reads time zones with zoneinfo; nothing else it does not need
    assert [m for m in _loaded(seen["modules"]) if not m.startswith(("click", "tether.cli", "zoneinfo"))] == []
