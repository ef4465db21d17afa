"""``tether job ID --follow`` and ``tether status --watch`` against real
databases: the live views follow the database until the job ends (or Ctrl-C)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from click.testing import CliRunner

from tether.cli.main import cli
from tether.model import NewJob, Outcome
from tether.store import open_store


def test_job_follow_tracks_progress_until_the_job_ends(db_url: str) -> None:
    store = open_store(db_url)
    store.migrate()
    try:
        [job_id] = store.enqueue([NewJob(task="render", args_json='{"frames": 10}')])
        [claimed] = store.claim("worker-f", ["default"], 1, 30)
        store.progress("worker-f", job_id, claimed.attempt, 0.3, "frame 3 of 10", 30)
        result: list[object] = []
        follower = threading.Thread(target=lambda: result.append(
            CliRunner().invoke(cli, ["-d", db_url, "job", str(job_id), "--follow", "--interval", "0.1"])))
        follower.start()
        time.sleep(0.5)
        assert follower.is_alive(), "--follow returned while the job was still running"
        store.progress("worker-f", job_id, claimed.attempt, 0.9, "frame 9 of 10", 30)
        time.sleep(0.3)
        store.complete("worker-f", [(job_id, claimed.attempt, '"done"')])
        follower.join(timeout=20)
        assert not follower.is_alive(), "--follow did not stop when the job ended"
    finally:
        store.close()
    [r] = result
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert "succeeded" in r.output  # type: ignore[attr-defined]


def test_status_watch_refreshes_until_interrupted(db_url: str) -> None:
    store = open_store(db_url)
    store.migrate()
    try:
        store.enqueue([NewJob(task="t", args_json="{}", queue="watched")])
    finally:
        store.close()
    # Ctrl-C is SIGINT at its default disposition: a suite started in the
    # background of a non-interactive shell inherits it ignored, and Python
    # then never turns it into KeyboardInterrupt.
    proc = subprocess.Popen([sys.executable, "-m", "tether", "-d", db_url, "status", "--watch", "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    with proc:  # closes the pipes and reaps the process even when an assertion fails
        try:
            time.sleep(2.0)
            assert proc.poll() is None, proc.communicate()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert "watched" in out and "no live workers" in out


def test_job_follow_shows_a_progress_message_as_text(db_url: str) -> None:
    """What a handler passes to ctx.progress reaches the live view as text: its
    markup not read, its escape sequences shown, not sent to the terminal."""
    message = "[link=http://evil.example]click[/link] \x1b[2J\x1b]0;pwned\x07"
    store = open_store(db_url)
    store.migrate()
    try:
        [job_id] = store.enqueue([NewJob(task="render", args_json="{}")])
        [claimed] = store.claim("worker-f", ["default"], 1, 30)
        store.progress("worker-f", job_id, claimed.attempt, 0.3, message, 30)
        result: list[object] = []
        follower = threading.Thread(target=lambda: result.append(
            CliRunner().invoke(cli, ["-d", db_url, "job", str(job_id), "--follow", "--interval", "0.1"],
                               env={"COLUMNS": "300"})))
        follower.start()
        time.sleep(0.5)
        store.fail("worker-f", job_id, claimed.attempt, outcome=Outcome.FAILED, error=message, retry=False)
        follower.join(timeout=20)
        assert not follower.is_alive(), "--follow did not stop when the job ended"
    finally:
        store.close()
    [r] = result
    out = r.output  # type: ignore[attr-defined]
    assert r.exit_code == 0, out  # type: ignore[attr-defined]
    assert "\x1b" not in out and "\x07" not in out
    assert out.count("[link=http://evil.example]click[/link] \\x1b[2J\\x1b]0;pwned\\x07") >= 2  # progress, error
