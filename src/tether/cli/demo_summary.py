"""The demo's closing summary, computed from the database and from the handlers'
side-effect file (``runs.csv``), never from what the demo thinks happened."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from rich import box
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..model import Job, JobState, Outcome
from ..store import Store
from . import render
from .demo_data import DEMO_TIMERS, SLACK, DemoFacts

__all__ = ["Summary"]

OK = Text("✓", style="bold green")
BAD = Text("✗", style="bold red")
WARN = Text("!", style="bold yellow")


class Summary:
    def __init__(self, demo: DemoFacts, store: Store) -> None:
        self.demo = demo
        self.store = store
        self.console = demo.console
        self.ok = True

    def check(self, passed: bool, text: str | Text, *, warn_only: bool = False) -> None:
        mark = OK if passed else (WARN if warn_only else BAD)
        if not passed and not warn_only:
            self.ok = False
        self.console.print(Text.assemble(mark, " ", Text.from_markup(text) if isinstance(text, str) else text))

    def label(self, worker_id: str, *, short: bool = False) -> str:
        for p in self.demo.procs:
            if p.worker_id == worker_id:
                if short:
                    return f"{p.number}, pid {p.pid}" + (" (killed)" if p.killed_at is not None else "")
                return p.label + (", killed" if p.killed_at is not None else "")
        return worker_id

    def read_runs(self) -> list[tuple[int, int, int]]:
        runs: list[tuple[int, int, int]] = []
        try:
            lines = self.demo.runs_path.read_text().splitlines()
        except FileNotFoundError:
            return runs
        for line in lines:
            parts = line.split(",")
            if len(parts) == 3 and all(x.strip().isdigit() for x in parts):
                runs.append((int(parts[0]), int(parts[1]), int(parts[2])))
        return runs

    # -- the summary ----------------------------------------------------------------------
    def show(self) -> bool:
        demo = self.demo
        jobs = [j for j in (self.store.get_job(i) for i in demo.job_ids) if j is not None]
        runs = self.read_runs()
        self.console.print()
        self.console.print(Rule("[bold]summary[/bold]"))
        self.states(jobs)
        self.exactly_once(jobs)
        self.handler_runs(jobs, runs)
        recovered = self.recoveries(jobs)
        if recovered:
            self.history(recovered[0], runs)
        for problem in demo.problems:
            self.check(False, problem)
        self.console.print()
        if self.ok:
            self.console.print(Text.assemble(
                OK, (f" every one of the {len(demo.job_ids)} jobs succeeded exactly once; "
                     f"{len(recovered)} job(s) held by the killed worker were recovered and finished elsewhere.",
                     "bold green")))
        else:
            self.console.print(Text.assemble(BAD, (" the demo found a problem (see above).", "bold red")))
        return self.ok

    def states(self, jobs: list[Job]) -> None:
        counts = Counter(j.state for j in jobs)
        spread = ", ".join(f"{counts[s]} {s}" for s in render.STATE_ORDER if counts[s])
        n = len(self.demo.job_ids)
        self.check(counts[JobState.SUCCEEDED] == n == len(jobs),
                   f"jobs: {n} enqueued → {spread or 'none found'}")

    def exactly_once(self, jobs: list[Job]) -> None:
        wins = {j.id: [a for a in j.attempts if a.outcome is Outcome.SUCCEEDED] for j in jobs}
        total = sum(len(w) for w in wins.values())
        multi = [i for i, w in wins.items() if len(w) != 1]
        self.check(not multi and total == len(jobs),
                   f"state written once: {total} succeeded attempt(s) recorded for {len(jobs)} jobs"
                   + (f"; jobs without exactly one: {multi}" if multi else ", exactly one per job"))
        late = [j.id for j in jobs if j.finished_at is not None
                and any(a.claimed_at > j.finished_at for a in j.attempts)]
        self.check(not late, "terminal is final: no attempt was claimed after its job had finished"
                   + (f" (violated by jobs {late})" if late else ""))

    def handler_runs(self, jobs: list[Job], runs: list[tuple[int, int, int]]) -> None:
        per_job = Counter(job_id for job_id, _, _ in runs)
        spread = Counter(per_job[j.id] for j in jobs)
        parts = ", ".join(f"{spread[k]} job(s) {_times(k)}" for k in sorted(spread))
        self.console.print(Text.assemble(
            OK, f" handler runs (runs.csv): {len(runs)} for {len(jobs)} jobs: {parts}. ",
            ("Delivery is at-least-once: ", "bold"),
            "a handler cut off by the kill had already done its side effect; handlers dedupe on "
            "(ctx.job_id, ctx.attempt).",
        ))
        # Every run must belong to an attempt the database knows, on that attempt's worker.
        pid_of = {p.worker_id: p.pid for p in self.demo.procs}
        attempts = {(j.id, a.attempt): a for j in jobs for a in j.attempts}
        stray = [r for r in runs if (r[0], r[1]) not in attempts or pid_of.get(attempts[r[0], r[1]].worker) != r[2]]
        self.check(not stray, "every handler run matches an attempt in the database and that attempt's worker"
                   + (f"; unmatched runs: {stray[:10]}" if stray else ""))

    def recoveries(self, jobs: list[Job]) -> list[Job]:
        victim = self.demo.victim
        bound = DEMO_TIMERS.recovery_bound
        lapsed = [(j, a) for j in jobs for a in j.attempts if a.outcome is Outcome.LEASE_EXPIRED]
        if victim is None or victim.killed_at is None:
            self.check(False, "no worker was killed, so nothing was recovered")
            return []
        mine = [(j, a) for j, a in lapsed if a.worker == victim.worker_id]
        others = [(j, a) for j, a in lapsed if a.worker != victim.worker_id]
        self.check(bool(mine), f"recovered from the killed {victim.label}: {len(mine)} job(s), "
                               f"each through an attempt that ended [bold]lease_expired[/bold]")
        if others:
            self.check(False, f"{len(others)} lease(s) lapsed on workers that were alive (jobs "
                              f"{sorted(j.id for j, _ in others)}): their heartbeats were starved", warn_only=True)
        if not mine:
            return []
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left",
                      title=f"recovery, measured from the kill on the database clock (bound: lease_ttl + "
                            f"reaper_interval = {bound:g}s)")
        for col, just in (("job", "right"), ("lost attempt", "right"), ("progress at kill", "right"),
                          ("claimable again", "right"), ("", "left"), ("re-claimed", "right"),
                          ("by", "left"), ("final state", "left")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        progress_at_kill = {r.job_id: r.progress for r in self.demo.recoveries}
        slow = 0
        for job, a in sorted(mine, key=lambda ja: ja[0].id):
            assert a.finished_at is not None
            reaped = (a.finished_at - victim.killed_at).total_seconds()
            nxt = next((b for b in job.attempts if b.attempt == a.attempt + 1), None)
            within = reaped <= bound + SLACK
            slow += not within
            table.add_row(
                str(job.id), str(a.attempt), f"{(progress_at_kill.get(job.id) or 0):.0%}", f"{reaped:.1f}s",
                OK if within else WARN,
                f"{(nxt.claimed_at - victim.killed_at).total_seconds():.1f}s" if nxt else "-",
                self.label(nxt.worker) if nxt else "-", render.state_text(job.state),
            )
        self.console.print(table)
        self.check(slow == 0, f"every recovered job was claimable again within {bound:g}s of the kill "
                              f"(+{SLACK:g}s slack); re-claims wait for a free slot and for jobs queued earlier",
                   warn_only=True)
        return [j for j, _ in sorted(mine, key=lambda ja: ja[0].id)]

    def history(self, job: Job, runs: list[tuple[int, int, int]]) -> None:
        victim = self.demo.victim
        killed_at = victim.killed_at if victim else None
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left",
                      title=f"attempts history of job {job.id}, a recovered job (`tether job {job.id}` shows it too; "
                            "times relative to the kill)")
        for col in ("#", "worker", "claimed at", "finished at", "outcome", "error", "handler ran in"):
            table.add_column(col)
        for a in job.attempts:
            pids = [str(pid) for j, n, pid in runs if j == job.id and n == a.attempt]
            table.add_row(str(a.attempt), self.label(a.worker, short=True), _clock(a.claimed_at, killed_at),
                          _clock(a.finished_at, killed_at), render.outcome_text(a.outcome),
                          render.data(a.error or "", "red", lines=True), f"pid {', '.join(pids)}" if pids else "none")
        self.console.print(table)


def _times(k: int) -> str:
    return {0: "never ran", 1: "ran once", 2: "ran twice"}.get(k, f"ran {k} times")


def _clock(dt: datetime | None, killed_at: datetime | None) -> str:
    if dt is None:
        return "-"
    if killed_at is None:
        return dt.astimezone().strftime("%H:%M:%S.%f")[:-3]
    return f"{(dt - killed_at).total_seconds():+.1f}s"
