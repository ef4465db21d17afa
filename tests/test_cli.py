"""The ``tether`` command line, against real databases: CliRunner for the
one-shot commands (SQLite and PostgreSQL), subprocesses for ``worker`` and
``demo`` (real processes, real signals)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tether import JobState, Outcome
from tether.cli.main import cli
from tether.model import NewJob, QueueLimits, WorkerInfo
from tether.store import open_store

ROOT = Path(__file__).resolve().parent.parent

APP_SOURCE = '''
from tether import Tether

app = Tether({url!r}, lease_ttl=12, heartbeat_interval=2, reaper_interval=2)
not_an_app = 42

@app.task(name="greet")
def greet(ctx, name: str, times: int = 1) -> str:
    return " ".join(["hello " + name] * times)

@app.task(name="short_lease", lease_ttl=5)
def short_lease(ctx) -> None:
    return None
'''


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_DATABASE_URL", raising=False)
    monkeypatch.delenv("TETHER_APP", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_app puts the CWD on it


@pytest.fixture
def run() -> Callable[..., Result]:
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke


@pytest.fixture
def app_ref(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], str]]:
    """``make(url)`` writes an app module into the CWD and returns ``module:app``.

    Each module gets a unique name so that sys.modules never hands a test
    another test's app.
    """
    monkeypatch.chdir(tmp_path)
    made: list[str] = []

    def make(url: str | None = None) -> str:
        name = f"cliapp_{secrets.token_hex(4)}"
        (tmp_path / f"{name}.py").write_text(APP_SOURCE.format(url=url))
        made.append(name)
        return f"{name}:app"

    yield make
    for name in made:
        sys.modules.pop(name, None)


def one_line_error(result: Result, code: int, *needles: str) -> None:
    """The error path: the exit code, one ``Error:`` line on stderr, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# -- migrate ------------------------------------------------------------------------------
def test_migrate_applies_then_reports_up_to_date(run: Callable[..., Result], db_url: str) -> None:
    first = run("-d", db_url, "migrate")
    assert first.exit_code == 0, first.output
    assert "applied 0001_init" in first.stdout
    again = run("-d", db_url, "migrate")
    assert again.exit_code == 0
    assert "already up to date" in again.stdout
    store = open_store(db_url)
    try:
        store.check_schema()
    finally:
        store.close()


def test_database_url_comes_from_the_environment(
    run: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    assert run("migrate").exit_code == 0
    assert (tmp_path / "env.db").exists()


# -- the admin round trip -------------------------------------------------------------------
def test_enqueue_jobs_job_cancel_retry_round_trip(
    run: Callable[..., Result], db_url: str, app_ref: Callable[[str | None], str]
) -> None:
    ref = app_ref(db_url)
    assert run("-d", db_url, "migrate").exit_code == 0

    r = run("-d", db_url, "enqueue", "greet", "--app", ref, "--args", '{"name": "ada", "times": 2}')
    assert r.exit_code == 0, r.output
    job_id = int(r.stdout.strip())
    assert f"job {job_id}" in r.stderr
    r = run("-d", db_url, "enqueue", "greet", "--app", ref, "--args", '{"name": "bob"}', "--queue", "slow",
            "--priority", "5", "--delay", "60", "--max-attempts", "7", "--dedup-key", "bob")
    assert r.exit_code == 0, r.output
    later_id = int(r.stdout.strip())

    r = run("-d", db_url, "jobs")
    assert r.exit_code == 0, r.output
    assert "greet" in r.stdout and "queued" in r.stdout and "slow" in r.stdout and "0/7" in r.stdout
    assert "(in " in r.stdout  # the delayed job says when it is due
    r = run("-d", db_url, "jobs", "--queue", "slow")
    assert str(later_id) in r.stdout and "default" not in r.stdout
    assert "no jobs match" in run("-d", db_url, "jobs", "--state", "dead").stdout

    r = run("-d", db_url, "job", str(job_id))
    assert r.exit_code == 0, r.output
    assert '"name": "ada"' in r.stdout and "no attempts yet" in r.stdout
    data = json.loads(run("-d", db_url, "job", str(later_id), "--json").stdout)
    assert data["state"] == "queued" and data["priority"] == 5 and data["max_attempts"] == 7
    assert data["dedup_key"] == "bob" and data["attempts"] == []

    r = run("-d", db_url, "cancel", str(job_id))
    assert r.exit_code == 0 and "cancelled" in r.stdout
    one_line_error(run("-d", db_url, "cancel", str(job_id)), 1, "already cancelled")
    r = run("-d", db_url, "retry", str(job_id))
    assert r.exit_code == 0 and "queued" in r.stdout
    one_line_error(run("-d", db_url, "retry", str(job_id)), 1, "only dead or cancelled")
    one_line_error(run("-d", db_url, "job", "999999"), 1, "no job 999999")
    one_line_error(run("-d", db_url, "cancel", "999999"), 1, "no job 999999")
    one_line_error(run("-d", db_url, "retry", "999999"), 1, "no job 999999")


def test_job_shows_attempts_history_and_progress(
    run: Callable[..., Result], db_url: str, app_ref: Callable[[str | None], str]
) -> None:
    ref = app_ref(db_url)
    run("-d", db_url, "migrate")
    job_id = int(run("-d", db_url, "enqueue", "greet", "--app", ref, "--args", '{"name": "x"}').stdout)
    store = open_store(db_url)
    try:
        (first,) = store.claim("worker-a", ["default"], 1, 30)
        store.fail("worker-a", job_id, first.attempt, outcome=Outcome.FAILED, error="ValueError: boom",
                   traceback="Traceback (most recent call last):\nValueError: boom\n")
        later = datetime.now(UTC) + timedelta(hours=2)  # past the retry backoff
        (second,) = store.claim("worker-b", ["default"], 1, 30, now=later)
        store.progress("worker-b", job_id, second.attempt, 0.5, "halfway", 30, now=later)
        r = run("-d", db_url, "job", str(job_id))
        assert r.exit_code == 0, r.output
        assert "running" in r.stdout and "50%" in r.stdout and "halfway" in r.stdout
        assert "worker-a" in r.stdout and "worker-b" in r.stdout and "ValueError: boom" in r.stdout
        store.complete("worker-b", [(job_id, second.attempt, '"done"')], now=later)
    finally:
        store.close()
    r = run("-d", db_url, "job", str(job_id), "--tracebacks")
    assert "succeeded" in r.stdout and "failed" in r.stdout and "traceback of attempt 1" in r.stdout
    data = json.loads(run("-d", db_url, "job", str(job_id), "--json").stdout)
    assert [a["outcome"] for a in data["attempts"]] == ["failed", "succeeded"]
    assert [a["worker"] for a in data["attempts"]] == ["worker-a", "worker-b"]
    assert data["state"] == "succeeded" and data["result"] == "done" and data["attempts_used"] == 2


#: job data a handler chose, as `ctx.progress(0.5, s); raise ValueError(s)` stores it
MARKUP = "[bold red]MARKUP[/bold red] [link=http://evil.example]click[/link]"
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x9b2J\u202etxt"
#: raw, none of these may reach the terminal from job data
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def test_job_data_is_shown_as_text_not_as_markup_or_terminal_controls(
    run: Callable[..., Result], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "500")  # no line wrapped inside the texts looked for
    run("-d", db_url, "migrate")
    s = f"{MARKUP} {ESCAPES}"
    store = open_store(db_url)
    # a worker row an older release let in: shown escaped all the same
    monkeypatch.setattr("tether.store.worker_rows.check_worker_identity", lambda *_: None)
    try:
        [job_id] = store.enqueue([NewJob(task="[red]rt[/red]", args_json=json.dumps({"s": s}), queue="q",
                                         dedup_key=s)])
        store.register_worker(WorkerInfo(id="[blue]w[/blue]\x1b[1A", host="h\x1b]0;x\x07", pid=1, proc_start=None,
                                         started_at=None, last_seen=None, queues=["q"],  # type: ignore[arg-type]
                                         concurrency=1))
        [claimed] = store.claim("[blue]w[/blue]\x1b[1A", ["q"], 1, 30)
        store.progress("[blue]w[/blue]\x1b[1A", job_id, claimed.attempt, 0.5, s, 30)
        running = run("-d", db_url, "job", str(job_id))
        store.fail("[blue]w[/blue]\x1b[1A", job_id, claimed.attempt, outcome=Outcome.FAILED, error=f"ValueError: {s}",
                   traceback=f"Traceback (most recent call last):\nValueError: {s}\n", retry=False)
    finally:
        store.close()
    shown = {"job": run("-d", db_url, "job", str(job_id), "--tracebacks"), "running job": running,
             "jobs": run("-d", db_url, "jobs"), "status": run("-d", db_url, "status"),
             "json": run("-d", db_url, "job", str(job_id), "--json")}
    for what, r in shown.items():
        assert r.exit_code == 0, (what, r.output)
        for raw in RAW_CONTROLS:
            assert raw not in r.output, (what, raw, r.output)
    assert "[red]rt[/red]" in shown["jobs"].stdout and "[red]rt[/red]" in shown["job"].stdout  # the name, as given
    assert "ValueError: [bold red]MARKUP[/bold red] [link=http" in shown["jobs"].stdout  # the last error, cut
    for what in ("job", "running job"):  # args, progress, error, traceback, dedup key: the markup as text
        assert shown[what].stdout.count(MARKUP) >= 3, (what, shown[what].stdout)
        assert "\\x1b[2J\\x1b]0;pwned\\x07\\x9b2J\\u202etxt" in shown[what].stdout  # escapes made visible
    assert "[blue]w[/blue]\\x1b[1A" in shown["running job"].stdout and "h\\x1b]0;x\\x07" in shown["status"].stdout
    data = json.loads(shown["json"].stdout)  # the same JSON, C1 and bidi escaped
    assert data["args"] == {"s": s} and data["progress_message"] == s


def test_cancel_of_a_running_job_is_a_request(
    run: Callable[..., Result], db_url: str, app_ref: Callable[[str | None], str]
) -> None:
    ref = app_ref(db_url)
    run("-d", db_url, "migrate")
    job_id = int(run("-d", db_url, "enqueue", "greet", "--app", ref, "--args", '{"name": "x"}').stdout)
    store = open_store(db_url)
    try:
        store.claim("worker-a", ["default"], 1, 30)
        r = run("-d", db_url, "cancel", str(job_id))
        assert r.exit_code == 0 and "cancel requested" in r.stdout and "running" in r.stdout
        assert "cancel requested" in run("-d", db_url, "job", str(job_id)).stdout
        one_line_error(run("-d", db_url, "retry", str(job_id)), 1, "running")
    finally:
        store.close()


def test_status_shows_counts_oldest_due_and_workers(
    run: Callable[..., Result], db_url: str, app_ref: Callable[[str | None], str]
) -> None:
    ref = app_ref(db_url)
    run("-d", db_url, "migrate")
    r = run("-d", db_url, "status")
    assert r.exit_code == 0 and "no jobs yet" in r.stdout and "no live workers" in r.stdout
    for name in ("a", "b"):
        run("-d", db_url, "enqueue", "greet", "--app", ref, "--args", json.dumps({"name": name}))
    run("-d", db_url, "enqueue", "greet", "--app", ref, "--args", '{"name": "c"}', "--queue", "other")
    store = open_store(db_url)
    try:
        store.register_worker(WorkerInfo(id="host-1-abcd", host="host", pid=1, proc_start=None,
                                         started_at=None, last_seen=None, queues=["default", "other"],  # type: ignore[arg-type]
                                         concurrency=4))
    finally:
        store.close()
    r = run("-d", db_url, "status")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "jobs by queue and state" in out and "oldest due queued" in out
    assert "default" in out and "other" in out and "all" in out
    assert "host-1-abcd" in out and "default,other" in out


def test_limit_sets_limits_whole_and_status_shows_what_counts_against_them(
    run: Callable[..., Result], db_url: str
) -> None:
    run("-d", db_url, "migrate")
    r = run("-d", db_url, "limit", "emails", "--concurrency", "5", "--rate", "100/1m")
    assert r.exit_code == 0 and "queue emails: concurrency 0/5 running, rate 0/100 per 60s" in r.stdout
    assert "queue reports: rate 0/3 per 90.5s" in run("-d", db_url, "limit", "reports", "--rate", "3/90.5").stdout
    store = open_store(db_url)
    try:
        store.enqueue([NewJob(task="greet", args_json="{}", queue="emails") for _ in range(2)])
        assert len(store.claim("w-1", ["emails"], 1, 30)) == 1
        assert store.queue_limits() == [QueueLimits("emails", 5, 100, 60.0, running=1, started=1),
                                        QueueLimits("reports", None, 3, 90.5)]
        r = run("-d", db_url, "status")
        assert r.exit_code == 0, r.output
        assert "limits: emails concurrency 1/5 running, rate 1/100 per 60s" in r.stdout
        assert "limits: reports rate 0/3 per 90.5s" in r.stdout
        # each call sets both limits: --concurrency alone lifts the rate
        r = run("-d", db_url, "limit", "emails", "--concurrency", "1")
        assert r.exit_code == 0 and r.stdout.strip() == "queue emails: concurrency 1/1 running"
        assert "limits: emails concurrency 1/1 running\n" in run("-d", db_url, "status").stdout
        # no option: both lifted, and said so
        r = run("-d", db_url, "limit", "emails")
        assert r.exit_code == 0 and "queue emails: limits lifted (no concurrency or rate limit)" in r.stdout
        assert [q.queue for q in store.queue_limits()] == ["reports"]
        assert "limits: emails" not in run("-d", db_url, "status").stdout
    finally:
        store.close()


def test_limit_refuses_bad_input_in_one_line(run: Callable[..., Result], db_url: str) -> None:
    one_line_error(run("-d", db_url, "limit", "emails", "--concurrency", "2"), 2, "tether migrate")
    run("-d", db_url, "migrate")
    for args, needle in [
        (["--rate", "100"], "--rate must be COUNT/PERIOD"),
        (["--rate", "-1/60"], "--rate must be COUNT/PERIOD"),
        (["--rate", "100/soon"], "--rate's PERIOD must be a duration"),
        (["--rate", "100/0"], "a rate's period must be a positive number of seconds"),
        (["--rate", "0/1m"], "a rate's count must be a whole number >= 1"),
        (["--concurrency", "0"], "concurrency must be a whole number >= 1"),
    ]:
        one_line_error(run("-d", db_url, "limit", "emails", *args), 2, needle)
    one_line_error(run("-d", db_url, "limit", "bad queue", "--concurrency", "2"), 2, "is not a plain identifier")
    store = open_store(db_url)
    try:
        assert store.queue_limits() == []
    finally:
        store.close()


# -- error paths ------------------------------------------------------------------------------
def test_bad_database_urls(run: Callable[..., Result], tmp_path: Path) -> None:
    one_line_error(run("-d", "mysql://x/y", "jobs"), 2, "unsupported database URL")
    one_line_error(run("-d", "sqlite://host/x.db", "status"), 2, "malformed SQLite URL")
    one_line_error(run("-d", f"sqlite:///{tmp_path}/no/such/dir/x.db", "migrate"), 2, "not a directory")
    for url in ("postgresql://postgres:s3cretPW@127.0.0.1:5432/walk_c?schema=a-b",
                "postgresql://postgres:s3cretPW@127.0.0.1:xx/walk_c", "postgresql://postgres:s3cretPW@[::1:5432/x"):
        result = run("-d", url, "status")
        one_line_error(result, 2, "postgres:***@")
        assert "s3cretPW" not in result.output


def test_unmigrated_database_says_run_migrate(
    run: Callable[..., Result], db_url: str, backend: str, tmp_path: Path, app_ref: Callable[[str | None], str]
) -> None:
    for cmd in (["jobs"], ["status"], ["job", "1"], ["cancel", "1"]):
        one_line_error(run("-d", db_url, *cmd), 2, "tether migrate")
    one_line_error(run("-d", db_url, "enqueue", "greet", "--app", app_ref(None), "--args", '{"name": "x"}'),
                   2, "tether migrate")
    one_line_error(run("-d", db_url, "worker", "--app", app_ref(None)), 2, "tether migrate")
    if backend == "sqlite":
        # a read-only command must not leave an empty database file behind
        assert not (tmp_path / "tether.db").exists()


def test_enqueue_errors(
    run: Callable[..., Result], db_url: str, app_ref: Callable[[str | None], str]
) -> None:
    ref = app_ref(db_url)
    run("-d", db_url, "migrate")
    one_line_error(run("enqueue", "nope", "--app", ref), 2, "no task named 'nope'", "greet")
    one_line_error(run("enqueue", "greet", "--app", ref, "--args", "[1, 2]"), 2, "JSON object", "list")
    one_line_error(run("enqueue", "greet", "--app", ref, "--args", "{name"), 2, "not valid JSON")
    one_line_error(run("enqueue", "greet", "--app", ref, "--args", '{"name": "a", "name": "b"}'), 2,
                   "the key 'name' is given twice")  # was collapsed to "b"
    one_line_error(run("enqueue", "greet", "--app", ref, "--args", '{"nam": 1}'), 2, "do not fit task 'greet'")
    one_line_error(run("enqueue", "greet", "--app", ref, "--args", '{"name": "x"}', "--queue", "bad queue!"),
                   2, "queue name")
    result = run("enqueue", "greet", "--app", ref, "--delay", "inf")
    assert result.exit_code == 2 and "finite" in result.output and "Traceback" not in result.output


def test_bad_app_references(run: Callable[..., Result], app_ref: Callable[[str | None], str]) -> None:
    ref = app_ref(None)
    module = ref.split(":")[0]
    one_line_error(run("enqueue", "greet", "--app", "no_such_module_xyz:app"), 2, "no module named")
    one_line_error(run("enqueue", "greet", "--app", f"{module}:missing"), 2, "no attribute 'missing'", ref)
    one_line_error(run("enqueue", "greet", "--app", f"{module}:not_an_app"), 2, "is of type int, not a tether.Tether")
    one_line_error(run("enqueue", "greet", "--app", "not a ref"), 2, "module:attribute")
    one_line_error(run("worker", "--app", "no_such_module_xyz:app"), 2, "no module named")
    Path("broken_app_xyz.py").write_text("import nonexistent_dependency_xyz\n")
    one_line_error(run("worker", "--app", "broken_app_xyz:app"), 2, "nonexistent_dependency_xyz")
    # an app that tether itself refuses at import: the message names the user's line
    Path("bad_task_xyz.py").write_text(
        "from tether import Tether\napp = Tether()\n\n@app.task(lease_ttl=1)\ndef f(ctx):\n    pass\n"
    )
    one_line_error(run("worker", "--app", "bad_task_xyz:app"), 2, "ConfigError", "lease_ttl 1s",
                   "bad_task_xyz.py:4")
    for name in ("broken_app_xyz", "bad_task_xyz"):
        sys.modules.pop(name, None)


def test_worker_rejects_misordered_timers(
    run: Callable[..., Result], tmp_path: Path, app_ref: Callable[[str | None], str]
) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    ref = app_ref(url)
    run("-d", url, "migrate")
    one_line_error(run("worker", "--app", ref, "--lease-ttl", "3", "--heartbeat-interval", "2"),
                   2, "invalid timers", "heartbeat_interval")
    # the task's own lease_ttl=5 must still fit two of the new, longer heartbeats
    one_line_error(run("worker", "--app", ref, "--lease-ttl", "60", "--heartbeat-interval", "4"),
                   2, "task 'short_lease'", "lease_ttl 5s")
    nan = run("worker", "--app", ref, "--lease-ttl", "nan")
    assert nan.exit_code == 2 and "finite" in nan.output



def test_worker_refuses_an_unknown_task_grace_too_short_for_a_deploy(
    run: Callable[..., Result], db_url: str, app_ref: Callable[[str | None], str]
) -> None:
    run("-d", db_url, "migrate")
    one_line_error(run("-d", db_url, "worker", "--app", app_ref(db_url), "--unknown-task-grace", "5"), 2,
                   "unknown_task_grace", "at least 60")

def test_database_flag_overrides_the_apps_url(
    run: Callable[..., Result], tmp_path: Path, app_ref: Callable[[str | None], str]
) -> None:
    own, other = f"sqlite:///{tmp_path / 'own.db'}", f"sqlite:///{tmp_path / 'other.db'}"
    ref = app_ref(own)
    run("-d", own, "migrate")
    run("-d", other, "migrate")
    assert run("enqueue", "greet", "--app", ref, "--args", '{"name": "a"}').exit_code == 0
    assert run("-d", other, "enqueue", "greet", "--app", ref, "--args", '{"name": "b"}').exit_code == 0
    assert '"name": "a"' in run("-d", own, "job", "1").stdout
    assert '"name": "b"' in run("-d", other, "job", "1").stdout


# -- real processes ---------------------------------------------------------------------------
def _tether(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60,
            ) -> subprocess.CompletedProcess[str]:
    full = dict(env) if env is not None else {k: v for k, v in os.environ.items() if k != "TETHER_DATABASE_URL"}
    full["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "tether", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def test_python_dash_m_tether_runs_the_cli(tmp_path: Path) -> None:
    result = _tether("--version", cwd=tmp_path)
    assert result.returncode == 0 and "tether" in result.stdout


def test_worker_process_timer_error_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "wapp.py").write_text(APP_SOURCE.format(url=None))
    result = _tether("worker", "--app", "wapp:app", "--lease-ttl", "2", "--heartbeat-interval", "1.5",
                     cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "invalid timers" in result.stderr


@pytest.mark.processes
def test_worker_process_runs_jobs_and_stops_on_sigterm(tmp_path: Path, db_url: str) -> None:
    url = db_url
    (tmp_path / "wapp.py").write_text(APP_SOURCE.format(url=None))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TETHER_DATABASE_URL": url}
    assert _tether("migrate", cwd=tmp_path, env=env).returncode == 0
    enq = _tether("enqueue", "greet", "--app", "wapp:app", "--args", '{"name": "w"}', cwd=tmp_path, env=env)
    assert enq.returncode == 0, enq.stderr
    job_id = int(enq.stdout)
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tether", "worker", "--app", "wapp:app", "-c", "2",
                                 "--lease-ttl", "3", "--heartbeat-interval", "1", "--reaper-interval", "1"],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        store = open_store(url)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                job = store.get_job(job_id)
                if job is not None and job.state is JobState.SUCCEEDED:
                    break
                time.sleep(0.1)
            job = store.get_job(job_id)
            assert job is not None and job.state is JobState.SUCCEEDED and job.result == "hello w"
        finally:
            store.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log_text = (tmp_path / "worker.log").read_text()
    assert "lease_ttl=3s" in log_text  # the flag reached the worker
    assert "Traceback" not in log_text
    # the driver's own routine INFO lines (two per pooled call) stay out of the log
    assert "connection requested" not in log_text and "returning connection" not in log_text


@pytest.mark.processes
def test_demo_runs_to_the_end_and_prints_its_summary(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    result = _tether("demo", "--keep", str(folder), cwd=tmp_path, timeout=150)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "lease TTL 3 s, heartbeat every 1 s, reaper every 1 s" in out  # it says so on screen
    assert "SIGKILL" in out
    assert "summary" in out
    assert "jobs: 30 enqueued → 30 succeeded" in out
    assert "exactly one per job" in out
    assert "lease_expired" in out and "attempts history of job" in out
    assert "every one of the 30 jobs succeeded exactly once" in out
    assert "Traceback" not in out + result.stderr
    # the files it kept agree: 30 succeeded jobs, and more handler runs than jobs
    store = open_store(f"sqlite:///{folder / 'demo.db'}")
    try:
        jobs = store.list_jobs(limit=100)
        assert len(jobs) == 30 and {j.state for j in jobs} == {JobState.SUCCEEDED}
        recovered = [j for j in jobs if j.attempts_used > 1]
        assert recovered
    finally:
        store.close()
    runs = (folder / "runs.csv").read_text().splitlines()
    assert len(runs) >= 30 + len(recovered)
    again = _tether("demo", "--keep", str(folder), cwd=tmp_path)
    assert again.returncode == 2 and "already holds a demo database" in again.stderr



def test_help_lists_the_lazy_commands_as_they_describe_themselves_without_importing_them() -> None:
    """`tether --help` shows each lazily imported command by LAZY_HELP (issue 47:
    listing them imported the server's and dashboard's modules); the text must be
    what the command itself would show, at any width click shortens it to."""
    import click

    from tether.cli.main import LAZY_COMMANDS, LAZY_HELP

    assert set(LAZY_HELP) == set(LAZY_COMMANDS)
    code = ("import sys; from tether.cli.main import cli\n"
            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('rich', 'starlette', 'uvicorn', 'tether.chaos', "
            "'tether.cli.server_cmd', 'tether.cli.dashboard_cmd', 'tether.cli.control_cmd'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    ctx = click.Context(cli)
    for name in LAZY_COMMANDS:
        real = cli.get_command(ctx, name)
        assert real is not None
        listed = click.Command(name, help=LAZY_HELP[name])
        for width in (20, 45, 80, 200):
            assert listed.get_short_help_str(width) == real.get_short_help_str(width), name


def test_key_limit_sets_a_pattern_and_limits_shows_it_with_its_use(run: Callable[..., Result], db_url: str) -> None:
    run("-d", db_url, "migrate")
    assert "no limits" in run("-d", db_url, "limits").stdout
    r = run("-d", db_url, "key-limit", "shop:*", "--concurrency", "3", "--rate", "10/1s")
    assert r.exit_code == 0, r.output
    assert "key pattern shop:*: concurrency 3 per key, rate 10 per 1s per key; 0 keys in use" in r.stdout
    run("-d", db_url, "limit", "emails", "--concurrency", "5")
    store = open_store(db_url)
    try:
        store.enqueue([NewJob(task="greet", args_json="{}", limit_key=f"shop:{i % 2}") for i in range(6)])
        assert len(store.claim("w-1", ["default"], 10, 30)) == 6  # rate 10: three a key, concurrency 3
        r = run("-d", db_url, "limits")
        assert r.exit_code == 0, r.output
        assert "key limits: shop:* concurrency 3 per key" in run("-d", db_url, "status").stdout
        assert r.stdout.splitlines() == [
            "queue emails: concurrency 0/5 running",
            "key pattern shop:*: concurrency 3 per key, rate 10 per 1s per key; 2 keys in use, 6 running "
            "(busiest 3), 6 started in the window"]
        r = run("-d", db_url, "key-limit", "shop:*")
        assert r.exit_code == 0 and "key pattern shop:*: removed" in r.stdout
        assert store.key_limits() == []
    finally:
        store.close()


def test_key_limit_refuses_bad_input_in_one_line_and_writes_nothing(run: Callable[..., Result], db_url: str) -> None:
    run("-d", db_url, "migrate")
    run("-d", db_url, "key-limit", "keep:*", "--concurrency", "2")
    for pattern, args, needle in [
        ("shop:*", ["--rate", "10"], "--rate must be COUNT/PERIOD"),
        ("shop:*", ["--rate", "10/soon"], "--rate's PERIOD must be a duration"),
        ("shop:*", ["--rate", "0/1s"], "a rate's count must be a whole number >= 1"),
        ("shop:*", ["--concurrency", "0"], "concurrency must be a whole number >= 1"),
        ("", ["--concurrency", "2"], "must not be empty"),
        ("a\tb", ["--concurrency", "2"], "control characters"),
    ]:
        one_line_error(run("-d", db_url, "key-limit", pattern, *args), 2, needle)
    store = open_store(db_url)
    try:
        assert [k.pattern for k in store.key_limits()] == ["keep:*"]
    finally:
        store.close()
