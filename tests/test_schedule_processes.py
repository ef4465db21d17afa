"""I6 under real process faults: four worker processes fire a one-second
schedule while one is SIGKILLed and one SIGSTOPped (and later continued);
every tick in the window becomes exactly one job, none is missed while healthy
processes run, and each fires within one reaper interval of its tick.

The processes are real workers (``tests/schedule_proc.py``: an app module that
runs its own worker, default timers), whose runtime starts the scheduler
because the app declares a schedule. PostgreSQL only: on SQLite a
process stopped inside its write transaction holds the one write lock, which
stalls every writer (schedules included) until it is continued; that is
SQLite's, and tether's README says so.

The window is 20 s by default; TETHER_SCHEDULE_SOAK=60 runs the issue's 60 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tether.chaos.schedule_check import TickRow, check_schedule, expected_ticks
from tether.config import parse_database_url
from tether.store import Store, open_store

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parent.parent
PROC = ROOT / "tests" / "schedule_proc.py"
SOAK = float(os.environ.get("TETHER_SCHEDULE_SOAK", "20"))
GRACE = 10.0  # the default: one reaper interval
INTERVAL = 1.0  # the default scheduler interval
#: the last ticks of the window may still be in flight when it closes
TAIL = 2 * INTERVAL + 1


@pytest.fixture
def pg_store(db_url: str) -> Iterator[Store]:
    store = open_store(db_url)
    store.migrate()
    yield store
    store.close()


def _start(db_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TETHER_DATABASE_URL": db_url, "PYTHONPATH": str(ROOT / "src")}
    with log.open("wb") as err:
        return subprocess.Popen([sys.executable, str(PROC)], env=env, stdout=subprocess.DEVNULL, stderr=err)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # see the module docstring
def test_four_processes_fire_each_tick_once_under_sigkill_and_sigstop(
    pg_store: Store, db_url: str, tmp_path: Path
) -> None:
    procs = [_start(db_url, tmp_path / f"worker-{i}.log") for i in range(4)]
    try:
        deadline = time.monotonic() + 30
        while len(pg_store.list_workers(live_only=True)) < 4:
            assert time.monotonic() < deadline, [p.read_text() for p in tmp_path.glob("*.log")]
            assert all(p.poll() is None for p in procs), [p.read_text() for p in tmp_path.glob("*.log")]
            time.sleep(0.1)
        time.sleep(2 * INTERVAL)  # each worker's scheduler has synced and fired once
        start = pg_store.db_now()
        time.sleep(SOAK * 0.2)
        procs[0].send_signal(signal.SIGKILL)
        time.sleep(SOAK * 0.15)
        procs[1].send_signal(signal.SIGSTOP)
        time.sleep(SOAK * 0.4)
        procs[1].send_signal(signal.SIGCONT)
        time.sleep(SOAK * 0.25)
        end = pg_store.db_now()
        assert all(p.poll() is None for p in procs[1:]), "a process died that was not killed"
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(timeout=10)

    schema = parse_database_url(db_url).schema
    with psycopg.connect(db_url.split("?")[0], autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT t.tick, j.id, j.created_at FROM "{schema}".schedule_ticks AS t '
            f'LEFT JOIN "{schema}".jobs AS j ON j.schedule = t.schedule AND j.scheduled_for = t.tick '
            "WHERE t.schedule = %s", ("proc.tick",)).fetchall()
        jobs = conn.execute(f'SELECT count(*), count(DISTINCT scheduled_for) FROM "{schema}".jobs '
                            "WHERE schedule = %s", ("proc.tick",)).fetchone()
    assert jobs is not None and jobs[0] == jobs[1] == len(rows), "a tick fired twice, or a job without its tick"
    decided = [TickRow(tick=t.timestamp(), job_id=i, created_at=c and c.timestamp()) for t, i, c in rows]
    # Two or three healthy processes ran all along, so every tick of the
    # window is owed; checked against TAIL (a few scheduler intervals), which
    # is stricter than I6's one reaper interval (GRACE) and leaves no tick of
    # the window unchecked but its last TAIL seconds, which may be in flight.
    expected = expected_ticks("* * * * * *", "UTC", start.timestamp(), end.timestamp() - TAIL)
    inv = check_schedule("proc.tick", expected, decided, healthy=[(start.timestamp(), end.timestamp())],
                         bound=TAIL)
    assert inv.checked >= 2 * len(expected) - 1, "some ticks of the window were not checked"
    assert inv.ok, inv.violations
    late = max(r.created_at - r.tick for r in decided if r.tick in set(expected) and r.created_at is not None)
    print(f"{len(expected)} ticks in {SOAK:.0f} s, each fired once; latest {late:.2f} s after its tick")
