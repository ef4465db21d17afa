"""The chaos driver: real worker processes, a producer, faults on a schedule
drawn from one seed, a drain, and the checker's verdict.

What it does to the database it is pointed at: on PostgreSQL it works in a
schema of its own (``tether_chaos_<seed>``) and drops it at the end; on SQLite
it uses a scratch file beside the one named (or in a temp dir) and deletes it.
Its jobs live on the ``tether_chaos`` queue and on ``tether_chaos_limited``
(concurrency 2, some jobs with an exclusive key: I8); workflows and batches
(flows.py: I9) on the first.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..config import parse_database_url, validate_identifier
from ..model import JobState, NewJob
from ..store import Store, open_store
from ..store.postgres.connect import RECONNECT_TIMEOUT
from ..store.postgres.outage import WAIT_SLICE
from ..transport import Transport, open_transport
from .checker import CheckReport, answered_since, check
from .collect import dynamic_spec, read_created, read_events, read_jobs, schedule_invariant
from .config import FAILPOINT_ODDS, FAULTS, LIBFAKETIME, QUEUE, ChaosConfig, config_dict, with_schema
from .effects import TX_TASKS, Effects
from .failover_check import judge_failovers, loss_windows
from .flows import FlowLoad
from .limits_check import LIMITED_QUEUE, configure_limits, limits_invariant, place
from .pgpair import Failover, ScratchPair
from .pgserver import ScratchPostgres
from .proxy import TCPProxy
from .slot import Slot as _Slot
from .sqlite_lock import holds_write_lock
from .workerproc import ASYNC_TASK, SYNC_TASK

__all__ = ["FAULTS", "LIBFAKETIME", "ChaosConfig", "ChaosResult", "run"]

#: seconds per phase of the job mix: short jobs in bursts, then long ones
SHORT_PHASE = 5.0


@dataclass
class ChaosResult:
    report: CheckReport
    faults: Counter[str]
    integrity: list[str]
    enqueued: int
    config: dict[str, Any]
    elapsed: float
    drained: bool
    history_dir: str
    integrity_checks: int = 0

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.integrity and self.drained

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "config": self.config, "elapsed_s": round(self.elapsed, 1),
                "enqueued": self.enqueued, "drained": self.drained, "faults": dict(self.faults),
                "integrity": self.integrity or ["ok"], "integrity_checks": self.integrity_checks, "check": self.report.to_dict()}


class _Run:
    def __init__(self, cfg: ChaosConfig, say: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.say = say
        self.rng = random.Random(cfg.seed)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"tether-chaos-{cfg.seed}-"))
        self.hist = self.tmp / "history"
        self.hist.mkdir()
        self.offset = time.time() - time.monotonic()
        self.started_wall = time.time()
        self.faults: Counter[str] = Counter()
        self.driver_events: list[dict[str, Any]] = []
        self.pg: ScratchPostgres | None = None
        self.sqlite_path: str | None = None
        self.url = self._database()
        self.store: Store = open_store(self.url)
        self.store.migrate()
        configure_limits(self.store)  # I8: the limited queue's concurrency, and the limit keys' pattern
        self.store.add_schedule(dynamic_spec())  # I6 for a schedule added at run time, beside the code one
        self.effects = Effects(self.url)  # I7: the transactional workload's table
        self.effects.create()
        self.flows = FlowLoad(self.url, steps=max(12, cfg.jobs // 4), seed=cfg.seed + 9)  # I9: its own rng
        self.flows.create()
        # The producer announces what it enqueued, as Tether's enqueue does.
        self.transport: Transport = open_transport(cfg.transport_spec())
        self.slots: list[_Slot] = []
        self.enqueued: list[int] = []
        self._unacked = 0
        self._plain = 0  # plain jobs offered, acknowledged or not
        self.integrity: list[str] = []
        self.integrity_checks = 0
        self._heal_at: dict[int, float] = {}
        self._last_restart = 0.0
        self._restarting: threading.Thread | None = None
        self.outages: list[tuple[float, float]] = []  # server restarts and failovers, wall clock
        self.failovers: list[Failover] = []
        self._round: list[str] = []  # fault kinds still to inject in this round

    # -- set-up --------------------------------------------------------------------
    def _database(self) -> str:
        cfg = self.cfg
        if cfg.scratch_postgres:
            if "failover" in cfg.faults:
                self.say(f"starting a scratch PostgreSQL primary and its {cfg.replication} standby for this run")
                self.pg = ScratchPair(synchronous=cfg.replication == "sync")
            else:
                self.say("starting a scratch PostgreSQL server for this run")
                self.pg = ScratchPostgres()
            return with_schema(self.pg.url, "tether_chaos")
        if cfg.database is None or parse_database_url(cfg.database).backend == "sqlite":
            folder = (os.path.dirname(os.path.abspath(parse_database_url(cfg.database).url))
                      if cfg.database else str(self.tmp))
            self.sqlite_path = os.path.join(folder, f"tether-chaos-{cfg.seed}.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(self.sqlite_path + suffix):
                    os.remove(self.sqlite_path + suffix)
            return f"sqlite:///{self.sqlite_path}"
        return with_schema(cfg.database, validate_identifier(f"tether_chaos_{cfg.seed}"))

    def _event(self, event: str, **fields: Any) -> None:
        self.driver_events.append({"e": event, "m": time.monotonic(), "t": time.time(), "w": "driver", **fields})

    def _spawn(self, slot: _Slot) -> None:
        env = dict(os.environ)
        env.update({
            "TETHER_DATABASE_URL": slot.url, "TETHER_HISTORY_DIR": str(self.hist),
            "TETHER_CHAOS_TTL": str(self.cfg.lease_ttl), "TETHER_CHAOS_HB": str(self.cfg.heartbeat_interval),
            "TETHER_CHAOS_REAPER": str(self.cfg.reaper_interval),
            "TETHER_CHAOS_CONCURRENCY": str(self.cfg.concurrency),
            "TETHER_CHAOS_TRANSPORT": self.cfg.transport_spec() or "",
            "TETHER_FAILPOINT_SEED": str(self.rng.randrange(2**31)),
        })
        if "kill" in self.cfg.faults:
            env["TETHER_FAILPOINTS"] = ",".join(f"{k}:{v}" for k, v in FAILPOINT_ODDS.items())
        if slot.skew:
            env.update({"LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"{slot.skew:+.0f}s",
                        "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"})
        with (self.tmp / f"worker-{slot.index}.log").open("ab") as err:
            slot.proc = subprocess.Popen([sys.executable, "-m", "tether.chaos.workerproc"], env=env,
                                         stdout=subprocess.DEVNULL, stderr=err)
        slot.restart_at = slot.stopped_until = slot.healed_at = None
        slot.killed = slot.started = False
        slot.read = {}
        slot.stale = set(self.hist.glob(f"worker-{slot.proc.pid}-*.jsonl"))
        self._event("spawn", slot=slot.index, pid=slot.proc.pid, skew=slot.skew)

    def start_workers(self) -> None:
        base = urlsplit(self.url)
        for i in range(self.cfg.workers):
            url, proxy = self.url, None
            if "partition" in self.cfg.faults:
                proxy = TCPProxy(base.hostname or "127.0.0.1", base.port or 5432)
                url = self.url.replace(base.netloc, f"{base.username or 'postgres'}@127.0.0.1:{proxy.port}", 1)
            skew = self.rng.choice([-90.0, -20.0, 20.0, 90.0]) if "skew" in self.cfg.faults and i % 2 else 0.0
            slot = _Slot(i, url, proxy, skew)
            self.slots.append(slot)
            self._spawn(slot)

    # -- the fault schedule ------------------------------------------------------------
    def _healthy(self) -> list[_Slot]:
        """Workers running, not stopped and not cut off. Faults never take the
        last of these: I5 promises recovery by a healthy worker, so the
        schedule keeps one (failpoints may still take it, briefly). The same
        rules as the checker's (``healthy_spans``): a new worker counts once it
        has reached the database, and a healed one once the database answered
        a request sent after the heal (one caught in the blackhole waits on a
        connection whose bytes were dropped)."""
        return [s for s in self.slots if s.proc is not None and s.proc.poll() is None
                and s.stopped_until is None and s.index not in self._heal_at and self._reached(s)]

    def _reached(self, slot: _Slot) -> bool:
        if slot.started and slot.healed_at is None:
            return True
        assert slot.proc is not None
        for path in self.hist.glob(f"worker-{slot.proc.pid}-*.jsonl"):
            if path in slot.stale:
                continue  # an earlier process's, which had the same pid
            with path.open("rb") as f:
                f.seek(slot.read.get(path, 0))
                chunk = f.read()
            whole = chunk[:chunk.rfind(b"\n") + 1]  # a line being written is read next time
            slot.read[path] = slot.read.get(path, 0) + len(whole)
            for line in whole.splitlines():
                e = json.loads(line)
                slot.started = slot.started or e.get("e") == "started"
                if slot.healed_at is not None and answered_since(e, slot.healed_at):
                    slot.healed_at = None
        return slot.started and slot.healed_at is None

    def _fault(self) -> bool:
        """Inject the next fault. Faults come in rounds, each switched-on kind
        once per round in a seeded order, so that a short run exercises every
        kind; a kind that cannot be injected now (no spare healthy worker, a
        restart too soon after the last) waits its turn while the others go."""
        if not self._round:
            self._round = sorted(self.cfg.faults - {"skew"})
            self.rng.shuffle(self._round)
        for kind in list(self._round):
            if self._inject(kind):
                self._round.remove(kind)
                self.faults[kind] += 1
                return True
        return False

    def _inject(self, kind: str) -> bool:
        healthy = self._healthy()
        alive = healthy if len(healthy) > 1 else []
        ttl = self.cfg.lease_ttl
        if kind == "kill" and alive:
            slot = self.rng.choice(alive)
            assert slot.proc is not None
            slot.proc.kill()
            slot.killed = True
            self._event("fault", kind="kill", slot=slot.index, pid=slot.proc.pid)
        elif kind == "stop" and alive:
            slot = self.rng.choice(alive)
            assert slot.proc is not None
            slot.proc.send_signal(signal.SIGSTOP)
            slot.stopped_until = time.monotonic() + self.rng.uniform(1.2, 2.5) * ttl
            self._event("fault", kind="stop", slot=slot.index, pid=slot.proc.pid)
            if self.sqlite_path is not None:
                self._event("stop_lock", slot=slot.index, pid=slot.proc.pid, holds=holds_write_lock(self.sqlite_path))
        elif kind == "partition" and alive:
            slot = self.rng.choice(alive)
            assert slot.proxy is not None
            if self.rng.random() < 0.5:
                slot.proxy.blackhole()
                self._heal_at[slot.index] = time.monotonic() + self.rng.uniform(1.2, 2.5) * ttl
                self._event("fault", kind="partition", mode="blackhole", slot=slot.index)
            else:
                slot.proxy.reset()
                self._event("fault", kind="partition", mode="reset", slot=slot.index)
        elif (kind in ("restart", "failover") and self.pg is not None and time.monotonic() - self._last_restart > 8
              and not (self._restarting and self._restarting.is_alive())):
            server_fault: Callable[..., None]
            arg: str | float
            if kind == "restart":
                server_fault, arg = self._restart, self.rng.choice(["immediate", "fast"])
            else:  # asynchronous: the WAL sender held back first, as a slow link would
                server_fault, arg = self._failover, 0.0 if self.cfg.replication == "sync" else self.rng.uniform(0.5, 2)
            self._last_restart = time.monotonic()
            # On a thread of its own: the fault loop keeps healing and resuming
            # workers on schedule while the server is away.
            self._restarting = threading.Thread(target=server_fault, args=(arg,), daemon=True)
            self._restarting.start()
        else:
            return False
        return True

    def _restart(self, mode: str) -> None:
        assert self.pg is not None
        start = time.time()
        away = self.pg.restart(mode)
        self.outages.append((start, start + away))
        self._event("fault", kind="restart", mode=mode, away=away)

    def _failover(self, lag: float) -> None:
        assert isinstance(self.pg, ScratchPair)
        try:
            f = self.pg.failover(lag)
        except Exception as exc:  # the harness's own failure: the run cannot be judged
            self.integrity.append(f"the failover failed: {exc}")
            self._event("failover_failed", error=str(exc)[:500])
            return
        self.failovers.append(f)
        # Nothing commits from the kill to the promotion; asynchronous, what committed in the loss window is
        # undone too. A promotion slower than RECONNECT_TIMEOUT: a waiting call asks again every WAIT_SLICE
        # (outage.py; it waited its POOL_TIMEOUT: a tick 5 s late), its connect maybe in a back-off.
        sync, end = self.cfg.replication == "sync", f.promoted_at
        if end - f.killed_at > RECONNECT_TIMEOUT:
            end += RECONNECT_TIMEOUT + WAIT_SLICE
        self.outages.append((f.killed_at if sync else loss_windows([f])[0][0], end))
        self._event("fault", kind="failover", **asdict(f))

    def _tend(self, *, faults_on: bool) -> None:
        """Resume stopped workers, heal partitions, restart dead workers."""
        now = time.monotonic()
        for slot in self.slots:
            assert slot.proc is not None
            if slot.stopped_until is not None and (now >= slot.stopped_until or not faults_on):
                slot.proc.send_signal(signal.SIGCONT)
                slot.stopped_until = None
                self._event("resume", slot=slot.index, pid=slot.proc.pid)
            if slot.proxy is not None and (now >= self._heal_at.get(slot.index, float("inf")) or not faults_on):
                slot.proxy.heal()
                if self._heal_at.pop(slot.index, None) is not None:
                    slot.healed_at = time.monotonic()
                    self._event("heal", slot=slot.index, pid=slot.proc.pid)
            if slot.proc.poll() is not None:
                if slot.restart_at is None:
                    slot.restart_at = now + (self.rng.uniform(0.2, 1.5) if faults_on else 0)
                    self._event("died", slot=slot.index, pid=slot.proc.pid, code=slot.proc.returncode)
                    if slot.proc.returncode == -signal.SIGKILL and not slot.killed:
                        self.faults["failpoint"] += 1  # the worker SIGKILLed itself at a failpoint
                    if self.sqlite_path:
                        # A kill may land mid-write: the file must still be a sound database.
                        self.integrity_checks += 1
                        self.integrity.extend(f"after a kill of pid {slot.proc.pid}: {p}"
                                              for p in self.store.integrity_check())
                elif now >= slot.restart_at:
                    self._spawn(slot)

    # -- the run -----------------------------------------------------------------------
    def run(self) -> ChaosResult:
        cfg = self.cfg
        t_start = time.monotonic()
        self.start_workers()
        end = t_start + cfg.duration
        produce_until = t_start + cfg.duration * 0.7
        next_fault = t_start + self.rng.uniform(0.5, 1.5) * cfg.lease_ttl
        last_line = 0.0
        # The producer runs on a thread of its own: an enqueue may wait on an
        # unreachable server, and the fault loop must keep its schedule meanwhile.
        producer = threading.Thread(target=self._producer, args=(t_start, produce_until, end), daemon=True)
        producer.start()
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_fault:  # when none could be injected (no spare healthy worker), soon again
                next_fault = now + (self.rng.uniform(0.3, 1.0) if self._fault() else 0.1) * cfg.lease_ttl
            self._tend(faults_on=True)
            if now - last_line > 5:
                refused = f" ({self._unacked} refused by an unreachable database)" if self._unacked else ""
                self.say(f"  +{now - t_start:5.0f}s  enqueued {len(self.enqueued)} (plain {self._plain}/{cfg.jobs}; "
                         f"the rest workflows and batches){refused}  faults {dict(self.faults)}")
                last_line = now
            time.sleep(0.05)
        producer.join()
        if self._restarting is not None:
            self._restarting.join()
        self.say("faults off: resuming, healing and restarting workers; draining")
        drained = self._drain()
        self._stop_workers()
        report = self._check()
        integrity = self.integrity + self.store.integrity_check()
        self.integrity_checks += 1
        return ChaosResult(
            report=report, faults=self.faults, integrity=integrity, enqueued=len(self.enqueued),
            config=config_dict(cfg, self.url), elapsed=time.monotonic() - t_start, drained=drained,
            history_dir=str(self.hist), integrity_checks=self.integrity_checks,
        )

    def _producer(self, t_start: float, produce_until: float, end: float) -> None:
        """By produce_until every job has been offered (the plain ones, and flows.py's workflows and batches)."""
        cfg = self.cfg
        rng = random.Random(self.rng.randrange(2**31))
        while time.monotonic() < end:
            for enqueue in self.flows.due((time.monotonic() - t_start) / (produce_until - t_start)):
                self._offer(enqueue, 0)
            offered = self._plain
            if offered >= cfg.jobs:
                if self.flows.done:
                    return
                time.sleep(0.05)
                continue
            due = cfg.jobs * min(1.0, (time.monotonic() - t_start) / (produce_until - t_start))
            batch = min(cfg.jobs - offered, int(due) - offered)
            # Phases of short jobs (a few ms, enqueued in bursts of about a
            # second's worth: workers prefetch, claiming a batch ahead)
            # alternate with long ones (buffers are handed back), so faults hit both.
            short = int((time.monotonic() - t_start) / SHORT_PHASE) % 2 == 0
            burst = max(8, int(cfg.jobs / (produce_until - t_start))) if short else 1
            if batch >= burst or (batch > 0 and time.monotonic() >= produce_until):
                self._produce(batch, rng, short=short)
            time.sleep(0.05)

    def _produce(self, n: int, rng: random.Random, *, short: bool = False) -> None:
        self._plain += n
        jobs = [
            NewJob(task=rng.choice([SYNC_TASK, ASYNC_TASK, *TX_TASKS]), queue=queue, exclusive_key=key, limit_key=lkey,
                   args_json=json.dumps({"ms": ms, "fail": rng.random() < 0.05}),
                   max_attempts=rng.choice([4, 6, 10]), backoff_base=0.05)
            for queue, key, lkey, ms in (place(rng, short, QUEUE) for _ in range(n))
        ]
        queue_of: dict[int, str] = {}
        def enqueue(store: Store) -> tuple[list[int], list[int]]:
            ids = [int(i) for i in store.enqueue(jobs)]
            queue_of.update(zip(ids, (j.queue for j in jobs), strict=True))
            return ids, ids
        self._offer(enqueue, n, queue_of)

    def _offer(self, enqueue: Callable[[Store], tuple[list[int], list[int]]], n: int,
               queue_of: dict[int, str] | None = None) -> None:
        """Enqueue (all ids, those due now); a refusal is not acknowledged: the checker does not count it."""
        try:
            sent = time.time()
            ids, due = enqueue(self.store)
        except Exception as exc:
            self._unacked += n
            self._event("enqueue_failed", n=n, error=str(exc)[:200])
            return
        self.enqueued.extend(ids)
        self._event("enqueued", jobs=ids, sent=sent)
        self.transport.publish([(i, (queue_of or {}).get(i, QUEUE)) for i in due])

    def _drain(self) -> bool:
        deadline = time.monotonic() + self.cfg.drain_timeout
        while time.monotonic() < deadline:
            self._tend(faults_on=False)
            try:
                left = sum(n for (q, s), n in self.store.stats().counts.items()
                           if q in (QUEUE, LIMITED_QUEUE) and s in (JobState.QUEUED, JobState.RUNNING))
            except Exception:
                left = -1  # the database may still be coming back
            if left == 0:
                return True
            time.sleep(0.25)
        return False

    def _stop_workers(self) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.send_signal(signal.SIGCONT)
                slot.proc.send_signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.proc is not None:
                try:
                    slot.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    slot.proc.kill()
                    slot.proc.wait(timeout=5)
            if slot.proxy is not None:
                slot.proxy.close()

    def _check(self) -> CheckReport:
        # (an id acknowledged twice: an asynchronous failover lost the first job and gave its id out again)
        ids = list(dict.fromkeys(self.enqueued))
        events = read_events(self.driver_events, self.tmp, self.hist, ids)
        jobs, attempts = read_jobs(self.store, ids)
        report = check(events, jobs, attempts, enqueued=self.enqueued, lease_ttl=self.cfg.lease_ttl,
                       reaper_interval=self.cfg.reaper_interval, mono_to_wall=self.offset, outages=self.outages,
                       sqlite=self.sqlite_path is not None)
        report.invariants["I6"] = schedule_invariant(
            self.store, events, mono_to_wall=self.offset, start=self.started_wall, end=time.time(),
            bound=self.cfg.reaper_interval, outages=self.outages, sqlite=self.sqlite_path is not None)
        report.invariants["I8"], limits = limits_invariant(self.store, ids, postgres=self.sqlite_path is None)
        report.counts.update({f"limits_{k}": v for k, v in limits.items()})
        report = self.effects.judge(report, jobs, attempts, self.store)  # I7
        report = self.flows.judge(report, self.store, events, mono_to_wall=self.offset, bound=self.cfg.reaper_interval,
                                  outages=self.outages, sqlite=self.sqlite_path is not None)  # I9
        if "failover" not in self.cfg.faults:
            return report
        return judge_failovers(report, events, jobs, attempts, failovers=self.failovers, mono_to_wall=self.offset,
                               created=read_created(self.store, ids),
                               synchronous=self.cfg.replication == "sync")

    def cleanup(self) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.send_signal(signal.SIGCONT)
                slot.proc.kill()
        if not self.cfg.keep:
            try:
                self.store.destroy()
            except Exception as exc:
                self.say(f"could not remove the chaos tables: {exc}")
        self.store.close()
        if not self.cfg.keep:
            try:
                self.transport.destroy()
            except Exception as exc:
                self.say(f"could not remove the chaos stream: {exc}")
        self.transport.close()
        if self.pg is not None:
            self.pg.close()
        if self.sqlite_path and not self.cfg.keep:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(self.sqlite_path + suffix):
                    os.remove(self.sqlite_path + suffix)
        if self.cfg.out_dir is not None:
            self.cfg.out_dir.mkdir(parents=True, exist_ok=True)
            shutil.copytree(self.tmp, self.cfg.out_dir / self.tmp.name, dirs_exist_ok=True)
        if not self.cfg.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def run(cfg: ChaosConfig, say: Callable[[str], None] = print) -> ChaosResult:
    cfg.validate()
    r = _Run(cfg, say)
    try:
        return r.run()
    finally:
        r.cleanup()
