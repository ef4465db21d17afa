"""``tether worker --processes N``: a supervisor and N real worker processes
(``tests/proc_app.py``'s app, through the real CLI) on a real SQLite file and
a real PostgreSQL schema. Waits are on events (log lines, marker files, rows),
with generous bounds for a loaded machine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tether import JobState, Outcome
from tether.cli.processes import PoolConfig
from tether.errors import ConfigError
from tether.model import NewJob
from tether.store import Store
from tether.worker.identity import process_is, process_start_time

from .test_processes import finished, job, wait_for

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parent.parent
SERVES = re.compile(r"worker process (\d+) \(pid (\d+)\) serves as worker (\S+)")
LONG_LEASE = {"T_TTL": "30", "T_HB": "3", "T_REAPER": "30"}  # recovery within seconds is reconcile's, not the lease's


class Pool:
    """One supervisor for a test; every process it started is killed at the end."""

    def __init__(self, db_url: str, tmp: Path) -> None:
        self.db_url = db_url
        self.tmp = tmp
        self.marks = tmp / "marks"
        self.marks.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = tmp / "supervisor.log"
        self.seen: dict[int, int | None] = {}  # child pid: its start time

    def start(self, processes: int, *args: str, app: str = "proc_app:app", cwd: Path | None = None,
              **env: str) -> subprocess.Popen[bytes]:
        full = {**os.environ, "TETHER_DATABASE_URL": self.db_url, "T_MARK_DIR": str(self.marks),
                "T_TTL": "2", "T_HB": "0.4", "T_REAPER": "0.5",
                "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]), **env}
        cmd = [sys.executable, "-m", "tether", "worker", "--app", app, "--processes", str(processes),
               "-c", "1", "--no-prefetch", *args]
        with self.log_path.open("wb") as err:
            # a session of its own, as a terminal's job: killpg is Ctrl-C
            self.proc = subprocess.Popen(cmd, env=full, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd or self.tmp,
                                         start_new_session=True)
        return self.proc

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def serving(self) -> dict[int, tuple[int, str]]:
        """index: (pid, worker id) of the latest child to serve in each slot."""
        out = {int(i): (int(pid), worker) for i, pid, worker in SERVES.findall(self.log())}
        for pid, _ in out.values():
            self.seen.setdefault(pid, process_start_time(pid))
        return out

    def wait_serving(self, n: int, timeout: float = 60) -> dict[int, tuple[int, str]]:
        assert self.proc is not None
        wait_for(lambda: len(self.serving()) == n or self.proc.poll() is not None, timeout, f"{n} children")  # type: ignore[union-attr]
        assert self.proc.poll() is None, self.log()
        return self.serving()

    def alive(self, pid: int) -> bool:
        return process_is(pid, self.seen.get(pid))

    def started(self, job_id: int) -> list[tuple[int, int]]:
        """(attempt, pid) of every handler start of this job."""
        return sorted((int(a), int(p)) for _, a, p in (m.stem.split("-") for m in self.marks.glob(f"{job_id}-*.start")))

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.serving()
        for pid in self.seen:
            if self.alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def pool(db_url: str, store: Store, tmp_path: Path) -> Iterator[Pool]:
    p = Pool(db_url, tmp_path)
    yield p
    p.close()


def enqueue(store: Store, task: str, max_attempts: int = 3, **args: object) -> int:
    return store.enqueue([NewJob(task=task, args_json=json.dumps(args), max_attempts=max_attempts)])[0]


def test_children_register_as_workers_run_jobs_and_share_one_scrape(pool: Pool, store: Store) -> None:
    sup = pool.start(2, "--metrics-port", "0", "--metrics-no-auth")
    children = pool.wait_serving(2)
    live = {w.id: w.pid for w in store.list_workers(live_only=True)}
    assert {worker: pid for pid, worker in children.values()} == live, "each child is a worker of its own"

    jobs = [enqueue(store, "sleepy", seconds=0.3) for _ in range(12)]
    done = [wait_for(lambda j=j: finished(store, j), 60, f"job {j}") for j in jobs]  # type: ignore[misc]
    assert all(d.state is JobState.SUCCEEDED for d in done)
    assert {d.result["pid"] for d in done} == {pid for pid, _ in children.values()}, "both children ran jobs"

    port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics \(no authentication\)", pool.log())[1])  # type: ignore[index]

    def scrape() -> tuple[str, dict[str, float]]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        ran: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "tether_jobs_total" and sample.labels.get("outcome") == "succeeded":
                    ran[sample.labels["process"]] = ran.get(sample.labels["process"], 0) + sample.value
        return text, ran

    # (a job's counter moves on its event, just after its row: wait for the last)
    text, ran = wait_for(lambda: (lambda t: t if sum(t[1].values()) == 12 else None)(scrape()), 30, "12 successes")
    assert sorted(ran) == ["1", "2"], text
    assert text.count("# TYPE tether_queue_depth gauge") == 1
    assert 'process=' not in "".join(line for line in text.splitlines() if line.startswith("tether_queue_depth"))

    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=60) == 0, pool.log()
    assert store.list_workers(live_only=True) == []


def test_a_sigkilled_child_is_restarted_and_its_job_recovered_at_once(pool: Pool, store: Store) -> None:
    sup = pool.start(2, **LONG_LEASE)
    children = pool.wait_serving(2)
    a, b = enqueue(store, "sleepy", seconds=8), enqueue(store, "sleepy", seconds=8)
    wait_for(lambda: pool.started(a) and pool.started(b), 60, "each child to start a job")
    victim = pool.started(a)[0][1]
    sibling_job = b
    assert pool.started(b)[0][1] != victim, "one job per child (-c 1)"
    index = next(i for i, (pid, _) in children.items() if pid == victim)

    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: pool.serving()[index][0] != victim, 60, "the child's replacement to serve")
    assert f"worker process {index} (pid {victim}) was killed by SIGKILL; restarting it in 1s" in pool.log()
    # The replacement found its predecessor's pid gone and recovered the job at
    # start (its log says so, naming the dead child only), not the 30 s lease.
    wait_for(lambda: len(pool.started(a)) == 2, 60, "the job's second attempt")
    replacement = pool.serving()[index][1]
    dead = children[index][1]
    reconciled = [line for line in pool.log().splitlines() if "start-up: 1 dead predecessor(s)" in line]
    assert len(reconciled) == 1 and f"({dead}); 1 lease(s) ended, 1 job(s) recovered" in reconciled[0], pool.log()
    assert replacement not in reconciled[0] and children[3 - index][1] not in reconciled[0]
    recovered = wait_for(lambda: finished(store, a), 60, "the recovered job")
    assert recovered.state is JobState.SUCCEEDED
    assert [x.outcome for x in recovered.attempts] == [Outcome.LEASE_EXPIRED, Outcome.SUCCEEDED]
    # The live sibling was never reconciled: its job ran once, to the end.
    sib = wait_for(lambda: finished(store, sibling_job), 60, "the sibling's job")
    assert [x.outcome for x in sib.attempts] == [Outcome.SUCCEEDED]
    assert sup.poll() is None


def test_sigterm_releases_running_jobs_without_spending_their_budget(pool: Pool, store: Store) -> None:
    sup = pool.start(2, "--shutdown-timeout", "0.5")
    children = pool.wait_serving(2)
    jobs = [enqueue(store, "coop", max_attempts=1, seconds=120) for _ in range(2)]
    wait_for(lambda: all(pool.started(j) for j in jobs), 60, "both jobs to start")

    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=60) == 0, pool.log()
    for j in jobs:
        released = job(store, j)
        assert released.state is JobState.QUEUED
        assert (released.attempt, released.released, released.attempts_used) == (1, 1, 0)
        assert [x.outcome for x in released.attempts] == [Outcome.RELEASED]
    assert not any(pool.alive(pid) for pid, _ in children.values())
    assert pool.log().count("SIGTERM: stopping 2 worker process(es)") == 1


def test_a_child_that_cannot_import_the_app_ends_the_supervisor_once(pool: Pool, tmp_path: Path) -> None:
    (tmp_path / "broken_app.py").write_text('raise RuntimeError("boom at import")\n')
    sup = pool.start(3, app="broken_app:app", cwd=tmp_path)
    code = sup.wait(timeout=120)
    log = pool.log()
    assert code != 0, log
    assert log.count("RuntimeError: boom at import") == 1, log  # said once, not by each child
    assert "worker process 1" in log and "before it started (its error is above): giving up" in log
    assert "worker process 2" not in log


@pytest.mark.parametrize("task", ["coop", "sleepy"])
def test_kill_9_of_the_supervisor_leaves_no_child_running(pool: Pool, store: Store, task: str) -> None:
    """coop stops when its worker cancels it; sleepy ignores that (its
    handler thread ends with the process, after the release)."""
    sup = pool.start(2, "--shutdown-timeout", "1")
    children = pool.wait_serving(2)
    jobs = [enqueue(store, task, seconds=600) for _ in range(2)]
    wait_for(lambda: all(pool.started(j) for j in jobs), 60, "both jobs to start")

    sup.kill()
    sup.wait(timeout=10)
    wait_for(lambda: not any(pool.alive(pid) for pid, _ in children.values()), 60, "the orphans to stop")
    for j in jobs:  # released by their workers as on SIGTERM, not left to a lapsing lease
        assert [x.outcome for x in job(store, j).attempts] == [Outcome.RELEASED]
    assert store.list_workers(live_only=True) == []


def test_children_that_keep_failing_at_start_end_the_supervisor_after_a_back_off(pool: Pool, tmp_path: Path) -> None:
    """Not a usage error (killed as it starts, as by the OOM killer): retried,
    with a doubling back-off, then given up. (A usage error, exit code 2,
    ends it at once: the import error above; a database that refuses
    connections is one, as for a single worker.)"""
    (tmp_path / "killed_app.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    sup = pool.start(2, app="killed_app:app", cwd=tmp_path)
    code = sup.wait(timeout=120)
    log = pool.log()
    assert code == 1, log
    assert "restarting it in 1s" in log and "restarting it in 2s" in log
    assert log.count("worker process 1 started") == 3
    assert "was killed by SIGKILL before it started, 3 times in a row" in log
    assert "worker process 2" not in log


def test_ctrl_c_then_a_second_signal_stops_the_children_now(pool: Pool, store: Store) -> None:
    sup = pool.start(2, "--shutdown-timeout", "600")
    pool.wait_serving(2)
    jobs = [enqueue(store, "coop", seconds=600) for _ in range(2)]
    wait_for(lambda: all(pool.started(j) for j in jobs), 60, "both jobs to start")
    os.killpg(sup.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the supervisor's whole process group
    wait_for(lambda: pool.log().count("waiting up to 600s for 1 job(s)") == 2, 60, "both children to hear it")
    assert sup.poll() is None, "the first signal waits for running jobs"
    # the children, in sessions of their own, heard it once, from the supervisor: not as a second signal
    assert "stopping now" not in pool.log() and pool.log().count("SIGTERM: no new claims") == 2
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=60) == 0, pool.log()
    for j in jobs:
        assert [x.outcome for x in job(store, j).attempts] == [Outcome.RELEASED]


def test_burst_children_that_finish_are_not_restarted(pool: Pool, store: Store) -> None:
    jobs = [enqueue(store, "sleepy", seconds=0.2) for _ in range(6)]
    sup = pool.start(2, "--burst")
    assert sup.wait(timeout=120) == 0, pool.log()
    assert all(job(store, j).state is JobState.SUCCEEDED for j in jobs)
    assert "restarting" not in pool.log()
    assert len(re.findall(r"worker process \d \(pid \d+\) finished", pool.log())) == 2


@pytest.mark.parametrize("bad", [{"processes": 0}, {"start_failures": 0}, {"restart_backoff": 0},
                                 {"restart_backoff": float("inf")}, {"restart_backoff": 5, "restart_backoff_max": 1},
                                 {"processes": True}])
def test_pool_config_refuses_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        PoolConfig(**bad)  # type: ignore[arg-type]
