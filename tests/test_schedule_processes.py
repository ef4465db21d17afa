"""I6 under real process faults: four processes fire a one-second schedule
while one is SIGKILLed and one SIGSTOPped (and later continued); every tick in
the window becomes exactly one job, none is missed while healthy processes
run, and each fires within one reaper interval of its tick.

The processes run the Scheduler alone (``tests/schedule_proc.py``), as a
worker will once its runtime starts the service. PostgreSQL only: on SQLite a
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
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

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


def _start(db_url: str, marks: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TETHER_DATABASE_URL": db_url, "T_MARK_DIR": str(marks), "T_INTERVAL": str(INTERVAL),
           "T_GRACE": str(GRACE), "PYTHONPATH": str(ROOT / "src")}
    with log.open("wb") as err:
        return subprocess.Popen([sys.executable, str(PROC)], env=env, stdout=subprocess.DEVNULL, stderr=err)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # see the module docstring
def test_four_processes_fire_each_tick_once_under_sigkill_and_sigstop(
    pg_store: Store, db_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    procs = [_start(db_url, marks, tmp_path / f"sched-{i}.log") for i in range(4)]
    try:
        deadline = time.monotonic() + 30
        while len(list(marks.iterdir())) < 4:
            assert time.monotonic() < deadline, [p.read_text() for p in tmp_path.glob("*.log")]
            assert all(p.poll() is None for p in procs), [p.read_text() for p in tmp_path.glob("*.log")]
            time.sleep(0.1)
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
        jobs = conn.execute(f'SELECT scheduled_for, created_at FROM "{schema}".jobs WHERE schedule = %s',
                            ("proc.tick",)).fetchall()
        ticks = conn.execute(f'SELECT tick, skipped FROM "{schema}".schedule_ticks WHERE schedule = %s',
                             ("proc.tick",)).fetchall()
    fired = [t for t, _ in jobs]
    assert len(fired) == len(set(fired)), "a tick fired twice"
    assert len(ticks) == len(jobs) and not any(skipped for _, skipped in ticks)
    # Every whole second in the window, bar its tail, fired: two or three
    # healthy processes ran all along.
    first = start.replace(microsecond=0) + timedelta(seconds=1)
    expected = {first + timedelta(seconds=k) for k in range(int((end - first).total_seconds() - TAIL))}
    missed = sorted(expected - set(fired))
    assert not missed, f"ticks missed while healthy processes ran: {missed}"
    late = max((created - tick).total_seconds() for tick, created in jobs if tick in expected)
    assert late < GRACE, f"a tick fired {late:.2f} s late (more than one reaper interval)"
    print(f"{len(expected)} ticks in {SOAK:.0f} s, each fired once; latest {late:.2f} s after its tick")
