"""Scenario: start-up. How long a worker takes from spawn to its first finished job.

Paid by every ``--burst`` run, every autoscaled or scale-to-zero worker, every
deploy and every test that starts a worker (issue 47). tether on PostgreSQL:
one no-op job is queued, then ``tether worker --app tether_app:app -c 10`` is
spawned and the driver reads the job's state every 2 ms (its primary key)
until it is ``succeeded``: **worker_first_job_s** is spawn to that read;
**worker_first_handler_s** spawn to the handler's first line (its marker
file). Then the worker gets SIGTERM; **worker_cpu_s** is its whole life's CPU
(rusage: start-up, the job, shutdown). Also **help_s** (``tether --help``) and
**jobs_s** (``tether jobs`` against the same database), spawn to exit, with
their CPU. Each figure is the median of ``--samples`` starts; the three kinds
take turns within each sample.

    python bench/scenarios/startup.py --samples 10
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common as C

POLL = 0.002


def _wait(p: subprocess.Popen[bytes], timeout: float = 60.0) -> float:
    """Reap ``p`` (SIGKILL after ``timeout``) and return its CPU (user + system, rusage)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, _, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = 0
            return float(ru.ru_utime + ru.ru_stime)
        if time.monotonic() > deadline:
            p.kill()
        time.sleep(0.005)


def _tether(system: C.System) -> str:
    return str(system.bin / "tether")


def worker_once(system: C.System, job_id: int, tag: str) -> dict[str, Any]:
    marks = C.fresh_dir(f"marks-{tag}")
    log = open(C.scratch() / "logs" / f"{tag}.log", "wb")  # noqa: SIM115 (closed below)
    argv = [_tether(system), "worker", "--app", "tether_app:app", "-c", "10", "--log-level", "warning"]
    with C.connect(system.db) as c:
        c.execute("SELECT state FROM tether.jobs WHERE id = %s", (job_id,)).fetchone()  # warm the probe
        t0 = time.time()
        p = subprocess.Popen(argv, env=system.environ({"BENCH_MARK_DIR": str(marks)}), stdout=log,
                             stderr=subprocess.STDOUT, cwd=str(C.scratch()), start_new_session=True)
        done = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            (state,) = c.execute("SELECT state FROM tether.jobs WHERE id = %s", (job_id,)).fetchone()  # type: ignore[misc]
            if state == "succeeded":
                done = time.time()
                break
            time.sleep(POLL)
    os.killpg(p.pid, signal.SIGTERM)
    cpu = _wait(p)
    log.close()
    first = C.first_marks(marks)
    if done is None:
        raise RuntimeError(f"the worker did not finish its job; see {C.scratch() / 'logs' / (tag + '.log')}")
    return {"worker_first_job_s": done - t0, "worker_first_handler_s": (min(first) - t0) if first else None,
            "worker_cpu_s": cpu}


def command_once(system: C.System, args: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen([_tether(system), *args], env=system.environ(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, cwd=str(C.scratch()))
    cpu = _wait(p)
    return time.perf_counter() - t0, cpu


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p)
    p.add_argument("--samples", type=int, default=None, help="starts of each kind (default 10; --quick 3)")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    samples = args.samples or (3 if args.quick else 10)
    system = C.SYSTEMS["tether"]
    C.recreate_db(system.db)
    C.run_client(system, ["setup"], log_to=C.scratch() / "logs" / "startup-setup.log")
    (C.scratch() / "logs").mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for k in range(C.reps(args) * samples):
        r: dict[str, Any] = {"sample": k, "speed_probe_ms": C.speed_probe() if k == 0 else None}
        C.run_client(system, ["enqueue", "--mode", "sync", "--n", "1", "--start", str(k)])
        with C.connect(system.db) as c:
            (job_id,) = c.execute("SELECT max(id) FROM tether.jobs").fetchone()  # type: ignore[misc]
        kinds = ["worker", "help", "jobs"]
        for kind in C.rotated(kinds, k):
            if kind == "worker":
                r.update(worker_once(system, job_id, f"startup-{k}"))
            elif kind == "help":
                r["help_s"], r["help_cpu_s"] = command_once(system, ["--help"])
            else:
                r["jobs_s"], r["jobs_cpu_s"] = command_once(system, ["jobs", "-n", "20"])
        C.log(f"startup {k + 1}: first job {r['worker_first_job_s']:.3f} s (handler "
              f"{r['worker_first_handler_s'] or float('nan'):.3f} s, worker CPU {r['worker_cpu_s']:.3f} s); "
              f"--help {r['help_s']:.3f} s; jobs {r['jobs_s']:.3f} s")
        runs.append(r)
    keys = ["worker_first_job_s", "worker_first_handler_s", "worker_cpu_s", "help_s", "help_cpu_s", "jobs_s",
            "jobs_cpu_s"]
    figures = {k: C.median([r[k] for r in runs if r.get(k) is not None]) for k in keys}
    C.log("startup medians: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items() if v is not None))
    results = {"samples": samples, "figures": figures, "runs": runs}
    C.drop_db(system.db)
    C.save_raw("startup", results)
    return results


if __name__ == "__main__":
    main()
