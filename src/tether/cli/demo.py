"""``tether demo``: kill a worker mid-job and watch the database take its jobs back.

On a fresh SQLite file it starts several real worker processes with short
timers, enqueues a batch of jobs that sleep and report progress, SIGKILLs one
worker while it holds jobs, and shows the survivors' reapers recovering them.
The summary is computed from the database and from the handlers' side-effect
file, not from what the demo believes happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..model import TERMINAL_STATES, Job, JobState
from ..store import Store
from . import demo_app, render
from .common import BadUsage, configure_app
from .demo_data import DEMO_TIMERS, DemoFacts, Proc, Recovery
from .demo_summary import Summary

__all__ = ["run_demo"]

CONCURRENCY = 3  # per worker process
TICK = 0.25  # how often the display polls the database
GIVE_UP_AFTER = 120.0  # seconds: a demo that has not finished by then has found a problem
KILL_AT_PROGRESS = 0.25  # a job this far along counts as "mid-job"
APP_REF = "tether.cli.demo_app:app"


@dataclass
class Demo:
    n_jobs: int
    n_workers: int
    folder: Path
    console: Console
    procs: list[Proc] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)
    victim: Proc | None = None
    recoveries: list[Recovery] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    problems: list[str] = field(default_factory=list)

    @property
    def db_path(self) -> Path:
        return self.folder / "demo.db"

    @property
    def runs_path(self) -> Path:
        return self.folder / "runs.csv"

    @property
    def url(self) -> str:
        return f"sqlite:///{self.db_path}"

    def say(self, message: str | Text) -> None:
        stamp = Text(f"+{time.monotonic() - self.t0:5.1f}s ", style="dim")
        self.console.print(stamp + (Text.from_markup(message) if isinstance(message, str) else message))

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> bool:
        app = demo_app.app
        configure_app(app, url=self.url, lease_ttl=DEMO_TIMERS.lease_ttl,
                      heartbeat_interval=DEMO_TIMERS.heartbeat_interval, reaper_interval=DEMO_TIMERS.reaper_interval)
        self.intro()
        try:
            applied = app.migrate()
            self.say(f"migrated a fresh SQLite database: {', '.join(applied)}")
            store = app.store
            self.start_workers()
            if not self.wait_registered(store):
                return False
            specs = [{"n": i, "seconds": 1.0 + (i * 7 % 5) * 0.25} for i in range(self.n_jobs)]
            self.job_ids = list(demo_app.work.enqueue_many(specs))
            self.say(f"enqueued {self.n_jobs} jobs (ids {self.job_ids[0]}-{self.job_ids[-1]}): each sleeps 1-2 s "
                     "in 8 steps, calling ctx.progress() after each, and first appends "
                     "job_id,attempt,pid to runs.csv")
            finished = self.watch(store)
            self.stop_workers()
            return self.summary(store) and finished
        finally:
            self.cleanup_procs()
            app.close()

    def intro(self) -> None:
        t = DEMO_TIMERS
        body = Text.assemble(
            ("What happens: ", "bold"),
            f"{self.n_workers} worker processes share one SQLite file in {self.folder}. "
            f"{self.n_jobs} jobs are enqueued. While one worker is mid-job it gets ",
            ("SIGKILL", "bold red"),
            ": no goodbye, no release. The database still says it owns those jobs until their leases lapse; "
            "then a surviving worker's reaper sends them back to the queue and another worker runs them.\n\n",
            ("Timers are shortened for the demo: ", "bold"),
            f"lease TTL {t.lease_ttl:g} s, heartbeat every {t.heartbeat_interval:g} s, reaper every "
            f"{t.reaper_interval:g} s (defaults: 30 s, 10 s, 10 s). A dead worker's jobs are claimable again within "
            f"lease_ttl + reaper_interval = {t.recovery_bound:g} s.",
        )
        self.console.print(Panel(body, title="tether demo", border_style="blue", expand=False, width=100))

    def start_workers(self) -> None:
        env = {**os.environ, "TETHER_DATABASE_URL": self.url, demo_app.RUNS_ENV: str(self.runs_path),
               "PYTHONUNBUFFERED": "1"}
        env.pop("TETHER_APP", None)
        t = DEMO_TIMERS
        cmd = [sys.executable, "-m", "tether", "worker", "--app", APP_REF, "--concurrency", str(CONCURRENCY),
               "--lease-ttl", f"{t.lease_ttl:g}", "--heartbeat-interval", f"{t.heartbeat_interval:g}",
               "--reaper-interval", f"{t.reaper_interval:g}", "--shutdown-timeout", "10", "--log-level", "info"]
        for number in range(1, self.n_workers + 1):
            log_path = self.folder / f"worker-{number}.log"
            log_file = open(log_path, "wb")  # noqa: SIM115 - closed in cleanup_procs
            # A session of its own: Ctrl-C at the terminal reaches the demo, which
            # then stops its workers itself.
            popen = subprocess.Popen(cmd, env=env, cwd=self.folder, stdout=log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            self.procs.append(Proc(number, popen, log_path, log_file))
        self.say(f"started {self.n_workers} workers: [bold]python -m tether worker --app {APP_REF} "
                 f"-c {CONCURRENCY} --lease-ttl {t.lease_ttl:g} --heartbeat-interval {t.heartbeat_interval:g} "
                 f"--reaper-interval {t.reaper_interval:g}[/bold]")

    def wait_registered(self, store: Store) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            by_pid = {w.pid: w.id for w in store.list_workers()}
            for p in self.procs:
                p.worker_id = by_pid.get(p.pid, p.worker_id)
            if all(p.worker_id for p in self.procs):
                self.say("workers up: " + ", ".join(f"{p.number}=pid {p.pid}" for p in self.procs))
                return True
            for p in self.procs:
                if not p.alive:
                    self.fail(f"{p.label} exited with code {p.popen.returncode} before it started working")
                    self.show_log(p)
                    return False
            time.sleep(0.1)
        self.fail("the workers did not register within 30 s")
        return False

    # -- watching -----------------------------------------------------------------------------
    def watch(self, store: Store) -> bool:
        """Poll until every job is finished, killing one worker mid-job on the way."""
        give_up = time.monotonic() + GIVE_UP_AFTER
        next_line = time.monotonic()
        with Live(console=self.console, refresh_per_second=8, transient=False) as live:
            while True:
                stats = store.stats()
                running = store.list_jobs(state="running", limit=self.n_jobs)
                counts: Counter[str] = Counter()
                for (_, state), n in stats.counts.items():
                    counts[state] += n
                if self.victim is None:
                    self.maybe_kill(store, running, counts[str(JobState.QUEUED)])
                self.track(store)
                self.check_procs()
                live.update(self.frame(counts, running, stats.now))
                if not self.console.is_terminal and time.monotonic() >= next_line:
                    self.say(self.counts_text(counts))
                    next_line = time.monotonic() + 2.0
                done = sum(counts[str(s)] for s in TERMINAL_STATES)
                if done >= self.n_jobs:
                    break
                if not any(p.alive for p in self.procs):
                    self.fail("every worker process is gone and jobs are left")
                    return False
                if time.monotonic() > give_up:
                    self.fail(f"the jobs did not finish within {GIVE_UP_AFTER:g} s")
                    return False
                time.sleep(TICK)
        if not self.console.is_terminal:
            self.console.print()  # off a terminal rich prints the last frame without a newline
        self.say(f"all {self.n_jobs} jobs are finished")
        if self.victim is None:
            self.fail("every job finished before a worker could be killed mid-job")
        return True

    def maybe_kill(self, store: Store, running: list[Job], queued: int) -> None:
        """Kill the busiest worker that is mid-job, once the queue is short
        enough that the survivors will have free slots when the jobs come back
        (a recovered job is due at once, but behind the jobs queued before it)."""
        if queued > CONCURRENCY * (self.n_workers - 1):
            return
        held: dict[str, list[Job]] = defaultdict(list)
        for job in running:
            if job.locked_by:
                held[job.locked_by].append(job)
        candidates = [
            p for p in self.procs
            if p.alive and p.worker_id in held
            and any((j.progress or 0.0) >= KILL_AT_PROGRESS for j in held[p.worker_id or ""])
        ]
        if not candidates:
            return
        victim = max(candidates, key=lambda p: len(held[p.worker_id or ""]))
        os.kill(victim.pid, signal.SIGKILL)
        victim.killed_at = store.db_now()
        victim.popen.wait(timeout=10)
        victim.announced_exit = True
        self.victim = victim
        # Read what it held after it is dead: nothing it does can change that now.
        jobs = [j for j in store.list_jobs(state="running", limit=self.n_jobs) if j.locked_by == victim.worker_id]
        self.recoveries = [Recovery(j.id, j.attempt, j.lease_until, j.progress) for j in jobs]
        held_text = ", ".join(f"{j.id} ({(j.progress or 0):.0%})" for j in jobs) or "nothing"
        last_lease = max((j.lease_until for j in jobs if j.lease_until), default=None)
        lapse = f" (the last at +{_secs(last_lease, victim.killed_at):.1f}s)" if last_lease else ""
        self.say(f"[bold red]SIGKILL → {victim.label}[/bold red], mid-job, holding jobs {held_text}. Its leases "
                 f"now run out{lapse}; then a survivor's reaper takes the jobs back "
                 f"(bound: {DEMO_TIMERS.recovery_bound:g} s after the kill)")

    def track(self, store: Store) -> None:
        victim = self.victim
        if victim is None or victim.killed_at is None:
            return
        for r in self.recoveries:
            if r.state in TERMINAL_STATES:
                continue
            job = store.get_job(r.job_id)
            if job is None:
                continue
            by_attempt = {a.attempt: a for a in job.attempts}
            lost = by_attempt.get(r.lost_attempt)
            if r.reaped_at is None and lost is not None and lost.finished_at is not None:
                r.reaped_at, r.outcome = lost.finished_at, lost.outcome
                where = "back in the queue" if job.attempt > r.lost_attempt or job.state is JobState.QUEUED \
                    else str(job.state)
                self.say(f"job {r.job_id}: attempt {r.lost_attempt} ended [bold]{lost.outcome}[/bold] "
                         f"{_secs(lost.finished_at, victim.killed_at):.1f}s after the kill → {where}")
            nxt = by_attempt.get(r.lost_attempt + 1)
            if r.reclaimed_at is None and nxt is not None:
                r.reclaimed_at, r.reclaimed_by = nxt.claimed_at, nxt.worker
                self.say(f"job {r.job_id}: attempt {nxt.attempt} claimed by {self.name_of(nxt.worker)} "
                         f"{_secs(nxt.claimed_at, victim.killed_at):.1f}s after the kill")
            if job.state in TERMINAL_STATES:
                r.state = job.state
                self.say(f"job {r.job_id}: [bold]{job.state}[/bold] (attempt {job.attempt})")

    def check_procs(self) -> None:
        for p in self.procs:
            if not p.alive and not p.announced_exit:
                p.announced_exit = True
                self.problems.append(f"{p.label} exited on its own with code {p.popen.returncode}")
                self.say(f"[bold red]{p.label} exited on its own with code {p.popen.returncode}[/bold red]")
                self.show_log(p)

    def name_of(self, worker_id: str | None) -> str:
        for p in self.procs:
            if p.worker_id == worker_id:
                return p.label
        return worker_id or "?"

    def counts_text(self, counts: Counter[str]) -> Text:
        out = Text()
        for state in render.STATE_ORDER:
            out.append(f"{state} ", style="dim")
            out.append(f"{counts[str(state)]:<4}", style=render.STATE_STYLE[state])
        return out

    def frame(self, counts: Counter[str], running: list[Job], now: datetime) -> RenderableType:
        succeeded = counts[str(JobState.SUCCEEDED)]
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=self.n_jobs, completed=succeeded, width=40),
                    Text(f"{succeeded}/{self.n_jobs} succeeded"))
        held: dict[str | None, list[Job]] = defaultdict(list)
        for job in running:
            held[job.locked_by].append(job)
        workers = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for col in ("worker", "pid", "status", "running jobs (progress)"):
            workers.add_column(col)
        for p in self.procs:
            if p.killed_at is not None:
                status = Text("KILLED (SIGKILL)", style="bold red")
            elif p.alive:
                status = Text("alive", style="green")
            else:
                status = Text(f"exited {p.popen.returncode}", style="yellow")
            jobs = " ".join(f"{j.id}:{(j.progress or 0):.0%}" for j in sorted(held.get(p.worker_id, []),
                                                                              key=lambda j: j.id))
            mine = held.get(p.worker_id, [])
            if p.killed_at is not None and mine:
                lapse = max((j.lease_until for j in mine if j.lease_until), default=now)
                left = (lapse - now).total_seconds()
                jobs += (f"  (owner dead; leases lapse in {left:.1f}s)" if left > 0
                         else "  (leases lapsed; next reaper tick takes them)")
            workers.add_row(str(p.number), str(p.pid), status, jobs)
        parts: list[RenderableType] = [self.counts_text(counts), bar, workers]
        if self.victim is not None:
            recovered = sum(1 for r in self.recoveries if r.reaped_at is not None)
            parts.append(Text(f"jobs recovered from the killed worker: {recovered}/{len(self.recoveries)}",
                              style="bold"))
        elapsed = time.monotonic() - self.t0
        return Panel(Group(*parts), title=f"tether demo  +{elapsed:.1f}s", border_style="blue", expand=False)

    # -- ending -------------------------------------------------------------------------------
    def stop_workers(self) -> None:
        survivors = [p for p in self.procs if p.alive]
        for p in survivors:
            p.popen.send_signal(signal.SIGTERM)
        codes = []
        for p in survivors:
            try:
                codes.append(str(p.popen.wait(timeout=20)))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
                codes.append("killed after 20 s")
                self.problems.append(f"{p.label} did not stop within 20 s of SIGTERM")
        self.say(f"stopped the {len(survivors)} surviving workers with SIGTERM (graceful); exit codes: "
                 f"{', '.join(codes) or '-'}")

    def cleanup_procs(self) -> None:
        for p in self.procs:
            if p.alive:
                p.popen.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
            p.log_file.close()

    def fail(self, message: str) -> None:
        self.problems.append(message)
        self.say(f"[bold red]{message}[/bold red]")

    def show_log(self, p: Proc, lines: int = 15) -> None:
        p.log_file.flush()
        try:
            tail = p.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return
        self.console.print(Panel("\n".join(tail) or "(empty)", title=f"last lines of {p.log_path.name}",
                                 border_style="red"))

    def summary(self, store: Store) -> bool:
        facts = DemoFacts(console=self.console, procs=self.procs, runs_path=self.runs_path, job_ids=self.job_ids,
                          problems=self.problems, victim=self.victim, recoveries=self.recoveries)
        return Summary(facts, store).show()


def _secs(later: datetime | None, earlier: datetime | None) -> float:
    if later is None or earlier is None:
        return float("nan")
    return (later - earlier).total_seconds()


def run_demo(*, n_jobs: int, n_workers: int, keep: str | None, console: Console) -> bool:
    """Run the demo; True when every job succeeded exactly once and the kill was recovered."""
    if keep is not None:
        folder = Path(keep).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        if (folder / "demo.db").exists():
            raise BadUsage(f"{folder} already holds a demo database (demo.db); pick a new or empty directory")
    else:
        folder = Path(tempfile.mkdtemp(prefix="tether-demo-"))
    demo = Demo(n_jobs=n_jobs, n_workers=n_workers, folder=folder, console=console)
    ok = False
    try:
        ok = demo.run()
    except KeyboardInterrupt:
        console.print("[bold]interrupted[/bold]: stopped the workers")
        raise
    finally:
        if keep is not None or not ok:
            console.print(f"files kept in [bold]{folder}[/bold]: demo.db, runs.csv, worker-N.log "
                          f"(try: tether -d sqlite:///{folder / 'demo.db'} status)")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return ok
