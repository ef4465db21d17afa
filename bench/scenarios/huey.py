"""Scenario 12: the embedded anchor: tether on SQLite beside huey's ``SqliteHuey``.

Both embedded, both on one SQLite file, both running a plain ``def`` no-op
(tether's ``noop_sync``, on its worker's thread pool; huey's ``noop``). N jobs
are enqueued first, then the workers start; jobs/s from the first handler to
the moment the file holds no job left to run (a read-only SQLite probe every
20 ms), worker CPU per job over the same window. tether keeps its leases,
heartbeats, fencing and attempts audit (always on); huey keeps its defaults
(WAL, its consumer's polling back-off), with ``-q`` (tether's workers log at
warning too).

Configurations, the systems taking turns within each repetition:

- 1 process: tether ``-c 10``; huey ``-k thread -w 1`` and ``-k thread -w 10``
  (one consumer process; the better of the two is huey's figure);
- 4 processes: tether 4 workers x ``-c 10``; huey ``-k process -w 4``.

huey removes a job from its table when a worker takes it, so "none left"
includes the last jobs' handlers only to within one no-op; each huey worker
writes how many jobs it ran when the consumer stops it (SIGINT, graceful),
and a run counts only when those add up to N.

    python bench/scenarios/huey.py --quick
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

POLL = 0.02
#: (name, system, processes, how huey's consumer runs or tether's concurrency)
CONFIGS: list[tuple[str, str, int, str]] = [
    ("tether 1 process x c10", "tether", 1, "10"),
    ("huey 1 process, thread x 1", "huey", 1, "thread:1"),
    ("huey 1 process, thread x 10", "huey", 1, "thread:10"),
    ("tether 4 processes x c10", "tether", 4, "10"),
    ("huey 4 processes (-k process -w 4)", "huey", 4, "process:4"),
]


def huey_system(path: Path, kind: str, workers: int) -> C.System:
    def argv(s: C.System, _c: int) -> list[str]:
        return [str(s.bin / "huey_consumer"), "huey_app.huey", "-k", kind, "-w", str(workers), "-q"]

    return C.System("huey", "huey", db="", worker_argv=argv, pending_sql="SELECT EXISTS (SELECT 1 FROM task)",
                    done_sql="", url=f"sqlite:///{path.resolve()}",
                    notes="SqliteHuey (WAL), `huey_consumer -k thread|process -w N -q`, `def` no-op")


def run_one(config: tuple[str, str, int, str], n: int, tag: str) -> dict[str, Any]:
    name, kind, processes, how = config
    path = C.scratch() / f"embedded-{kind}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    if kind == "tether":
        system, count, conc = C.tether_sqlite(path), processes, int(how)
        task = ["--task", "noop_sync"]
    else:
        wkind, wn = how.split(":")
        system, count, conc = huey_system(path, wkind, int(wn)), 1, 0
        task = []
    logs = C.scratch() / "logs"
    C.run_client(system, ["setup"], log_to=logs / f"{tag}-setup.log")
    enq = C.run_client(system, ["enqueue", "--mode", "bulk", "--n", str(n), "--batch", "1000", *task],
                       log_to=logs / f"{tag}-prefill.log")
    marks = C.fresh_dir(f"marks-{tag}")
    t_spawn = time.time()
    w = C.spawn_workers(system, count, conc, extra_env={"BENCH_MARK_DIR": str(marks)}, tag=f"-{tag}")
    stopped = False
    try:
        if C.wait_first_mark(marks, w, timeout=120) is None:
            raise RuntimeError(f"{name}: no job started (alive: {w.alive()}); see {logs}")
        w1 = w.cpu()
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        deadline = time.monotonic() + max(120.0, n / 20)
        try:
            while True:
                t_q = time.time()
                (pending,) = db.execute(system.pending_sql).fetchone()
                if not pending:
                    t_done = t_q
                    break
                if time.monotonic() > deadline or not w.alive():
                    raise RuntimeError(f"{name}: jobs still pending at the deadline (alive: {w.alive()})")
                time.sleep(POLL)
            if kind == "tether":
                (done,) = db.execute(system.done_sql).fetchone()
        finally:
            db.close()
        w2 = w.cpu()
        # huey: a graceful stop, so each worker writes its count
        total_cpu = w.stop(signal.SIGINT if kind == "huey" else signal.SIGTERM)
        stopped = True
    finally:
        if not stopped:
            w.stop()
    if kind == "huey":
        done = sum(int(p.read_text() or 0) for p in marks.glob("done-*"))
    t_first = min(C.first_marks(marks))
    return {"config": name, "system": kind, "processes": processes, "n": n, "done": int(done),
            "ok": int(done) == n, "prefill_rate": n / enq["seconds"], "seconds": t_done - t_first,
            "rate": n / (t_done - t_first), "rate_from_spawn": n / (t_done - t_spawn),
            "worker_cpu_per_job_ms": 1000 * (w2 - w1) / n, "worker_cpu_total_s": total_cpu}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, default_n=20000)
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    n = args.n or (3000 if args.quick else 20000)
    have = {s for s in ("tether", "huey") if (C.VENVS / s / "bin" / "python").exists()}
    if "tether" not in have:
        sys.exit("tether's bench venv is missing")
    if "huey" not in have:
        C.log("skipping huey: no venv (bench/run --setup builds it); tether runs alone")
    configs = [c for c in CONFIGS if c[1] in have]
    results: dict[str, Any] = {"n": n, "configs": {}, "runs": [], "by_processes": {}}
    runs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(args.reps or (2 if args.quick else 3)):  # the ratio is the figure: two even when quick
        for config in C.rotated(configs, rep):  # type: ignore[arg-type]
            name = config[0]
            C.log(f"huey scenario: {name}, n={n}, rep {rep + 1}")
            speed = C.speed_probe()
            try:
                r = run_one(config, n, f"emb-{config[1]}-{config[2]}-{config[3].replace(':', '')}-r{rep}")
                C.log(f"  {r['rate']:.0f} jobs/s, worker {r['worker_cpu_per_job_ms']:.3f} ms/job, "
                      f"done {r['done']}/{n}, speed probe {speed:.1f} ms")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"config": name, "system": config[1], "processes": config[2], "ok": False,
                     "error": str(exc)[:2000]}
            r["rep"], r["speed_probe_ms"] = rep, speed
            runs.setdefault(name, []).append(r)
            results["runs"].append(r)
    for name, system, processes, _ in configs:
        ok = [r for r in runs[name] if r.get("ok")]
        results["configs"][name] = {
            "system": system, "processes": processes, "reps": len(runs[name]), "ok_reps": len(ok),
            **{k: C.median([r[k] for r in ok]) for k in ("rate", "rate_from_spawn", "worker_cpu_per_job_ms")}}
    for processes in (1, 4):
        best: dict[str, tuple[str, float]] = {}
        for name, d in results["configs"].items():
            if d["processes"] == processes and d["rate"] and d["rate"] > best.get(d["system"], ("", 0.0))[1]:
                best[d["system"]] = (name, d["rate"])
        t, h = best.get("tether"), best.get("huey")
        results["by_processes"][str(processes)] = {
            "tether": t and t[1], "huey": h and h[1], "huey_config": h and h[0],
            "tether_over_huey": t[1] / h[1] if t and h else None}
    C.save_raw("huey", results)
    return results


if __name__ == "__main__":
    main()
