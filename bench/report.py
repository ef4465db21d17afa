"""Build ``summary.md`` (ratios against the best peer, then every scenario's
table) and the PNG plots from a results directory's ``raw/*.json``.

    python bench/report.py bench/results/2026-11-22
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"tether": "#d62728", "pgqueuer": "#1f77b4", "procrastinate": "#2ca02c", "oban": "#9467bd",
          "chancy": "#ff7f0e", "tether-sqlite": "#8c564b"}


def load(out: Path) -> dict[str, Any]:
    raw = {}
    for p in sorted((out / "raw").glob("*.json")):
        raw[p.stem] = json.loads(p.read_text())
    return raw


def f(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if isinstance(x, (int, float)):
        if digits == 0:
            return f"{x:,.0f}"
        return f"{x:,.{digits}f}"
    return str(x)


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def best_peer(values: dict[str, float | None], higher: bool) -> tuple[str | None, float | None]:
    peers = {k: v for k, v in values.items() if k != "tether" and v is not None}
    if not peers:
        return None, None
    name = (max if higher else min)(peers, key=lambda k: peers[k])  # type: ignore[arg-type,return-value]
    return name, peers[name]


def advantage(tether: float | None, other: float | None, higher: bool) -> float | None:
    if tether is None or other is None or tether == 0 or other == 0:
        return None
    return tether / other if higher else other / tether


def check(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "**missed**")


# -- the ratio table -----------------------------------------------------------------------
def ratio_rows(raw: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []

    def add(scenario: str, figure: str, values: dict[str, float | None], higher: bool, unit: str,
            target: str = "", met: bool | None = None, digits: int = 0) -> None:
        t = values.get("tether")
        name, best = best_peer(values, higher)
        adv = advantage(t, best, higher)
        vs_pgq = advantage(t, values.get("pgqueuer"), higher)
        rows.append([scenario, figure, f"{f(t, digits)} {unit}", f"{f(best, digits)} ({name or '-'})",
                     f(adv, 2) + "x" if adv else "-", f(vs_pgq, 2) + "x" if vs_pgq else "-",
                     target, check(met) if target else ""])

    tp = raw.get("throughput")
    if tp:
        for cfg in tp["configs"]:
            rates = {s: d["configs"].get(cfg, {}).get("rate") for s, d in tp["systems"].items()}
            t, pgq = rates.get("tether"), rates.get("pgqueuer")
            add("1 throughput", f"no-op jobs/s, {cfg}", rates, True, "/s", "≥ 2x pgqueuer",
                None if t is None or pgq is None else t >= 2 * pgq)
        for cfg in tp["configs"]:
            cpu = {s: d["configs"].get(cfg, {}).get("cpu_per_job_ms") for s, d in tp["systems"].items()}
            t, pgq = cpu.get("tether"), cpu.get("pgqueuer")
            add("1 throughput", f"CPU ms/job (worker+PG), {cfg}", cpu, False, "ms", "≤ ½ pgqueuer",
                None if t is None or pgq is None else t <= pgq / 2, digits=3)
        whole = "1w x c10"
        if whole in tp["configs"]:  # whole-process figures (issue 22): spawn to done, rusage + server CPU
            spawn = {s: d["configs"].get(whole, {}).get("rate_from_spawn") for s, d in tp["systems"].items()}
            t, pgq = spawn.get("tether"), spawn.get("pgqueuer")
            add("1 throughput", f"whole process: jobs/s from spawn, {whole}", spawn, True, "/s", "≥ 3x pgqueuer",
                None if t is None or pgq is None else t >= 3 * pgq)
            cpu = {s: d["configs"].get(whole, {}).get("cpu_total_per_job_ms") for s, d in tp["systems"].items()}
            t, pgq = cpu.get("tether"), cpu.get("pgqueuer")
            add("1 throughput", f"whole process: CPU ms/job (worker rusage + PG), {whole}", cpu, False, "ms",
                "≤ 0.33x pgqueuer", None if t is None or pgq is None else t <= 0.33 * pgq, digits=3)
    sy = raw.get("sync")
    if sy:
        for key, d in sy["configs"].items():
            r = (d.get("sync_over_async") or {}).get("rate")
            rows.append(["sync handlers", f"def / async def jobs/s, {key}", f(r, 2) + "x" if r else "-", "-", "-",
                         "-", "≥ 0.8x", check(None if r is None else r >= 0.8)])
    wk = raw.get("workers")
    if wk:
        most = max((d.get("conns_per_worker_max") or 0) for d in wk["by_workers"].values())
        med = max((d.get("conns_per_worker_median") or 0) for d in wk["by_workers"].values())
        rows.append(["many workers", "connections per worker process (median / most)", f"{f(med, 1)} / {most}",
                     "-", "-", "-", "≤ 3", check(most <= 3)])
    enq = raw.get("enqueue")
    if enq:
        for mode, label in (("bulk", "bulk"), ("sync", "single, sync"), ("async", "single, async")):
            rates = {s: d["modes"].get(mode, {}).get("rate") for s, d in enq["systems"].items()}
            t = rates.get("tether")
            if mode == "bulk":
                target, ref = "≥ pgqueuer", rates.get("pgqueuer")
                met = None if t is None or ref is None else t >= ref
            else:
                target, ref = "≥ 2x procrastinate", rates.get("procrastinate")
                met = None if t is None or ref is None else t >= 2 * ref
            add("2 enqueue", f"jobs/s, {label}", rates, True, "/s", target, met)
    lat = raw.get("latency")
    if lat:
        for pct, limit in (("p50", 5.0), ("p99", 20.0)):
            vals = {s: (d.get("from_call") or {}).get(pct) for s, d in lat["systems"].items() if s != "tether-sqlite"}
            t = vals.get("tether")
            add("3 latency", f"enqueue→handler {pct}, PostgreSQL", vals, False, "ms", f"< {limit:g} ms",
                None if t is None else t < limit, digits=2)
    rows += issue22_rows(raw)
    return rows


# -- scenario tables -----------------------------------------------------------------------
def interleaving(runs: list[dict[str, Any]]) -> str:
    """What the speed probe saw over a scenario's runs (older results have none)."""
    probes = [r["speed_probe_ms"] for r in runs if r.get("speed_probe_ms")]
    if not probes:
        return ""
    return (f"Systems ran in turn within each repetition. Machine speed probe before each run (a fixed Python "
            f"loop; lower is faster): {min(probes):.1f} to {max(probes):.1f} ms, median "
            f"{statistics.median(probes):.1f}.")


def throughput_md(tp: dict[str, Any]) -> str:
    rows = []
    for s, d in tp["systems"].items():
        for cfg in tp["configs"]:
            r = d["configs"].get(cfg, {})
            rows.append([s, cfg, f(r.get("rate")), f(r.get("rate_from_spawn")), f(r.get("worker_cpu_per_job_ms"), 3),
                         f(r.get("pg_cpu_per_job_ms"), 3), f(r.get("worker_cpu_total_per_job_ms"), 3),
                         f(r.get("pg_cpu_total_per_job_ms"), 3), f(r.get("commits_per_job"), 2),
                         f(r.get("wal_bytes_per_job")), f"{r.get('ok_reps', 0)}/{r.get('reps', 0)}"])
    notes = "\n".join(f"- **{s}**: {d.get('notes', '')}" for s, d in tp["systems"].items())
    return (f"N = {tp['n']:,} pre-enqueued no-op jobs; rate from the first handler to the last job done "
            "(`from spawn`: from the workers' spawn until the database shows every job finished, start-up "
            "included); CPU over the same window, and whole-process (`whole`: the workers' rusage from spawn to "
            "exit, the server's CPU from before the spawn until every connection closed); commits and WAL from "
            "worker start to exit. " + interleaving(tp["runs"]) + "\n\n"
            + table(["system", "workers x concurrency", "jobs/s", "jobs/s from spawn", "worker CPU ms/job",
                     "PG CPU ms/job", "whole: worker CPU ms/job", "whole: PG CPU ms/job", "commits/job",
                     "WAL B/job", "ok runs"], rows)
            + "\n\n" + notes)


def enqueue_md(enq: dict[str, Any]) -> str:
    rows = []
    for s, d in enq["systems"].items():
        for mode in ("bulk", "sync", "async"):
            r = d["modes"].get(mode, {})
            if r.get("unsupported"):
                rows.append([s, mode, "not offered", "", "", "", ""])
                continue
            rows.append([s, mode, f(r.get("rate")), f(r.get("client_cpu_per_job_ms"), 3),
                         f(r.get("pg_cpu_per_job_ms"), 3), f(r.get("commits_per_job"), 3), f(r.get("wal_bytes_per_job"))])
    return (f"bulk: {enq['n_bulk']:,} jobs in batches of {enq['batch']:,}; single: {enq['n_single']:,} calls. "
            + interleaving(enq["runs"]) + "\n\n"
            + table(["system", "mode", "jobs/s", "client CPU ms/job", "PG CPU ms/job", "commits/job", "WAL B/job"], rows))


def latency_md(lat: dict[str, Any]) -> str:
    rows = []
    for s, d in lat["systems"].items():
        fc, fm = d.get("from_call") or {}, d.get("from_commit") or {}
        rows.append([s, f(fc.get("p50"), 2), f(fc.get("p90"), 2), f(fc.get("p99"), 2), f(fc.get("max"), 2),
                     f(fm.get("p50"), 2), f"{d.get('samples', 0)}/{lat['samples']}"])
    return (f"{lat['samples']} jobs per system on an idle queue (mean gap {lat['gap_s']} s); milliseconds from the "
            "start of the enqueue call (and from its return) to the handler's first line.\n\n"
            + table(["system", "p50 ms", "p90 ms", "p99 ms", "max ms", "p50 from commit", "samples"], rows))


def heartbeat_md(hb: dict[str, Any]) -> str:
    rows = []
    for s, d in hb["systems"].items():
        for level, r in d["levels"].items():
            rows.append([s, f(int(level)), f(r.get("workers")), f(r.get("lost")), f(r.get("statements_per_worker_per_s"), 2),
                         f(r.get("statements_per_worker_per_tick"), 2), f(r.get("worker_cpu_pct_per_worker"), 2),
                         f(r.get("pg_cpu_pct"), 2), f(r.get("wal_bytes_per_s"))])
    t = hb["timers"]
    return (f"Window {hb['window_s']:g} s with every job running; tether timers: heartbeat {t['heartbeat_s']:g} s, "
            f"lease {t['lease_ttl_s']:g} s, reaper {t['reaper_s']:g} s. Statements = commits (autocommit), "
            "all of the worker's statements (heartbeat, reaper, idle claims), less the catch-up transactions "
            "other sessions' DDL forces on idle connections (measured on a sentinel connection). Jobs lost: no "
            "longer running at the end of the window (the worker fenced itself off a lease it could not renew "
            "in time).\n\n"
            + table(["system", "jobs in flight", "workers", "jobs lost", "statements/s per worker", "per worker per tick",
                     "worker CPU % (each)", "PG CPU %", "WAL B/s"], rows))


def history_md(h: dict[str, Any]) -> str:
    rows = []
    for size, r in h["by_size"].items():
        rows.append([f(int(size)), f(r.get("jobs_table_mb")), f(r.get("claim_ms_p50"), 2), f(r.get("claim_ms_p99"), 2),
                     f(r.get("claim_explain_ms"), 2), f(r.get("complete_ms_p50"), 2), f(r.get("reap_idle_ms_p50"), 2),
                     f(r.get("reap_idle_explain_ms"), 3), f(r.get("reap_100_ms_p50"), 2),
                     f(r.get("claim_uses_partial_index")), f(r.get("reap_uses_partial_index"))])
    return ("Finished rows generated with `INSERT ... SELECT generate_series`; claim of 10 from a fresh backlog, its "
            "batch complete, an idle reap, a reap of 100 lapsed leases (client-side ms; `EXPLAIN` = server "
            "execution time). Plans: `plans/`.\n\n"
            + table(["finished rows", "jobs MB", "claim p50", "claim p99", "claim EXPLAIN", "complete p50",
                     "idle reap p50", "idle reap EXPLAIN", "reap 100 p50", "claim idx", "reap idx"], rows))


def recovery_md(rec: dict[str, Any]) -> str:
    rows = []
    for mode, r in rec["modes"].items():
        if "restart_s" not in r:
            rows.append([mode, "failed: " + str(r.get("error", ""))[:80], "", "", "", "", ""])
            continue
        rows.append([mode, f(r.get("kills")), f(r["reaped_s"].get("p50"), 2), f(r["reaped_s"].get("p99"), 2),
                     f(r["restart_s"].get("p50"), 2), f(r["restart_s"].get("p99"), 2),
                     f"{r.get('bound_s', 0):g} s" + (f" (p99 ≤ bound + 1 s: {f(r.get('within_bound_plus_1s'))})"
                                                    if mode == "lease" else "")])
    return ("Seconds from SIGKILL to the job being claimable again (reaped: the attempt row's `finished_at`, "
            "database clock) and to its next attempt's handler starting.\n\n"
            + table(["mode", "kills", "reaped p50", "reaped p99", "restarted p50", "restarted p99",
                     "bound lease_ttl + reaper_interval"], rows))


def sqlite_md(sq: dict[str, Any]) -> str:
    rows = [[k, f(r.get("rate")), f(r.get("rate_from_spawn")), f(r.get("worker_cpu_per_job_ms"), 3),
             check(None if r.get("rate") is None else r["rate"] >= 2000) if k == "4" else ""]
            for k, r in sq["by_workers"].items()]
    return (f"N = {sq['n']:,} no-op jobs, concurrency {sq['concurrency']} per worker, one SQLite file.\n\n"
            + table(["worker processes", "jobs/s", "jobs/s from spawn", "worker CPU ms/job", "target ≥ 2,000/s"], rows))


def issue22_rows(raw: dict[str, Any]) -> list[list[str]]:
    """Ratio rows of issue 22 items 4-6: remote / local, NATS / NOTIFY, tether / huey (one run each)."""
    rows: list[list[str]] = []
    for key, d in (raw.get("remote") or {}).get("configs", {}).items():
        r = d.get("remote_over_local")
        rows.append(["remote workers", f"jobs/s, tether server / local worker, {key}",
                     f"{f(d['remote'].get('rate'))} / {f(d['local'].get('rate'))} /s", "-",
                     f(r, 2) + "x" if r else "-", "-", "≥ 0.8x", check(None if r is None else r >= 0.8)])
    for nats, key, label in (("tether-nats", "nats_over_notify", "NATS"),
                             ("tether-nats-nosweep", "nats_nosweep_over_notify", "NATS, no sweep of the backlog")):
        ratio = (raw.get("transports") or {}).get(key) or {}
        if ratio:
            tp = raw["transports"]["throughput"]
            cpu = [tp[k]["summary"].get("worker_cpu_per_job_ms") for k in (nats, "tether-notify")]
            r = ratio.get("worker_cpu_per_job_ms")
            rows.append(["transports", f"worker CPU ms/job, {label} / NOTIFY, 1w x c10",
                         f"{f(cpu[0], 3)} / {f(cpu[1], 3)} ms", "-", f(r, 2) + "x" if r else "-", "-", "≤ 1.2x",
                         check(None if r is None else r <= 1.2)])
    floor = (raw.get("transports") or {}).get("nats_floor_ratio")
    if floor:
        rows.append(["transports", "lowest NATS / NOTIFY a message per job allows (nats-py's own receive, parse "
                     "and ack)", f"{f(raw['transports']['nats_floor_us'], 1)} us/msg", "-", f(floor, 2) + "x", "-",
                     "-", "-"])
    for k, d in (raw.get("huey") or {}).get("by_processes", {}).items():
        r = d.get("tether_over_huey")
        rows.append(["embedded anchor", f"SQLite jobs/s, `def` no-op, {k} process(es)", f"{f(d.get('tether'))} /s",
                     f"{f(d.get('huey'))} (huey: {d.get('huey_config') or '-'})", f(r, 2) + "x" if r else "-", "-",
                     "≥ 2x huey", check(None if r is None else r >= 2)])
    return rows


def remote_md(rm: dict[str, Any]) -> str:
    rows = []
    for key, d in rm["configs"].items():
        for mode in ("local", "remote"):
            r = d[mode]
            rows.append([key, mode, f(r.get("rate")), f(r.get("rate_from_spawn")), f(r.get("worker_cpu_per_job_ms"), 3),
                         f(r.get("server_cpu_per_job_ms"), 3) if mode == "remote" else "-",
                         f(r.get("pg_cpu_per_job_ms"), 3), f"{r.get('ok_reps', 0)}/{r.get('reps', 0)}",
                         f(d.get("remote_over_local"), 2) + "x" if mode == "remote" and d.get("remote_over_local")
                         else ""])
    return (f"N = {rm['n']:,} pre-enqueued no-op jobs, one worker process; `local` talks to the database, `remote` "
            "to a `tether server` process on loopback over the same database. CPU over the first-handler-to-done "
            "window. Local and remote take turns in each repetition.\n\n"
            + table(["backend, concurrency", "worker", "jobs/s", "jobs/s from spawn", "worker CPU ms/job",
                     "server CPU ms/job", "PG CPU ms/job", "ok runs", "remote / local"], rows))


def transports_md(tr: dict[str, Any]) -> str:
    lat = [[k, f((d.get("from_call") or {}).get("p50"), 2), f((d.get("from_call") or {}).get("p99"), 2),
            f"{d.get('samples', 0)}/{d.get('requested', tr['samples'])}"] for k, d in tr["latency"].items()]
    tp = [[k, f(d["summary"].get("rate")), f(d["summary"].get("worker_cpu_per_job_ms"), 3),
           f(d["summary"].get("pg_cpu_per_job_ms"), 3), f"{d['summary'].get('ok_reps', 0)}/{d['summary'].get('reps', 0)}"]
          for k, d in tr["throughput"].items()]
    ratio = tr.get("nats_over_notify") or {}
    nosweep = tr.get("nats_nosweep_over_notify") or {}
    fewer = any(d.get("requested", tr["samples"]) < tr["samples"] for d in tr["latency"].values())
    text = (f"The same tether app under each transport. Idle-queue latency, {tr['samples']} samples"
            + (" (polling: fewer, as the last column says)" if fewer else "") + ":\n\n"
            + table(["transport", "p50 ms", "p99 ms", "samples"], lat)
            + f"\n\nThroughput of {tr['n']:,} pre-enqueued no-op jobs, PostgreSQL, 1 worker x 10 (transports taking "
            "turns in each repetition):\n\n"
            + table(["transport", "jobs/s", "worker CPU ms/job", "PG CPU ms/job", "ok runs"], tp))
    if ratio:
        text += (f"\n\nNATS / NOTIFY: worker CPU per job {f(ratio.get('worker_cpu_per_job_ms'), 2)}x, worker+PG CPU "
                 f"{f(ratio.get('cpu_per_job_ms'), 2)}x, jobs/s {f(ratio.get('rate'), 2)}x.")
    if tr.get("nats_floor_us"):
        text += (f" nats-py alone (`apps/nats_floor.py`: receive, parse and ack, in pulls of 20, no tether) spends "
                 f"{f(tr['nats_floor_us'], 1)} us of CPU per message, so a message per job can bring NATS / NOTIFY "
                 f"no lower than {f(tr.get('nats_floor_ratio'), 2)}x.")
    if nosweep:
        text += (f" With a sweep grace longer than the run (`tether-nats-nosweep`: the sweep leaves the aged backlog "
                 f"alone): worker CPU per job {f(nosweep.get('worker_cpu_per_job_ms'), 2)}x, worker+PG CPU "
                 f"{f(nosweep.get('cpu_per_job_ms'), 2)}x, jobs/s {f(nosweep.get('rate'), 2)}x.")
    return text


def huey_md(hu: dict[str, Any]) -> str:
    rows = [[name, f(d.get("rate")), f(d.get("rate_from_spawn")), f(d.get("worker_cpu_per_job_ms"), 3),
             f"{d.get('ok_reps', 0)}/{d.get('reps', 0)}"] for name, d in hu["configs"].items()]
    return (f"N = {hu['n']:,} no-op `def` jobs on one SQLite file; tether with leases, heartbeats, fencing and the "
            "attempts audit, huey (`SqliteHuey`) with its defaults. The configurations take turns in each "
            "repetition.\n\n"
            + table(["configuration", "jobs/s", "jobs/s from spawn", "worker CPU ms/job", "ok runs"], rows))


def ceiling_md(ce: dict[str, Any], tp: dict[str, Any] | None) -> str:
    def script(k: str) -> str:
        return f"complete {k.removeprefix('carry-')} and claim as many" if k.startswith("carry-") else \
            f"claim {k} then complete"

    rows = [[script(k), f(r.get("rate")), f(r.get("tps")), f(r.get("pg_cpu_per_job_ms"), 3),
             f(r.get("commits_per_job"), 3), f(r.get("wal_bytes_per_job"))] for k, r in ce["by_batch"].items()]
    text = (f"pgbench, {ce['clients']} clients, prepared statements, tether's own SQL: claim then complete "
            "(two statements: what a worker claiming more than 128 jobs at a time sends, the two at once), and "
            "complete_and_claim (one: what a worker claiming at most 128 sends); the variants by the worker's "
            "tasks, with its round connections' settings (generic plans, no JIT).\n\n"
            + table(["script", "jobs/s", "tps", "PG CPU ms/job", "commits/job", "WAL B/job"], rows))
    if tp and "tether" in tp["systems"]:
        frac = []
        for cfg, r in tp["systems"]["tether"]["configs"].items():
            c = int(cfg.split("c")[-1])
            k = "10" if c <= 10 else "100"
            ceil = (ce["by_batch"].get(f"carry-{k}") or ce["by_batch"].get(k, {})).get("rate")
            if r.get("rate") and ceil:
                frac.append(f"{cfg}: {100 * r['rate'] / ceil:.0f}% of the batch-{k} ceiling")
        if frac:
            text += "\n\ntether's worker as a fraction of the ceiling: " + "; ".join(frac) + "."
    return text


def sync_md(sy: dict[str, Any]) -> str:
    rows = []
    pins = [("", "", "sync_over_async")] + ([("-1cpu", ", worker on 1 CPU", "pinned_sync_over_async")]
                                           if sy.get("pinned_cpu") else [])
    for key, d in sy["configs"].items():
        for pin, label, over in pins:
            a, s, r = d.get("async" + pin, {}), d.get("sync" + pin, {}), d.get(over, {})
            rows.append(_sync_row(key + label, a, s, r))
    pinned = (f" *Worker on 1 CPU*: the worker process (every thread of it) on CPU {sy['pinned_cpu']} "
              "(`taskset`), PostgreSQL anywhere." if sy.get("pinned_cpu") else "")
    return (f"N = {sy['n']:,} no-op jobs, one worker process; `async def` (task `noop`) and `def` (`noop_sync`, on "
            "the handler threads) run back to back in each repetition; ratios are the median of the "
            "per-repetition ratios." + pinned + " " + interleaving(sy["runs"]) + "\n\n"
            + table(["backend, concurrency", "async jobs/s", "def jobs/s", "def / async", "async from spawn",
                     "def from spawn", "async worker CPU ms/job", "def worker CPU ms/job", "CPU def / async",
                     "ok runs"], rows))


def _sync_row(key: str, a: dict[str, Any], s: dict[str, Any], r: dict[str, Any]) -> list[str]:
    return [key, f(a.get("rate")), f(s.get("rate")), f(r.get("rate"), 2) + "x" if r.get("rate") else "-",
            f(a.get("rate_from_spawn")), f(s.get("rate_from_spawn")),
            f(a.get("worker_cpu_per_job_ms"), 4), f(s.get("worker_cpu_per_job_ms"), 4),
            f(r.get("worker_cpu_per_job_ms"), 2) + "x" if r.get("worker_cpu_per_job_ms") else "-",
            f"{a.get('ok_reps', 0)}+{s.get('ok_reps', 0)}/{a.get('reps', 0)}+{s.get('reps', 0)}"]


def workers_md(wk: dict[str, Any]) -> str:
    rows = []
    for k, d in sorted(wk["by_workers"].items(), key=lambda kv: int(kv[0])):
        waits = ", ".join(f"{w} {p:.0f}%" for w, p in list((d.get("waits_pct") or {}).items())[:4])
        rows.append([k, f(d.get("rate")), f(d.get("rate_from_spawn")), f(d.get("worker_cpu_per_job_ms"), 3),
                     f(d.get("pg_cpu_per_job_ms"), 3), f(d.get("cores_busy_pct")),
                     f"{f(d.get('conns_per_worker_idle_max'))} / {f(d.get('conns_per_worker_median'), 1)} / "
                     f"{f(d.get('conns_per_worker_max'))}",
                     f(d.get("heartbeats_per_s"), 1), f(d.get("heartbeats_per_worker_per_s"), 2),
                     f(d.get("heartbeats_per_1000_jobs"), 1), f(d.get("commits_per_job"), 2), waits or "-"])
    return (f"N = {wk['n']:,} no-op jobs held back until every worker is up, concurrency {wk['concurrency']} per "
            f"process, heartbeat every {wk.get('heartbeat_s', 1):g} s; jobs/s from the release (`from spawn`: "
            "from the first worker's spawn); cores busy = (worker + PostgreSQL CPU) / window / "
            f"{wk.get('cores', '?')} cores; connections per worker process from `pg_stat_activity` by "
            "`application_name` (at idle before the release, then median and most while the jobs ran); "
            "heartbeat statements from `n_tup_upd` of `tether.workers`; what the database's active backends "
            "waited on, as a share of samples. " + interleaving(wk["runs"]) + "\n\n"
            + table(["workers", "jobs/s", "from spawn", "worker CPU ms/job", "PG CPU ms/job", "cores busy %",
                     "conns/worker idle / median / most", "heartbeats/s", "per worker/s", "per 1,000 jobs",
                     "commits/job", "active backends wait on"], rows))


# -- plots ---------------------------------------------------------------------------------
def _bars(ax: Any, groups: list[str], series: dict[str, list[float | None]], ylabel: str) -> None:
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, ys) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [y or 0 for y in ys], width, label=name, color=COLORS.get(name))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def plots(raw: dict[str, Any], out: Path) -> list[str]:
    made = []
    tp = raw.get("throughput")
    if tp:
        fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.5))
        cfgs = tp["configs"]
        _bars(a, cfgs, {s: [d["configs"].get(c, {}).get("rate") for c in cfgs] for s, d in tp["systems"].items()},
              "jobs/s")
        a.set_title(f"Throughput, {tp['n']:,} no-op jobs")
        a.legend()
        _bars(b, cfgs, {s: [d["configs"].get(c, {}).get("cpu_per_job_ms") for c in cfgs]
                        for s, d in tp["systems"].items()}, "CPU ms per job (worker + PostgreSQL)")
        b.set_title("Cost per job")
        fig.tight_layout()
        fig.savefig(out / "throughput.png", dpi=90)
        plt.close(fig)
        made.append("throughput.png")
    hb = raw.get("heartbeat")
    if hb:
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
        for s, d in hb["systems"].items():
            lv = sorted(d["levels"], key=int)
            xs = [int(x) for x in lv]
            a.plot(xs, [d["levels"][x].get("statements_per_worker_per_s") for x in lv], "o-", label=s,
                   color=COLORS.get(s))
            b.plot(xs, [d["levels"][x].get("worker_cpu_pct_per_worker") for x in lv], "o-", label=f"{s} worker",
                   color=COLORS.get(s))
            b.plot(xs, [d["levels"][x].get("pg_cpu_pct") for x in lv], "s--", label=f"{s} PostgreSQL",
                   color=COLORS.get(s), alpha=0.6)
        for ax in (a, b):
            ax.set_xscale("log")
            ax.set_xlabel("jobs in flight")
            ax.grid(alpha=0.3)
            ax.legend()
        a.set_ylabel("statements/s per worker")
        a.set_ylim(bottom=0)
        a.set_title("Heartbeat cost: statements")
        b.set_ylabel("CPU %")
        b.set_title("Heartbeat cost: CPU")
        fig.tight_layout()
        fig.savefig(out / "heartbeat.png", dpi=90)
        plt.close(fig)
        made.append("heartbeat.png")
    h = raw.get("history")
    if h:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        sizes = sorted(h["by_size"], key=int)
        xs = [int(s) for s in sizes]
        for key, label in (("claim_ms_p50", "claim 10 (p50)"), ("complete_ms_p50", "complete 10 (p50)"),
                           ("reap_idle_ms_p50", "idle reap (p50)"), ("reap_100_ms_p50", "reap 100 lapsed (p50)")):
            ax.plot(xs, [h["by_size"][s].get(key) for s in sizes], "o-", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("finished rows in the jobs table")
        ax.set_ylabel("ms per call")
        ax.set_ylim(bottom=0)
        ax.set_title("Claim and reap cost vs history")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "history.png", dpi=90)
        plt.close(fig)
        made.append("history.png")
    lat = raw.get("latency")
    if lat:
        fig, ax = plt.subplots(figsize=(8, 4))
        names = list(lat["systems"])
        _bars(ax, names, {p: [(lat["systems"][s].get("from_call") or {}).get(p) for s in names]
                          for p in ("p50", "p99")}, "ms (log)")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title("Idle-queue latency, enqueue → handler start")
        fig.tight_layout()
        fig.savefig(out / "latency.png", dpi=90)
        plt.close(fig)
        made.append("latency.png")
    enq = raw.get("enqueue")
    if enq:
        fig, ax = plt.subplots(figsize=(8, 4))
        modes = ["bulk", "sync", "async"]
        _bars(ax, modes, {s: [d["modes"].get(m, {}).get("rate") for m in modes] for s, d in enq["systems"].items()},
              "jobs/s (log)")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title("Enqueue throughput")
        fig.tight_layout()
        fig.savefig(out / "enqueue.png", dpi=90)
        plt.close(fig)
        made.append("enqueue.png")
    sy = raw.get("sync")
    if sy:
        fig, ax = plt.subplots(figsize=(8, 4))
        keys = list(sy["configs"])
        _bars(ax, keys, {kind: [sy["configs"][k].get(kind, {}).get("rate") for k in keys]
                         for kind in ("async", "sync")}, "jobs/s")
        for i, k in enumerate(keys):
            r = sy["configs"][k].get("sync_over_async", {}).get("rate")
            if r:
                ax.annotate(f"{r:.2f}x", (i, 0), textcoords="offset points", xytext=(0, 4), ha="center")
        ax.legend(["async def", "def"])
        ax.set_title("def vs async def no-op handlers, one worker (ratio def/async at the foot)")
        fig.tight_layout()
        fig.savefig(out / "sync.png", dpi=90)
        plt.close(fig)
        made.append("sync.png")
    wk = raw.get("workers")
    if wk:
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
        for name, label in (("workers", "tether"), ("workers-no-done-notify", "finished-job NOTIFY off")):
            d = raw.get(name)
            if not d:
                continue
            ks = sorted(d["by_workers"], key=int)
            a.plot([int(k) for k in ks], [d["by_workers"][k].get("rate") for k in ks], "o-", label=label)
        a.set_xscale("log", base=2)
        counts = sorted(int(k) for k in wk["by_workers"])
        a.set_xticks(counts, [str(c) for c in counts])
        a.set_xlabel(f"worker processes (x concurrency {wk['concurrency']})")
        a.set_ylabel("jobs/s")
        a.set_ylim(bottom=0)
        a.set_title("Throughput vs worker processes")
        a.grid(alpha=0.3)
        a.legend()
        ks = sorted(wk["by_workers"], key=int)
        xs = [int(k) for k in ks]
        b.plot(xs, [wk["by_workers"][k].get("conns_per_worker_max") for k in ks], "o-", label="connections per worker (most)")
        b.plot(xs, [wk["by_workers"][k].get("heartbeats_per_s") for k in ks], "s--", label="heartbeat statements/s")
        b.set_xscale("log", base=2)
        b.set_xticks(counts, [str(c) for c in counts])
        b.set_xlabel("worker processes")
        b.set_ylim(bottom=0)
        b.set_title("Connections and heartbeats vs worker processes")
        b.grid(alpha=0.3)
        b.legend()
        fig.tight_layout()
        fig.savefig(out / "workers.png", dpi=90)
        plt.close(fig)
        made.append("workers.png")
    return made


def build(out: Path) -> Path:
    out = Path(out)
    raw = load(out)
    if not raw:
        C.log(f"no raw results in {out / 'raw'}")
        return out
    made = plots(raw, out)
    machine = next(iter(raw.values())).get("machine", {})
    parts = [
        f"# Benchmark results, {machine.get('date', '')[:10]}",
        "",
        f"Machine: {machine.get('cores')} cores ({machine.get('cpu', '?')}), {machine.get('mem_gib')} GiB; "
        f"PostgreSQL {machine.get('postgres', '?')} on loopback; load average at start "
        f"{' '.join(machine.get('loadavg_at_start', []))}. Raw data: `raw/*.json`. How each figure is measured: "
        "`bench/README.md`.",
        "",
        "## tether against the best peer",
        "",
        "Advantage: how many times better tether is (> 1: tether wins; for costs and latencies, lower is better, "
        "so the ratio is inverted).",
        "",
        table(["scenario", "figure", "tether", "best peer", "advantage", "vs pgqueuer", "target", "met?"],
              ratio_rows(raw)),
    ]
    sections = [("throughput", "1. Processing throughput", throughput_md),
                ("enqueue", "2. Enqueue throughput", enqueue_md),
                ("latency", "3. Idle-queue latency", latency_md),
                ("heartbeat", "4. Heartbeat cost", heartbeat_md),
                ("history", "5. Claim and reap cost vs history", history_md),
                ("recovery", "6. Recovery after SIGKILL", recovery_md),
                ("sqlite", "7. SQLite embedded", sqlite_md),
                ("sync", "def handlers beside async def", sync_md),
                ("workers", "Many worker processes (PostgreSQL)", workers_md),
                ("workers-no-done-notify", "Many worker processes, finished-job NOTIFY off (experiment)",
                 workers_md)]
    for key, title, fn in sections:
        if key in raw:
            parts += ["", f"## {title}", "", fn(raw[key])]
    if "ceiling" in raw:
        parts += ["", "## 8. Raw-SQL ceiling (pgbench)", "", ceiling_md(raw["ceiling"], raw.get("throughput"))]
    for key, title, fn in (("remote", "Remote workers through `tether server`", remote_md),
                           ("transports", "Transports: NATS JetStream, NOTIFY, polling", transports_md),
                           ("huey", "Embedded anchor: tether and huey on SQLite", huey_md)):
        if key in raw:
            parts += ["", f"## {title}", "", fn(raw[key])]
    if made:
        parts += ["", "## Plots", ""] + [f"![{m}]({m})" for m in made]
    path = out / "summary.md"
    path.write_text("\n".join(parts) + "\n")
    C.log(f"wrote {path}")
    return path


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else C.out_dir())
