"""Closing a SQLite store while another thread is in the middle of a
statement on it: the statement finishes, then its connection is closed.
Closing under it crashed the interpreter (SIGSEGV in the reaper's statement,
a CI run), so the race runs in a child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tether.store import open_store

# Each iteration: a thread in a write transaction runs a slow statement, then
# enqueues; the main thread closes the store part-way through. The enqueue is
# committed (close waited) or, if the close came first, refused cleanly.
CHILD = textwrap.dedent('''
    import sys, threading, time
    from tether.model import NewJob
    from tether.store import open_store

    SLOW = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) "
            "SELECT count(*) FROM c")
    path, rounds = sys.argv[1], int(sys.argv[2])
    done = 0
    for i in range(rounds):
        store = open_store("sqlite:///" + path)
        started = threading.Event()
        def run():
            global done
            with store._write() as conn:
                started.set()
                for _ in range(3):
                    conn.execute(SLOW).fetchall()
                store._enqueue_in(conn, [NewJob(queue="default", task="t", args_json="{}")], None)
            done += 1
        t = threading.Thread(target=run)
        t.start()
        started.wait()
        time.sleep(0.005 * (i % 5))
        store.close()
        t.join()
    print(done)
''')


def test_closing_a_sqlite_store_waits_for_a_statement_in_flight_on_another_thread(tmp_path: Path) -> None:
    path = tmp_path / "close.sqlite3"
    store = open_store(f"sqlite:///{path}")
    store.migrate()
    store.close()
    rounds = 12
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(rounds)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"child exited {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.strip() == str(rounds)
    store = open_store(f"sqlite:///{path}")
    try:
        assert store.stats().counts[("default", "queued")] == rounds  # every transaction committed before its connection closed
    finally:
        store.close()


def test_a_fork_waits_for_a_statement_in_flight_and_the_child_uses_sqlite(tmp_path: Path) -> None:
    """SQLite's process-wide mutexes, copied held by a fork made while another
    thread is inside a statement, hang the child at its first statement (a
    handler's child, isolation="process"). A fork waits for the statement in
    flight: here the thread's statement ends before the fork is made, and the
    child opens the file and reads it. (Before, the fork happened at once,
    mid-statement.)"""
    import os
    import threading
    import warnings

    store = open_store(f"sqlite:///{tmp_path / 'fork.db'}")
    store.migrate()
    inside, left = threading.Event(), threading.Event()

    def statement() -> None:
        with store._write() as conn:
            inside.set()
            conn.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 400000) "
                         "SELECT count(*) FROM c").fetchall()
            left.set()  # inside the block: a fork that waits for it sees this

    thread = threading.Thread(target=statement)
    thread.start()
    try:
        assert inside.wait(10)
        with warnings.catch_warnings():  # 3.12+: fork from a process with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: its own store on the same file
            code = 1
            try:
                child = open_store(f"sqlite:///{tmp_path / 'fork.db'}")
                child.get_job(1)
                child.close()
                code = 0
            finally:
                os._exit(code)
        ended_first = left.is_set()
        _, status = os.waitpid(pid, 0)
    finally:
        thread.join(10)
        store.close()
    assert ended_first, "the fork was made while the other thread was inside its statement"
    assert os.waitstatus_to_exitcode(status) == 0
