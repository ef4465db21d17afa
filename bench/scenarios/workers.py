"""Scenario: many tether worker processes against one PostgreSQL database.

1, 2, 4, 8 and 16 worker processes (concurrency 10 each) drain N pre-enqueued
no-op jobs. So that the count measured is the count running (not a race
between the first workers and the start-up of the last), the jobs are held
back until every worker is up: after the bulk enqueue their ``run_at`` is
moved a day ahead, the workers start on what is for them an empty queue, and
once all have registered (a row each in ``tether.workers``) and opened their
connections, one ``UPDATE ... SET run_at = now()`` and a NOTIFY on the
queue's channel (what an enqueue sends) release them. Reported per count:

- **jobs/s** = N / (released -> the database shows nothing queued or
  running), and **from spawn** (start-up included: the workers' spawn to
  the same point);
- worker CPU and PostgreSQL CPU per job over that window, and how busy the
  machine's cores were (worker + PostgreSQL CPU / window / cores);
- **connections per worker process**: every worker's connections carry
  ``application_name`` ``bench-w<k>`` (libpq reads ``PGAPPNAME``), and
  ``pg_stat_activity`` is sampled (every 0.1 s) while the jobs run: the
  median and the most of any worker, and the count at idle, before release;
- **what the busy backends wait on**: the same samples' active backends of
  the database, by ``wait_event_type:wait_event`` (``Lock:*`` is a row or
  transaction lock wait, ``LWLock:*`` contention inside the server,
  ``Client:ClientRead`` a backend waiting for its client, ``IO:*``, none =
  on CPU);
- **heartbeat statements**: each heartbeat updates the worker's own row of
  ``tether.workers`` (``last_seen``), and nothing else updates that table
  but the one ``stop_worker`` per worker at exit, so ``n_tup_upd`` of
  ``tether.workers`` (``pg_stat_user_tables``, read after every connection
  closed) less the worker count is the number of heartbeat statements sent.
  Per second over the workers' lives (spawn to exit), total and per worker,
  and per 1,000 jobs. The workers run with ``heartbeat_interval`` 1 s
  (``--heartbeat``) so that a short run holds several ticks: expect about one
  per worker per second whatever the jobs/s.

    python bench/scenarios/workers.py --quick
    python bench/scenarios/workers.py --workers 1 --workers 16 --n 40000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
import throughput

WORKERS = [1, 2, 4, 8, 16]
SAMPLE_EVERY = 0.1


class Sampler:
    """pg_stat_activity of one database, sampled at most every SAMPLE_EVERY s."""

    def __init__(self, db: str, workers: int) -> None:
        self.db = db
        self.apps = [C.worker_app_name(k) for k in range(workers)]
        self.per_worker: list[int] = []  # one count per worker per sample
        self.waits: Counter[str] = Counter()
        self.active = 0
        self.samples = 0
        self._next = 0.0

    def sample(self, admin: Any) -> dict[str, int]:
        rows = admin.execute(
            "SELECT application_name, state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()", (self.db,)).fetchall()
        by_app = Counter(str(r[0]) for r in rows)
        return {a: by_app.get(a, 0) for a in self.apps} | {"_rows": rows}  # type: ignore[dict-item]

    def __call__(self, admin: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + SAMPLE_EVERY
        got = self.sample(admin)
        rows = got.pop("_rows")
        self.samples += 1
        self.per_worker += list(got.values())
        for _app, state, wtype, wevent in rows:  # type: ignore[attr-defined]
            if state == "active":
                self.active += 1
                self.waits[f"{wtype}:{wevent}" if wtype else "CPU (no wait)"] += 1


def workers_registered(db: str) -> int:
    with C.connect(db) as c:
        (n,) = c.execute("SELECT count(*) FROM tether.workers WHERE stopped_at IS NULL").fetchone()  # type: ignore[misc]
    return int(n)


def run_one(n: int, workers: int, conc: int, tag: str, env: dict[str, str], *,
            done_notify: bool = True) -> dict[str, Any]:
    system = C.SYSTEMS["tether"]
    db = system.db
    C.recreate_db(db)
    C.run_client(system, ["setup"], extra_env=env, log_to=C.scratch() / "logs" / f"{tag}-setup.log")
    C.run_client(system, ["enqueue", "--mode", "bulk", "--n", str(n), "--batch", "1000"], extra_env=env,
                 log_to=C.scratch() / "logs" / f"{tag}-prefill.log")
    with C.connect(db) as c:  # held back until every worker is up
        c.execute("UPDATE tether.jobs SET run_at = now() + interval '1 day'")
        if not done_notify:  # an experiment (--no-done-notify), not how tether runs
            c.execute("ALTER TABLE tether.attempts DISABLE TRIGGER attempts_notify_finished")
    C.settle_db(db)
    marks = C.fresh_dir(f"marks-{tag}")
    sampler = Sampler(db, workers)
    with C.connect() as admin:
        s0 = C.snapshot(db, admin)
        t_spawn = time.time()
        w = C.spawn_workers(system, workers, conc, extra_env={**env, "BENCH_MARK_DIR": str(marks)}, tag=f"-{tag}")
        try:
            deadline = time.monotonic() + 60 + 10 * workers
            while workers_registered(db) < workers:
                if time.monotonic() > deadline or not w.alive():
                    raise RuntimeError(f"not every worker registered (alive: {w.alive()}); see {C.scratch() / 'logs'}")
                time.sleep(0.1)
            time.sleep(1.0)  # past registration: the LISTEN connection and a first (empty) claim
            idle = sampler.sample(admin)
            idle.pop("_rows")
            t_up = time.time()
            s1 = C.snapshot(db, admin)
            w1 = w.cpu()
            t_release = time.time()
            with C.connect(db) as c:
                c.execute("UPDATE tether.jobs SET run_at = now()")
                c.execute("SELECT pg_notify('tether_tether', 'default')")
            t_done, polls = throughput.wait_drained(system, w, n, admin, sampler)
            w2 = w.cpu()
            s2 = C.snapshot(db, admin)
        finally:
            rusage_cpu = w.stop()
            t_exit = time.time()
    s3, done = throughput.after_exit(system)
    with C.connect(db) as c:
        (upd,) = c.execute("SELECT n_tup_upd FROM pg_stat_user_tables "  # type: ignore[misc]
                           "WHERE schemaname = 'tether' AND relname = 'workers'").fetchone()
        ran = c.execute("SELECT count(DISTINCT worker) FROM tether.attempts").fetchone()
    window = t_done - t_release
    life = t_exit - t_spawn
    beats = max(0, int(upd) - workers)
    cpu_w, cpu_pg = w2 - w1, s2.pg_cpu - s1.pg_cpu
    per = sampler.per_worker
    return {
        "workers": workers, "concurrency": conc, "n": n, "done": int(done), "ok": int(done) == n,
        "workers_that_ran_jobs": int(ran[0]) if ran else None,
        "startup_s": t_up - t_spawn, "seconds": window,
        "rate": n / window, "rate_from_spawn": n / (t_done - t_spawn),
        "worker_cpu_per_job_ms": 1000 * cpu_w / n, "pg_cpu_per_job_ms": 1000 * cpu_pg / n,
        "cpu_per_job_ms": 1000 * (cpu_w + cpu_pg) / n,
        "worker_cpu_total_s": rusage_cpu, "pg_cpu_total_s": s3.pg_cpu - s0.pg_cpu,
        "cores_busy_pct": 100 * (cpu_w + cpu_pg) / window / (os.cpu_count() or 1),
        "worker_cpu_pct": 100 * cpu_w / window, "pg_cpu_pct": 100 * cpu_pg / window,
        "conns_per_worker_idle_max": max(idle.values(), default=0),
        "conns_per_worker_median": statistics.median(per) if per else None,
        "conns_per_worker_max": max(per, default=0),
        "conns_samples": sampler.samples,
        "active_backend_samples": sampler.active,
        "waits": dict(sampler.waits.most_common()),
        "commits_per_job": (s3.commits - s0.commits - polls) / n,
        "heartbeats": beats, "life_s": life,
        "heartbeats_per_s": beats / life, "heartbeats_per_worker_per_s": beats / life / workers,
        "heartbeats_per_1000_jobs": 1000 * beats / n,
    }


KEYS = ["rate", "rate_from_spawn", "worker_cpu_per_job_ms", "pg_cpu_per_job_ms", "cpu_per_job_ms",
        "cores_busy_pct", "worker_cpu_pct", "pg_cpu_pct", "conns_per_worker_idle_max", "conns_per_worker_median",
        "conns_per_worker_max", "heartbeats_per_s", "heartbeats_per_worker_per_s", "heartbeats_per_1000_jobs",
        "commits_per_job", "startup_s", "workers_that_ran_jobs"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, default_n=40000)
    p.add_argument("--workers", type=int, action="append", help="worker processes (repeatable; default 1 2 4 8 16)")
    p.add_argument("--concurrency", type=int, default=10, help="per worker (default 10)")
    p.add_argument("--heartbeat", type=float, default=1.0, help="workers' heartbeat interval, s (default 1)")
    p.add_argument("--no-done-notify", action="store_true",
                   help="experiment: disable the attempts trigger that NOTIFYs app.wait() of finished jobs "
                        "(every NOTIFYing commit takes one cluster-wide lock; see bench/README.md)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n = args.n or (5000 if args.quick else 40000)
    C.available(["tether"]) or sys.exit("tether's bench venv is missing")
    counts = args.workers or WORKERS
    env = {"BENCH_HEARTBEAT": str(args.heartbeat)}
    results: dict[str, Any] = {"n": n, "concurrency": args.concurrency, "heartbeat_s": args.heartbeat,
                               "cores": os.cpu_count(), "done_notify": not args.no_done_notify,
                               "by_workers": {}, "runs": []}
    runs: dict[int, list[dict[str, Any]]] = {k: [] for k in counts}
    for rep in range(C.reps(args)):
        for k in C.rotated([str(c) for c in counts], rep):  # counts take turns too
            k_i = int(k)
            speed = C.speed_probe()
            C.log(f"workers {k_i} x c{args.concurrency} n={n} rep {rep + 1}")
            try:
                r = run_one(n, k_i, args.concurrency, f"workers-{k_i}-r{rep}", env,
                            done_notify=not args.no_done_notify)
                C.log(f"  {r['rate']:.0f} jobs/s ({r['rate_from_spawn']:.0f} from spawn), cores busy "
                      f"{r['cores_busy_pct']:.0f}%, conns/worker median {r['conns_per_worker_median']} max "
                      f"{r['conns_per_worker_max']}, {r['heartbeats_per_s']:.1f} heartbeats/s, done {r['done']}/{n}")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"workers": k_i, "ok": False, "error": str(exc)[:2000]}
            r.update({"rep": rep, "speed_probe_ms": speed})
            runs[k_i].append(r)
            results["runs"].append(r)
    for k in counts:
        ok = [r for r in runs[k] if r.get("ok")]
        waits: Counter[str] = Counter()
        active = 0
        for r in ok:
            waits.update(r["waits"])
            active += r["active_backend_samples"]
        results["by_workers"][str(k)] = {
            "ok_reps": len(ok), "reps": len(runs[k]), **{key: C.median([r[key] for r in ok]) for key in KEYS},
            "waits_pct": {w: 100 * c / active for w, c in waits.most_common(6)} if active else {},
        }
    C.drop_db(C.SYSTEMS["tether"].db)
    C.save_raw("workers-no-done-notify" if args.no_done_notify else "workers", results)
    return results


if __name__ == "__main__":
    main()
