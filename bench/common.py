"""Shared measurement code for the benchmark scenarios (the driver side).

The driver runs in ``bench/.venvs/driver`` (psycopg, matplotlib). Each system
under test runs in its own virtualenv, as separate processes: a *client*
(``apps/<system>_client.py``: schema set-up, enqueueing, the latency producer)
and *workers* (the system's own worker command, importing ``apps/<system>_app.py``).
The driver never imports a system; it starts processes and watches PostgreSQL
and /proc:

- PostgreSQL CPU: utime+stime of every process of the server (the postmaster
  and its children) from /proc, plus the postmaster's cutime+cstime, which holds
  the CPU of children that exited in between (each worker connection's backend
  exits when the worker does, so without it their CPU would vanish);
- commits: ``xact_commit`` of the system's database in ``pg_stat_database``;
  backends flush these counters lazily (up to ~10 s on an idle connection), so
  the closing snapshot is taken only after every connection to that database is
  gone (exiting backends flush);
- WAL bytes: ``pg_current_wal_lsn()`` before and after (cluster-wide: run on a
  quiet server);
- worker CPU: utime+stime of the worker processes and their descendants from
  /proc (a window), and the rusage ``wait4`` returns when they exit (total).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VENVS = BENCH / ".venvs"
APPS = BENCH / "apps"
DRIVER_VENV = VENVS / "driver"


def _ensure_driver() -> None:
    """Re-run the calling script under the driver venv (so any python can start it)."""
    drv = DRIVER_VENV / "bin" / "python"
    if os.environ.get("BENCH_IN_DRIVER") == "1" or Path(sys.prefix).resolve() == DRIVER_VENV.resolve():
        return
    if not drv.exists():
        sys.exit(f"the driver venv is missing: run `bash {BENCH / 'run'} --setup` first")
    os.environ["BENCH_IN_DRIVER"] = "1"
    os.execv(str(drv), [str(drv), *sys.argv])


_ensure_driver()

import psycopg  # noqa: E402  (after the re-exec into the driver venv)

PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
ADMIN_DB = os.environ.get("BENCH_PG_ADMIN_DB", "postgres")
PGBIN = Path(os.environ.get("BENCH_PGBIN", "/usr/lib/postgresql/15/bin"))
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: appended to the names of the databases the systems and the sentinel use, so
#: that two harnesses (two checkouts) can share one server without dropping
#: each other's databases mid-run
DB_SUFFIX = os.environ.get("BENCH_DB_SUFFIX", "")


def pg_url(db: str) -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"


def connect(db: str = ADMIN_DB) -> psycopg.Connection[Any]:
    return psycopg.connect(pg_url(db), autocommit=True)


# -- databases ---------------------------------------------------------------------------
def recreate_db(name: str) -> None:
    with connect() as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')


def drop_db(name: str) -> None:
    with connect() as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def backends(db: str, admin: psycopg.Connection[Any] | None = None) -> int:
    own = admin is None
    conn = admin or connect()
    try:
        (n,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (db,)
        ).fetchone()  # type: ignore[misc]
        return int(n)
    finally:
        if own:
            conn.close()


def wait_no_backends(db: str, timeout: float = 30.0) -> bool:
    """Until every connection to ``db`` is gone (their stats are flushed on exit)."""
    deadline = time.monotonic() + timeout
    with connect() as admin:
        while time.monotonic() < deadline:
            if backends(db, admin) == 0:
                time.sleep(0.05)  # the exit hook flushes just before the process goes
                return True
            time.sleep(0.02)
    return False


def settle_db(db: str) -> None:
    """Same start for every system: statistics fresh, hint bits set, and a
    checkpoint so that each run pays the same full-page writes in WAL."""
    with connect(db) as c:
        c.execute("VACUUM (ANALYZE)")
    with connect() as c:
        c.execute("CHECKPOINT")
    wait_no_backends(db)


# -- /proc ----------------------------------------------------------------------------------
def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: split around the last ')'
    lpar, rpar = raw.index("("), raw.rindex(")")
    return [raw[:lpar].strip(), raw[lpar + 1:rpar], *raw[rpar + 2:].split()]


def _all_stats() -> dict[int, list[str]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def _cpu(st: list[str], children: bool = False) -> float:
    # fields (0-based after our split): 13 utime, 14 stime, 15 cutime, 16 cstime
    t = int(st[13]) + int(st[14])
    if children:
        t += int(st[15]) + int(st[16])
    return t / CLK_TCK


_POSTMASTER: int | None = None


def postmaster_pid() -> int:
    """The server's postmaster: the parent of one of our own backends."""
    global _POSTMASTER
    if _POSTMASTER is None:
        with connect() as c:  # read while the backend lives: it exits when the connection closes
            (backend,) = c.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
            st = _stat(int(backend))
        if st is None:
            raise RuntimeError("cannot read the PostgreSQL backend's /proc entry: is the server on this machine?")
        _POSTMASTER = int(st[3])
    return _POSTMASTER


def pg_cpu() -> float:
    """CPU seconds of the whole server so far: live processes + reaped children."""
    pm = postmaster_pid()
    total = 0.0
    for pid, st in _all_stats().items():
        if pid == pm:
            total += _cpu(st, children=True)
        elif int(st[3]) == pm:
            total += _cpu(st)
    return total


def tree_cpu(pids: Iterable[int]) -> float:
    """CPU seconds of the given processes and all their live descendants."""
    stats = _all_stats()
    kids: dict[int, list[int]] = {}
    for pid, st in stats.items():
        kids.setdefault(int(st[3]), []).append(pid)
    seen: set[int] = set()
    todo = list(pids)
    total = 0.0
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += _cpu(stats[pid], children=True)
        todo.extend(kids.get(pid, []))
    return total


# -- PostgreSQL snapshots -------------------------------------------------------------------
@dataclass
class Snap:
    t: float
    commits: int
    rollbacks: int
    wal_lsn: str
    pg_cpu: float


def snapshot(db: str, admin: psycopg.Connection[Any] | None = None) -> Snap:
    own = admin is None
    conn = admin or connect()
    try:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit, xact_rollback, pg_current_wal_lsn()::text FROM pg_stat_database WHERE datname = %s",
            (db,),
        ).fetchone()
        commits, rollbacks, lsn = row if row else (0, 0, "0/0")
        return Snap(time.time(), int(commits), int(rollbacks), lsn, pg_cpu())
    finally:
        if own:
            conn.close()


SENTINEL_DB = "bench_sentinel" + DB_SUFFIX


class Sentinel:
    """Counts the commits that other sessions' DDL forces on an idle connection.

    When the shared invalidation queue fills up (some other session in the
    cluster is creating and dropping tables, e.g. a test suite), PostgreSQL makes
    every *idle* backend catch up by running an empty transaction, and those
    count in its database's ``xact_commit``. An idle connection to a database
    of its own measures that noise; ``correct(commits, idle_connections)``
    subtracts it. On a quiet server it is zero.
    """

    def __enter__(self) -> Sentinel:
        with connect() as c:
            if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (SENTINEL_DB,)).fetchone():
                c.execute(f'CREATE DATABASE "{SENTINEL_DB}"')
        wait_no_backends(SENTINEL_DB)
        self._before = snapshot(SENTINEL_DB).commits
        self._conn = connect(SENTINEL_DB)
        self.catchup = 0
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.close()
        wait_no_backends(SENTINEL_DB)
        # the session itself counts one commit
        self.catchup = max(0, snapshot(SENTINEL_DB).commits - self._before - 1)

    def correct(self, commits: int, idle_connections: int) -> int:
        return max(0, commits - self.catchup * idle_connections)


def wal_bytes(a: Snap, b: Snap) -> int:
    with connect() as c:
        (n,) = c.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (b.wal_lsn, a.wal_lsn)).fetchone()  # type: ignore[misc]
    return int(n)


# -- systems --------------------------------------------------------------------------------
@dataclass
class System:
    """How to run one queue: its venv, database, worker command and progress queries."""

    name: str
    venv: str
    db: str
    #: worker argv for a concurrency (after the venv's bin/ is resolved)
    worker_argv: Callable[[System, int], list[str]]
    #: true while any job is queued or running (cheap: one index probe)
    pending_sql: str
    #: number of jobs that finished successfully
    done_sql: str
    #: number of jobs running now (heartbeat scenario)
    running_sql: str = ""
    #: notes shown in the README/results: how the system is configured
    notes: str = ""
    env: dict[str, str] = field(default_factory=dict)
    modes: tuple[str, ...] = ("bulk", "sync", "async")
    setup_takes_concurrency: bool = False
    url: str | None = None  # None: pg_url(db)

    @property
    def bin(self) -> Path:
        return VENVS / self.venv / "bin"

    @property
    def python(self) -> str:
        return str(self.bin / "python")

    @property
    def dsn(self) -> str:
        return self.url or pg_url(self.db)

    @property
    def is_postgres(self) -> bool:
        return self.dsn.startswith("postgresql://")

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            **os.environ,
            "BENCH_DSN": self.dsn,
            # BENCH_TETHER_SRC: another checkout's src/ ahead of the editable
            # install, for an A/B of two versions of tether in one run
            "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("BENCH_TETHER_SRC"), str(APPS)])),
            "PYTHONUNBUFFERED": "1",
            **{k: v.format(dsn=self.dsn) for k, v in self.env.items()},
        }
        env.pop("BENCH_IN_DRIVER", None)
        env.pop("VIRTUAL_ENV", None)
        env.update(extra or {})
        return env


def _tether_argv(s: System, c: int) -> list[str]:
    return [s.python, "-m", "tether", "worker", "--app", "tether_app:app", "-c", str(c), "--log-level", "warning"]


def _pgq_argv(s: System, c: int) -> list[str]:
    # --max-concurrent-tasks caps this worker's picked jobs (pgqueuer requires it
    # to be at least twice --batch-size), so concurrency C -> batch C/2.
    return [str(s.bin / "pgq"), "run", "pgqueuer_app:main", "--batch-size", str(max(1, c // 2)),
            "--max-concurrent-tasks", str(max(2, c)), "--log-level", "WARNING"]


def _proc_argv(s: System, c: int) -> list[str]:
    return [str(s.bin / "procrastinate"), "--app=procrastinate_app.app", "worker", "--concurrency", str(c)]


def _oban_argv(s: System, c: int) -> list[str]:
    return [str(s.bin / "oban"), "start", "--dsn", s.dsn, "--queues", f"default:{c}", "--log-level", "WARNING"]


def _chancy_argv(s: System, c: int) -> list[str]:
    # concurrency lives on the queue row: set by `chancy_client.py setup --concurrency C`
    return [str(s.bin / "chancy"), "--app", "chancy_app.chancy", "worker", "start"]


def tether_pending(schema: str = "tether") -> str:
    # two probes, one per partial index (claim: queued; reap: running)
    return (f"SELECT EXISTS (SELECT 1 FROM {schema}.jobs WHERE state = 'queued') "
            f"OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE state = 'running')")


SYSTEMS: dict[str, System] = {
    "tether": System(
        "tether", "tether", "bench_tether", _tether_argv,
        pending_sql=tether_pending(),
        done_sql="SELECT count(*) FROM tether.jobs WHERE state = 'succeeded'",
        running_sql="SELECT count(*) FROM tether.jobs WHERE state = 'running'",
        env={"TETHER_DATABASE_URL": "{dsn}"},
        notes="`python -m tether worker -c C`; heartbeats, fencing and the attempts audit on (always)",
    ),
    "pgqueuer": System(
        "pgqueuer", "pgqueuer", "bench_pgqueuer", _pgq_argv,
        pending_sql="SELECT EXISTS (SELECT 1 FROM pgqueuer)",
        done_sql="SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
        running_sql="SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
        env={"PGDSN": "{dsn}"},
        notes="`pgq run` (asyncpg driver), `--max-concurrent-tasks C --batch-size C/2`; typer pinned to 0.28",
    ),
    "procrastinate": System(
        "procrastinate", "procrastinate", "bench_procrastinate", _proc_argv,
        pending_sql="SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))",
        done_sql="SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
        running_sql="SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'",
        notes="`procrastinate worker --concurrency C`, PsycopgConnector, async tasks, jobs kept (default)",
    ),
    "oban": System(
        "oban", "oban", "bench_oban", _oban_argv,
        pending_sql=("SELECT EXISTS (SELECT 1 FROM oban_jobs "
                     "WHERE state IN ('available', 'scheduled', 'executing', 'retryable'))"),
        done_sql="SELECT count(*) FROM oban_jobs WHERE state = 'completed'",
        running_sql="SELECT count(*) FROM oban_jobs WHERE state = 'executing'",
        modes=("bulk", "async"),
        notes="`oban start --queues default:C` (Python 3.12); async-only API, so no sync enqueue",
    ),
    "chancy": System(
        "chancy", "chancy", "bench_chancy", _chancy_argv,
        pending_sql="SELECT EXISTS (SELECT 1 FROM chancy_jobs WHERE state IN ('pending', 'running', 'retrying'))",
        done_sql="SELECT count(*) FROM chancy_jobs WHERE state = 'succeeded'",
        running_sql="SELECT count(*) FROM chancy_jobs WHERE state = 'running'",
        setup_takes_concurrency=True,
        notes="`chancy worker start`; queue declared with the asyncio executor, concurrency C, eager polling",
    ),
}
for _s in SYSTEMS.values():
    _s.db += DB_SUFFIX
PEERS = ["pgqueuer", "procrastinate", "oban", "chancy"]
ALL_SYSTEMS = ["tether", *PEERS]


def available(names: Sequence[str]) -> list[str]:
    """Those systems whose venv exists (bench/run creates them)."""
    out = []
    for n in names:
        if (VENVS / SYSTEMS[n].venv / "bin" / "python").exists():
            out.append(n)
        else:
            log(f"skipping {n}: no venv at {VENVS / SYSTEMS[n].venv} (run bench/run --setup)")
    return out


# -- processes ------------------------------------------------------------------------------
RESULT_PREFIX = "BENCH-RESULT "


def run_client(system: System, args: Sequence[str], *, extra_env: dict[str, str] | None = None,
               timeout: float = 1800, log_to: Path | None = None, script: str | None = None) -> dict[str, Any]:
    """Run ``apps/<system>_client.py ARGS`` (or ``apps/<script>``) in the system's venv; return its JSON answer."""
    argv = [system.python, str(APPS / (script or f"{system.name}_client.py")), *args]
    p = subprocess.run(argv, env=system.environ(extra_env), capture_output=True, text=True,
                       timeout=timeout, cwd=str(scratch()))
    if log_to is not None:
        log_to.parent.mkdir(parents=True, exist_ok=True)
        log_to.write_text(f"$ {' '.join(argv)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}\n")
    if p.returncode != 0:
        raise RuntimeError(f"{system.name} client {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])  # type: ignore[no-any-return]
    raise RuntimeError(f"{system.name} client {' '.join(args)} printed no result:\n{p.stdout[-2000:]}")


@dataclass
class Workers:
    procs: list[subprocess.Popen[bytes]]
    logs: list[Any]
    rusage: list[Any] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def cpu(self) -> float:
        return tree_cpu(self.pids)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> float:
        """Signal every worker, reap them; returns their total rusage CPU seconds."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)
        deadline = time.monotonic() + timeout
        total = 0.0
        for p in self.procs:
            while True:
                try:
                    pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                except ChildProcessError:  # already reaped by Popen.poll()
                    break
                if pid:
                    p.returncode = os.waitstatus_to_exitcode(status)
                    total += ru.ru_utime + ru.ru_stime
                    break
                if time.monotonic() > deadline:
                    p.kill()
                    deadline = time.monotonic() + 10
                time.sleep(0.02)
        for f in self.logs:
            f.close()
        return total


def spawn_workers(system: System, count: int, concurrency: int, *, extra_env: dict[str, str] | None = None,
                  argv: list[str] | None = None, tag: str = "", cpus: str | None = None) -> Workers:
    """``cpus``: run each worker process on these CPUs only (``taskset -c``), every thread of it."""
    procs, logs = [], []
    logdir = scratch() / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    for k in range(count):
        f = open(logdir / f"{system.name}{tag}-w{k}.log", "ab")  # noqa: SIM115 (closed by Workers.stop)
        cmd = argv or system.worker_argv(system, concurrency)
        if cpus is not None:
            cmd = ["taskset", "-c", cpus, *cmd]
        f.write(f"$ {' '.join(cmd)}\n".encode())
        f.flush()
        # libpq (psycopg) names each connection after its worker process, so
        # pg_stat_activity can count a worker's connections (worker_app_name)
        env = {"PGAPPNAME": worker_app_name(k), **(extra_env or {})}
        procs.append(subprocess.Popen(cmd, env=system.environ(env), stdout=f, stderr=subprocess.STDOUT,
                                      cwd=str(scratch()), start_new_session=True))
        logs.append(f)
    return Workers(procs, logs)


def worker_app_name(k: int) -> str:
    """The ``application_name`` of worker process ``k``'s connections (drivers
    that read ``PGAPPNAME``: libpq's, so tether's, procrastinate's, chancy's)."""
    return f"bench-w{k}"


def connections_by_app(db: str, admin: psycopg.Connection[Any]) -> dict[str, int]:
    """Connections to ``db`` now, by ``application_name`` (one query)."""
    rows = admin.execute(
        "SELECT application_name, count(*) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid() GROUP BY 1", (db,)).fetchall()
    return {str(a): int(n) for a, n in rows}


def first_marks(mark_dir: Path) -> list[float]:
    out = []
    for p in mark_dir.glob("first-*"):
        if p.suffix == ".tmp":
            continue
        with contextlib.suppress(ValueError):
            out.append(float(p.read_text()))
    return out


def wait_first_mark(mark_dir: Path, workers: Workers, timeout: float = 120.0) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(mark_dir.glob("first-*[0-9]")):
            return time.time()
        if not workers.alive():
            return None
        time.sleep(0.002)
    return None


# -- results --------------------------------------------------------------------------------
_SCRATCH: Path | None = None
_OUT: Path | None = None


def out_dir() -> Path:
    global _OUT
    if _OUT is None:
        default = BENCH / "results" / _dt.date.today().isoformat()
        _OUT = Path(os.environ.get("BENCH_OUT", default))
        _OUT.mkdir(parents=True, exist_ok=True)
    return _OUT


def compile_sources() -> None:
    """Byte-compile tether's source tree and the bench apps, once per driver,
    with each system's interpreter. The peers come from wheels, which pip
    byte-compiles at install, as it does for a user's ``pip install tether``;
    the bench's tether is the working tree, installed editable, which nothing
    compiles: where ``PYTHONDONTWRITEBYTECODE`` is set (as on some hosts and in
    many container images) every worker it started compiled tether's ~70
    modules from source, about 0.25 s of CPU a process that no user pays."""
    global _COMPILED
    if _COMPILED:
        return
    _COMPILED = True
    pythons = {SYSTEMS[n].python for n in SYSTEMS if Path(SYSTEMS[n].python).exists()}
    for python in sorted(pythons):
        targets = [str(APPS)] + ([str(REPO / "src")] if python == SYSTEMS["tether"].python else [])
        subprocess.run([python, "-m", "compileall", "-q", *targets], capture_output=True, timeout=300)


_COMPILED = False


def set_out_dir(path: str | Path | None, *, quick: bool = False) -> None:
    """``path``, else ``$BENCH_OUT``, else bench/results/<date> (``<date>-quick``
    for --quick runs, so a smoke run never mixes with a full one). Also
    byte-compiles the sources the systems run (``compile_sources``)."""
    compile_sources()
    global _OUT, _SCRATCH
    if path is None and not os.environ.get("BENCH_OUT"):
        path = BENCH / "results" / (_dt.date.today().isoformat() + ("-quick" if quick else ""))
    if path is not None:
        _OUT = Path(path).resolve()
        _OUT.mkdir(parents=True, exist_ok=True)
        _SCRATCH = None


def scratch() -> Path:
    """Per-run scratch space (gitignored): logs, markers, records, SQLite files."""
    global _SCRATCH
    if _SCRATCH is None:
        _SCRATCH = out_dir() / "raw-tmp"
        _SCRATCH.mkdir(parents=True, exist_ok=True)
    return _SCRATCH


def fresh_dir(name: str) -> Path:
    d = scratch() / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def save_raw(scenario: str, data: dict[str, Any]) -> Path:
    d = out_dir() / "raw"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{scenario}.json"
    data = {"scenario": scenario, "machine": machine(), **data}
    path.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    log(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return path


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["mem_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    try:
        with connect() as c:
            info["postgres"] = c.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    except Exception:
        pass
    return info


def rotated(items: Sequence[str], k: int) -> list[str]:
    """``items`` starting at position ``k`` (mod its length): repetition k's order."""
    k %= max(1, len(items))
    return [*items[k:], *items[:k]]


def speed_probe() -> float:
    """Milliseconds of CPU for a fixed pure-Python loop, the median of five:
    how fast this machine runs right now. On a shared host it drifts by half
    or more within minutes; recorded with each run so a reader can see it."""
    times = []
    for _ in range(5):
        t0 = time.process_time()
        acc = 0
        for i in range(300_000):
            acc += i * i % 7
        times.append(time.process_time() - t0)
    return 1000 * sorted(times)[2]


def median(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def percentile(xs: Sequence[float], p: float) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def add_common_args(p: Any, *, systems: Sequence[str] | None = None, default_n: int | None = None) -> None:
    if systems is not None:
        p.add_argument("--system", action="append", choices=list(systems),
                       help=f"system(s) to run (repeatable; default: all of {', '.join(systems)})")
    if default_n is not None:
        p.add_argument("--n", type=int, default=None, help=f"jobs per run (default {default_n}; --quick: less)")
    p.add_argument("--reps", type=int, default=None, help="repetitions; the median is reported (default 3, --quick 1)")
    p.add_argument("--quick", action="store_true", help="small N, one repetition")
    p.add_argument("--out", default=None, help="results directory (default bench/results/<date>)")


def reps(args: Any) -> int:
    return int(args.reps or (1 if args.quick else 3))


def tether_sqlite(path: Path) -> System:
    """tether on an SQLite file (embedded: workers poll, no NOTIFY)."""
    base = SYSTEMS["tether"]
    return System(
        "tether", base.venv, db="", worker_argv=_tether_argv,
        pending_sql="SELECT EXISTS (SELECT 1 FROM tether_jobs WHERE state IN ('queued', 'running'))",
        done_sql="SELECT count(*) FROM tether_jobs WHERE state = 'succeeded'",
        env={"TETHER_DATABASE_URL": "{dsn}"},
        url=f"sqlite:///{path.resolve()}",
        notes="tether on SQLite (WAL, synchronous=NORMAL), workers poll every 0.2 s",
    )
