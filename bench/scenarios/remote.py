"""Scenario 11: remote workers through ``tether server`` against local ones.

The same no-op jobs, the same worker command (one process, concurrency C),
the same database; only the worker's ``TETHER_DATABASE_URL`` changes:

- ``local``: the worker talks to the database (PostgreSQL, or the SQLite file);
- ``remote``: the worker talks HTTP to a ``tether server`` process on loopback
  (``TETHER_TOKEN``, a worker-scope token), which runs the store operations
  against that database.

Method as in scenario 1: N jobs bulk-enqueued (straight into the database),
then the worker starts; jobs/s from the first handler to the moment nothing
is queued or running (one probe of the database every 20 ms). Worker CPU and
server CPU per job over the same window (/proc), and PostgreSQL's. Local and
remote take turns within each repetition (the order rotating), and the
figure is the ratio remote / local within the run.

    python bench/scenarios/remote.py --quick
    python bench/scenarios/remote.py --backend sqlite --concurrency 10 --n 5000
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import secrets
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

BACKENDS = ["postgresql", "sqlite"]
CONCURRENCY = [10, 50]
#: besides one worker at each concurrency: several worker processes through one
#: server, (concurrency, workers), as remote workers are usually run
MANY = [(10, 4)]
MODES = ["local", "remote"]
DB = "bench_tether_remote" + C.DB_SUFFIX
POLL = 0.02


def _system(backend: str) -> C.System:
    if backend == "sqlite":
        path = C.scratch() / "remote-bench.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        return C.tether_sqlite(path)
    C.recreate_db(DB)
    return dataclasses.replace(C.SYSTEMS["tether"], db=DB)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(system: C.System, token: str, tag: str) -> tuple[subprocess.Popen[bytes], str]:
    """``tether server`` on a free loopback port, in tether's bench venv; waits until it accepts."""
    port = _free_port()
    log = open(C.scratch() / "logs" / f"{tag}-server.log", "ab")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen([system.python, "-m", "tether", "-d", system.dsn, "server", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"],
                            env=system.environ({"TETHER_SERVER_TOKENS": f"{token} worker"}), stdout=log,
                            stderr=subprocess.STDOUT, cwd=str(C.scratch()), start_new_session=True)
    log.close()
    try:
        _wait_accepting(proc, port, 60, f"tether server (see {C.scratch() / 'logs'})")
    except RuntimeError:
        proc.kill()
        raise
    return proc, f"http://127.0.0.1:{port}"


def _wait_accepting(proc: subprocess.Popen[bytes], port: int, timeout: float, what: str) -> None:
    """Until ``proc`` accepts connections on the loopback ``port``; RuntimeError
    if it exits first or does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start listening within {timeout:g} s") from None
            time.sleep(0.05)


def _pending(system: C.System) -> Any:
    """A probe of the database: (callable returning True while jobs are left, closer)."""
    if system.is_postgres:
        conn = C.connect(system.db)
        return (lambda: conn.execute(system.pending_sql).fetchone()[0]), conn.close  # type: ignore[index]
    path = system.dsn.removeprefix("sqlite:///")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    return (lambda: db.execute(system.pending_sql).fetchone()[0]), db.close


def run_one(backend: str, mode: str, n: int, concurrency: int, tag: str, workers: int = 1) -> dict[str, Any]:
    system = _system(backend)
    logs = C.scratch() / "logs"
    C.run_client(system, ["setup"], log_to=logs / f"{tag}-setup.log")
    enq = C.run_client(system, ["enqueue", "--mode", "bulk", "--n", str(n), "--batch", "1000"],
                       log_to=logs / f"{tag}-prefill.log")
    if system.is_postgres:
        C.settle_db(system.db)
    server: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = {}
    if mode == "remote":
        token = secrets.token_urlsafe(24)
        server, url = start_server(system, token, tag)
        env = {"TETHER_DATABASE_URL": url, "TETHER_TOKEN": token}
    marks = C.fresh_dir(f"marks-{tag}")
    t_spawn = time.time()
    w = C.spawn_workers(system, workers, concurrency, extra_env={**env, "BENCH_MARK_DIR": str(marks)}, tag=f"-{tag}")
    out: dict[str, Any] = {"backend": backend, "mode": mode, "concurrency": concurrency, "workers": workers, "n": n,
                           "prefill_rate": n / enq["seconds"]}
    try:
        if C.wait_first_mark(marks, w, timeout=120) is None:
            raise RuntimeError(f"no job started (worker alive: {w.alive()}); see {logs}")
        w1, srv1 = w.cpu(), C.tree_cpu([server.pid]) if server else 0.0
        pg1 = C.pg_cpu() if system.is_postgres else 0.0
        pending, close = _pending(system)
        try:
            deadline = time.monotonic() + max(120.0, n / 50)
            while True:
                t_q = time.time()
                if not pending():
                    t_done = t_q
                    break
                if time.monotonic() > deadline or not w.alive() or (server and server.poll() is not None):
                    raise RuntimeError(f"jobs still pending at the deadline (worker alive: {w.alive()})")
                time.sleep(POLL)
        finally:
            close()
        w2, srv2 = w.cpu(), C.tree_cpu([server.pid]) if server else 0.0
        pg2 = C.pg_cpu() if system.is_postgres else 0.0
    finally:
        w.stop()
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    if system.is_postgres:
        with C.connect(system.db) as c:
            (done,) = c.execute(system.done_sql).fetchone()  # type: ignore[misc]
    else:
        db = sqlite3.connect(f"file:{system.dsn.removeprefix('sqlite:///')}?mode=ro", uri=True, timeout=30)
        (done,) = db.execute(system.done_sql).fetchone()
        db.close()
    window = t_done - min(C.first_marks(marks))
    out.update({
        "done": int(done), "ok": int(done) == n, "seconds": window, "rate": n / window,
        "rate_from_spawn": n / (t_done - t_spawn),
        "worker_cpu_per_job_ms": 1000 * (w2 - w1) / n,
        "server_cpu_per_job_ms": 1000 * (srv2 - srv1) / n,
        "pg_cpu_per_job_ms": 1000 * (pg2 - pg1) / n if system.is_postgres else None,
    })
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    out: dict[str, Any] = {"reps": len(runs), "ok_reps": len(ok)}
    for k in ("rate", "rate_from_spawn", "worker_cpu_per_job_ms", "server_cpu_per_job_ms", "pg_cpu_per_job_ms"):
        out[k] = C.median([r[k] for r in ok if r.get(k) is not None])
    if not ok and runs:
        out["error"] = runs[-1].get("error")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, default_n=60000)
    p.add_argument("--backend", action="append", choices=BACKENDS, help="default: both")
    p.add_argument("--concurrency", type=int, action="append", help="default: 10 and 50")
    p.add_argument("--db-delay-ms", type=float, default=0.0,
                   help="PostgreSQL through a proxy that delays each direction this long (a database across a "
                        "network; bench/delay_proxy.py); default 0: direct")
    p.add_argument("--workers", type=int, action="append",
                   help="worker processes (through one server when remote); default: 1, and 4 at c10")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n = args.n or (3000 if args.quick else 60000)  # 20,000 ran under a second: start-up weighed in
    C.available(["tether"]) or sys.exit("tether's bench venv is missing")
    (C.scratch() / "logs").mkdir(parents=True, exist_ok=True)
    backends = args.backend or BACKENDS
    shapes = ([(conc, w) for conc in (args.concurrency or CONCURRENCY) for w in args.workers] if args.workers else
              [(conc, 1) for conc in (args.concurrency or CONCURRENCY)] + ([] if args.concurrency else MANY))
    results: dict[str, Any] = {"n": n, "configs": {}, "runs": [], "db_delay_ms": args.db_delay_ms}
    with delayed_db(args.db_delay_ms):
        _run(results, backends, shapes, n, args)
    C.save_raw("remote", results)
    return results


@contextlib.contextmanager
def delayed_db(delay_ms: float) -> Iterator[None]:
    """PostgreSQL (every connection of the run: workers, server, probes) through
    bench/delay_proxy.py, ``delay_ms`` each way; directly when 0."""
    if not delay_ms:
        yield
        return
    port, saved = _free_port(), C.PG_PORT
    proxy = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[1] / "delay_proxy.py"),
                              "--listen", str(port), "--target", f"{C.PG_HOST}:{saved}", "--delay-ms", str(delay_ms)],
                             start_new_session=True)
    try:
        _wait_accepting(proxy, port, 10, "the delay proxy")
        C.PG_PORT = port
        C.log(f"PostgreSQL through a proxy that delays each direction {delay_ms:g} ms")
        yield
    finally:
        C.PG_PORT = saved
        proxy.terminate()
        proxy.wait(timeout=10)


def _run(results: dict[str, Any], backends: list[str], shapes: list[tuple[int, int]], n: int,
         args: argparse.Namespace) -> None:
    runs: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    for backend in backends:
        for conc, workers in shapes:
            shape = f"c{conc}" if workers == 1 else f"{workers}w x c{conc}"
            for rep in range(args.reps or (2 if args.quick else 3)):  # the ratio is the figure: two even when quick
                for mode in C.rotated(MODES, rep):
                    tag = f"remote-{backend}-{mode}-{workers}w-c{conc}-r{rep}"
                    C.log(f"remote {backend} {mode} {shape} n={n} rep {rep + 1}")
                    speed = C.speed_probe()
                    try:
                        r = run_one(backend, mode, n, conc, tag, workers)
                        C.log(f"  {r['rate']:.0f} jobs/s, worker {r['worker_cpu_per_job_ms']:.3f} ms/job, "
                              f"server {r['server_cpu_per_job_ms']:.3f} ms/job, done {r['done']}/{n}, "
                              f"speed probe {speed:.1f} ms")
                    except Exception as exc:
                        C.log(f"  FAILED: {exc}")
                        r = {"backend": backend, "mode": mode, "concurrency": conc, "workers": workers, "ok": False,
                             "error": str(exc)[:2000]}
                    r["rep"], r["speed_probe_ms"] = rep, speed
                    runs.setdefault((backend, conc, workers, mode), []).append(r)
                    results["runs"].append(r)
            local = summarize(runs[backend, conc, workers, "local"])
            remote = summarize(runs[backend, conc, workers, "remote"])
            ratio = remote["rate"] / local["rate"] if remote["rate"] and local["rate"] else None
            results["configs"][f"{backend} {shape}"] = {"local": local, "remote": remote,
                                                        "remote_over_local": ratio}
            C.log(f"remote {backend} {shape}: remote/local = {ratio or 0:.2f}")
    if "postgresql" in backends:
        C.drop_db(DB)


if __name__ == "__main__":
    main()
